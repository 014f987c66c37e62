"""Certified radii of constant-alpha mixtures (Bai et al. 2024b, Lemma 3.2, Thm 3.5, Thm A.2; papers 002/004).

The mixed classifier is ``h^alpha = log((1 - alpha) softmax(g) + alpha softmax(h))`` (Bai et al. 2024b, Eq. 3.4). Lemma
3.2: if the RBC ``h`` keeps its top class y ahead of every other class by the margin ``(1 - alpha) / alpha`` in
probability everywhere in a ball, the mixture predicts y everywhere in that ball, whatever the ABC ``g`` does
(alpha in [1/2, 1]). The two theorems give such balls:

- Thm 3.5 (Eq. 3.5), a Lipschitz RBC: ``r = min_{i != y} (alpha (p_y - p_i) + alpha - 1) / (alpha (L_y + L_i))``
  with ``L_i`` the Lipschitz constant of ``softmax(h)_i`` in the certified norm;
- a Lipschitz logit map (declared by the architecture): :func:`logit_lipschitz_radius`, Lemma 3.2 through the
  softmax, tighter than Eq. 3.5 for confident predictions;
- Thm A.2, a Gaussian randomized-smoothing RBC (l2 only):
  ``r = sigma / 2 * (Phi^-1(alpha p_y) - Phi^-1(alpha p_y' + 1 - alpha))``, y' the runner-up class.

Every function here is vectorised over alphas (first axis) and examples (second axis). A radius below 0 means
"no certificate"; radii are ``-inf`` where the RBC abstains.
"""

from __future__ import annotations

import math

import torch

from mixzoo.core.errors import InputError

SOFTMAX_CLASS_LIPSCHITZ = math.sqrt(2.0) / 4
"""sup_z ||grad_z softmax(z)_i||_2 = sup sigma_i sqrt((1 - sigma_i)^2 + sum_{j != i} sigma_j^2) <= sqrt(2)/4."""

__all__ = ["SOFTMAX_CLASS_LIPSCHITZ", "certified_accuracy", "check_alphas", "lipschitz_radius",
           "logit_lipschitz_radius", "smoothing_lipschitz_constant", "smoothing_radius"]


def check_alphas(alphas: float | list[float] | tuple[float, ...] | torch.Tensor) -> torch.Tensor:
    """Alphas as a float64 vector; one-line error unless every alpha is in [1/2, 1] (Lemma 3.2 needs it)."""
    a = torch.as_tensor(alphas, dtype=torch.float64).flatten()
    if a.numel() == 0:
        raise InputError("no alpha given; pass --alpha A (the RBC's weight, in [1/2, 1]) or a card")
    bad = a[~((a >= 0.5) & (a <= 1.0))]
    if bad.numel():
        raise InputError(f"alpha {bad[0].item():g} is outside [1/2, 1]: Bai et al. 2024b, Lemma 3.2 certifies a"
                         " mixture only when the RBC has at least half the weight; pass alphas in [0.5, 1]")
    return a


def lipschitz_radius(probs: torch.Tensor, lipschitz: torch.Tensor | float, alphas: torch.Tensor | float,
                     top: torch.Tensor | None = None) -> torch.Tensor:
    """Bai et al. 2024b, Eq. 3.5 for every alpha and example: ``(A, n)`` radii.

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


def logit_lipschitz_radius(logits: torch.Tensor, lipschitz_l2: float, alphas: torch.Tensor | float,
                           top: torch.Tensor | None = None) -> torch.Tensor:
    """Certified l2 radii ``(A, n)`` of a mixture whose RBC has an L-Lipschitz (l2) logit map, from its ``(n, c)``
    clean logits, for every alpha (alpha = 1: the RBC alone). ``top``: the class certified (default: argmax).

    The RBC alone gets the standard logit-margin bound ``r = m / (sqrt(2) L)`` with ``m = z_y - max_{i != y} z_i``
    (Tsuzuku et al. 2018, Prop. 1; Li et al. 2019): ``z_y - z_i`` is ``sqrt(2) L``-Lipschitz because
    ``||e_y - e_i||_2 = sqrt(2)``.

    A mixture needs the RBC certifiably robust with margin ``kappa = (1 - alpha) / alpha`` in probability (Bai et al.
    2024b, Def. 3.1, Lemma 3.2): ``p_y - p_i >= kappa`` for every ``i != y`` in the ball. Within radius r each logit
    margin ``m_j = z_y - z_j`` falls by at most ``t = sqrt(2) L r``, and ``p_y - p_i = (1 - e^{-m_i}) / (1 + sum_{j !=
    y} e^{-m_j})`` grows with every margin, so its smallest value over the ball is at least its value with every margin
    lowered by t. Requiring that value ``>= kappa`` for the runner-up class (the smallest margin) gives

        ``r = (log(1 - kappa) - log(e^{-m_min} + kappa * S)) / (sqrt(2) L)``,  ``S = sum_{j != y} e^{-m_j}``,

    which equals the logit-margin bound at alpha = 1 and is -inf at alpha = 1/2. Bai et al. 2024b, Eq. 3.5 with each
    class probability's constant ``(sqrt(2)/4) L`` (the softmax's own constant, :data:`~mixzoo.certify.lipschitz.
    SOFTMAX_CLASS_LIPSCHITZ`) is also sound; the larger of the two radii is returned. l-inf radii: divide by
    ``sqrt(dim)`` (``||d||_2 <= sqrt(dim) ||d||_inf``).
    """
    alphas = check_alphas(alphas)
    if not (isinstance(lipschitz_l2, int | float) and lipschitz_l2 > 0 and math.isfinite(lipschitz_l2)):
        raise InputError(f"the Lipschitz constant must be a positive finite number, got {lipschitz_l2!r}")
    z = logits.to(torch.float64)
    n, c = z.shape
    y = z.argmax(1) if top is None else top
    others = ~torch.nn.functional.one_hot(y, c).bool()
    margins = (z.gather(1, y[:, None]) - z)[others].view(n, c - 1)  # m_j, j != y
    m_min = margins.amin(1)
    log_s = torch.logsumexp(-margins, 1)
    kappa = (1 - alphas) / alphas  # (A,)
    log_kappa = torch.log(kappa)[:, None]  # -inf at alpha = 1
    worst = torch.logaddexp((-m_min)[None].expand(len(alphas), n), log_kappa + log_s[None])
    r_logit = (torch.log1p(-kappa)[:, None] - worst) / (math.sqrt(2.0) * lipschitz_l2)
    r_eq35 = lipschitz_radius(z.softmax(1), SOFTMAX_CLASS_LIPSCHITZ * lipschitz_l2, alphas, top=y)
    return torch.maximum(r_logit, r_eq35)


def smoothing_lipschitz_constant(sigma: float) -> float:
    """l2 Lipschitz constant of every class probability of a Gaussian-smoothed classifier: sqrt(2 / (pi sigma^2))
    (Bai et al. 2024b, Sec. 3 after Thm 3.5; Salman et al. 2019, Lemma 1)."""
    return math.sqrt(2.0 / (math.pi * sigma * sigma))


def smoothing_radius(p_top_lower: torch.Tensor, p_other_upper: torch.Tensor, sigma: float,
                     alphas: torch.Tensor | float) -> torch.Tensor:
    """Bai et al. 2024b, Thm A.2 for every alpha and example: ``(A, n)`` l2 radii. ``p_top_lower``: a lower confidence
    bound of the smoothed RBC's top-class probability; ``p_other_upper``: an upper bound of its largest other one. The
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
    ``(A, R)`` from ``(A, n)`` radii, ``(n,)`` correctness of the certified class and ``(R,)`` radii (Bai et al. 2024b,
    Fig. 6-7, "the percentage of the test data for which the model gives a correct prediction and a certified radius at
    least as large as the radius under consideration")."""
    ok = correct[None, :, None] & (radius[:, :, None] >= grid.to(radius.dtype)[None, None, :])
    return ok.to(torch.float64).mean(1)
