"""Locally biased smoothing (Bai et al. (local smoothing); Bai et al. 2024b, Sec. 2.3, 3, App. B): ``knn-smoothing``,
``local-smoothing`` and ``local-smoothing-adaptive``.

:mod:`.gradients` (per-class input gradients, dual norms), :mod:`.knn` (the K-NN direction oracle),
:mod:`.smoothing` (the formula, the classifiers and their attack-time gradients), :mod:`.method` (the training-free
plugins), :mod:`.crossover` (beta_0 from Bai et al. (local smoothing), Fig. 4's crossover), :mod:`.policy` (the policy
beta_theta and Bai et al. (local smoothing), Eq. 9 for the shared trainer, :mod:`mixzoo.methods.shared.training_loop`),
:mod:`.adaptive_method` (the trained plugin).
"""
