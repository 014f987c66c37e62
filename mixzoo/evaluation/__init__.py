"""Evaluation of mixed classifiers: the bench, its reports, verification of its points, the eps sweep and the
statistics they use."""
