"""Training base models for the built-in zoo (standard, adversarial, noise-augmented)."""
