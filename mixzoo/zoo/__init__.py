"""Models and data: base classifiers by name, datasets through the hook, black boxes, and ABC/RBC pairs."""
