"""Certified radii of constant-alpha mixtures (paper 001 Lemma 3.2, Thm 3.5, Thm A.2; papers 002/004).

The mixed classifier is ``h^alpha = log((1 - alpha) softmax(g) + alpha softmax(h))`` (001 Eq. 3.4). Lemma 3.2: if
the RBC ``h`` keeps its top class y ahead of every other class by the margin ``(1 - alpha) / alpha`` in
probability everywhere in a ball, the mixture predicts y everywhere in that ball, whatever the ABC ``g`` does
(alpha in [1/2, 1]). The two theorems give such balls:

- Thm 3.5 (Eq. 3.5), a Lipschitz RBC: ``r = min_{i != y} (alpha (p_y - p_i) + alpha - 1) / (alpha (L_y + L_i))``
  with ``L_i`` the Lipschitz constant of ``softmax(h)_i`` in the certified norm;
- Thm A.2, a Gaussian randomized-smoothing RBC (l2 only):
  ``r = sigma / 2 * (Phi^-1(alpha p_y) - Phi^-1(alpha p_y' + 1 - alpha))``, y' the runner-up class.

Every function here is vectorised over alphas (first axis) and examples (second axis). A radius below 0 means
"no certificate"; radii are ``-inf`` where the RBC abstains.
"""

from __future__ import annotations

import math

import torch

from mixzoo.core.errors import InputError

__all__ = ["certified_accuracy", "check_alphas", "lipschitz_radius", "smoothing_lipschitz_constant",
           "smoothing_radius"]


def check_alphas(alphas: float | list[float] | tuple[float, ...] | torch.Tensor) -> torch.Tensor:
    """Alphas as a float64 vector; one-line error unless every alpha is in [1/2, 1] (Lemma 3.2 needs it)."""
    a = torch.as_tensor(alphas, dtype=torch.float64).flatten()
    if a.numel() == 0:
        raise InputError("no alpha given; pass --alpha A (the RBC's weight, in [1/2, 1]) or a card")
    bad = a[~((a >= 0.5) & (a <= 1.0))]
    if bad.numel():
        raise InputError(f"alpha {bad[0].item():g} is outside [1/2, 1]: 001 Lemma 3.2 certifies a mixture only when"
                         " the RBC has at least half the weight; pass alphas in [0.5, 1]")
    return a


def lipschitz_radius(probs: torch.Tensor, lipschitz: torch.Tensor | float, alphas: torch.Tensor | float,
                     top: torch.Tensor | None = None) -> torch.Tensor:
    """001 Eq. 3.5 for every alpha and example: ``(A, n)`` radii.

    ``probs``: ``(n, c)`` RBC probabilities at the clean inputs (for a smoothed RBC: a lower bound for the top
    class and upper bounds for the others, see :func:`mixzoo.certify.smoothing.confidence_bounds`);
    ``lipschitz``: a constant for every class, or ``(c,)`` / ``(n, c)`` per class (local estimates, App. C.3);
    ``top``: the class certified (default: argmax of ``probs``).
    """
    alphas = check_alphas(alphas)
    p = probs.to(torch.float64)
    y = p.argmax(1) if top is None else top
    lip = torch.as_tensor(lipschitz, dtype=torch.float64).expand_as(p)
    py, ly = p.gather(1, y[:, None]), lip.gather(1, y[:, None])  # (n, 1)
    a = alphas[:, None, None]  # (A, 1, 1)
    r = (a * (py - p) + a - 1) / (a * (ly + lip))  # (A, n, c)
    r = r.masked_fill(torch.nn.functional.one_hot(y, p.shape[1]).bool(), math.inf)
    return r.amin(2)


def smoothing_lipschitz_constant(sigma: float) -> float:
    """l2 Lipschitz constant of every class probability of a Gaussian-smoothed classifier: sqrt(2 / (pi sigma^2))
    (001 Sec. 3 after Thm 3.5; Salman et al. 2019, Lemma 1)."""
    return math.sqrt(2.0 / (math.pi * sigma * sigma))


def smoothing_radius(p_top_lower: torch.Tensor, p_other_upper: torch.Tensor, sigma: float,
                     alphas: torch.Tensor | float) -> torch.Tensor:
    """001 Thm A.2 for every alpha and example: ``(A, n)`` l2 radii. ``p_top_lower``: a lower confidence bound
    of the smoothed RBC's top-class probability; ``p_other_upper``: an upper bound of its largest other one. The
    radius grows with the first and shrinks with the second, so bounds give a radius that holds with their
    confidence. At alpha = 1 this is Cohen et al.'s radius for soft smoothing."""
    alphas = check_alphas(alphas)[:, None]
    lo = (alphas * p_top_lower.to(torch.float64)[None]).clamp(0.0, 1.0)
    hi = (alphas * p_other_upper.to(torch.float64)[None] + (1 - alphas)).clamp(0.0, 1.0)  # exact p at alpha 1
    # ndtri, not Normal.icdf (erfinv(2p - 1)): that rounds p < 1e-16 to 0 and returns -inf, an infinite radius
    r = sigma / 2 * (torch.special.ndtri(lo) - torch.special.ndtri(hi))
    return torch.nan_to_num(r, nan=-math.inf, posinf=math.inf, neginf=-math.inf)


def certified_accuracy(radius: torch.Tensor, correct: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
    """Fraction of examples both correct and certified at least r, for every alpha and every r of the grid:
    ``(A, R)`` from ``(A, n)`` radii, ``(n,)`` correctness of the certified class and ``(R,)`` radii (001 Fig. 6-7,
    "the percentage of the test data for which the model gives a correct prediction and a certified radius at
    least as large as the radius under consideration")."""
    ok = correct[None, :, None] & (radius[:, :, None] >= grid.to(radius.dtype)[None, None, :])
    return ok.to(torch.float64).mean(1)
