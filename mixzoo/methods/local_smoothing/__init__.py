"""Locally biased smoothing (paper 003; 001 Sec. 2.3, 3, App. B): ``knn-smoothing`` and ``local-smoothing``.

:mod:`.gradients` (per-class input gradients, dual norms), :mod:`.knn` (the K-NN direction oracle),
:mod:`.smoothing` (the formula, the classifiers and their attack-time gradients), :mod:`.method` (the plugins).
"""

from mixzoo.methods.local_smoothing.knn import KNNOracle
from mixzoo.methods.local_smoothing.method import KNNSmoothing, LocalSmoothing
from mixzoo.methods.local_smoothing.smoothing import (
    R_OPTIONS,
    SPACES,
    KNNSmoothingClassifier,
    LocalSmoothingClassifier,
    smooth,
    to_log_probs,
)

__all__ = ["R_OPTIONS", "SPACES", "KNNOracle", "KNNSmoothing", "KNNSmoothingClassifier", "LocalSmoothing",
           "LocalSmoothingClassifier", "smooth", "to_log_probs"]
