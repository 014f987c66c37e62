"""Share, deploy, submit: a mixed classifier leaves mixzoo.

One module per job: :mod:`.hub` (a card by ``hf-hub:ORG/NAME`` id, from the Hugging Face cache), :mod:`.push` (the
Hub-ready folder with its model card, and the upload), :mod:`.export` (one ONNX or torch.export artifact that runs
without mixzoo), :mod:`.robustbench` (RobustBench's ``model_info`` JSON from a bench report). Nothing here is
imported by the layers below; the ``share`` built-in plugin makes ``hf-hub:`` ids work wherever a card is taken.
"""
