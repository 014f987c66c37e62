"""The threshold beta_0 of Bai et al. (local smoothing), Eq. 9, measured on a pair: the crossover of Bai et al. (local
smoothing), Fig. 4.

An adversary aims PGD (Bai et al. (local smoothing), Eq. 6) at the smoothed classifier with a constant attack-time
alpha_t (R_i(x) held constant in its gradient, as the ``alpha_t=A`` variants of :mod:`.smoothing`); on the points it
finds we count how often g (the ABC) and h (the RBC) alone are still right. For small alpha_t the attack is aimed at g
and hurts it more than h; for large alpha_t it is aimed at h, and g, whose loss landscape differs, is hurt less (Bai et
al. (local smoothing), Sec. 5: "an adversarial perturbation targeting h is benign to g"). The crossover alpha_0 is
where g's attacked accuracy first reaches h's, and beta_0 = log alpha_0 (CIFAR-10 in Bai et al. (local smoothing):
alpha_0 = 55).

:func:`measure_crossover` runs the whole sweep as one batch: every image is repeated once per alpha_t and attacked
with its row's alpha_t (:func:`~.smoothing.smooth` takes a per-example alpha, ``inf`` included), in chunks.
:func:`crossover_point` turns the two accuracy curves into beta_0 (linear interpolation in log alpha_t).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mixzoo.core.errors import InputError
from mixzoo.methods.local_smoothing.smoothing import LocalSmoothingClassifier, smooth, to_log_probs
from mixzoo.methods.shared.alpha_attacks import pgd_alpha

# Bai et al. (local smoothing), Sec. 6.3: the attack-time alphas the policy is trained on (and, here, the default sweep)
PAPER_ALPHA_TS = (0.0, 0.316, 1.46, 6.81, 31.6, 147.0, 681.0, 3162.0, math.inf)


class AtAlpha:
    """The smoothed classifier's output at a per-example attack-time ``alpha_t`` ((B,), R_i held constant; ``None``:
    the classifier itself), in the ``forward_alpha`` form :func:`~mixzoo.methods.shared.alpha_attacks.pgd_alpha`
    attacks (no alpha term: w = 0)."""

    def __init__(self, clf: LocalSmoothingClassifier, alpha_t: torch.Tensor | None):
        self.clf, self.alpha_t = clf, alpha_t

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.alpha_t is None:
            return self.clf(x)
        g, h, r = self.clf.parts(x)
        return to_log_probs(smooth(g, h, r.detach(), self.alpha_t.to(g).view(-1, 1)), self.clf.space)

    def forward_alpha(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self(x)
        return out, torch.zeros(len(x), dtype=out.dtype, device=out.device)


def attack_at_alpha(clf: LocalSmoothingClassifier, x: torch.Tensor, y: torch.Tensor, alpha_t: torch.Tensor, *,
                    eps: torch.Tensor, steps: int, noise: torch.Tensor, norm: str = "Linf") -> torch.Tensor:
    """PGD (Bai et al. (local smoothing), Eq. 6) on the smoothed classifier at attack-time ``alpha_t`` per example,
    radius ``eps`` per example, random start from ``noise`` (uniform [0, 1), the shape of ``x``); the trainer's PGD."""
    return pgd_alpha(AtAlpha(clf, alpha_t), x, y, eps=eps.to(x), steps=steps, w=torch.zeros(len(x)).to(x),
                     noise=noise, norm=norm)


@dataclass
class Crossover:
    """The measured curves of Bai et al. (local smoothing), Fig. 4 and the beta_0 read from them."""

    alpha_ts: list[float]
    acc_g: list[float]  # g's accuracy on the points of the attack aimed at alpha_t
    acc_h: list[float]
    beta0: float
    where: str  # "interpolated", "below the sweep", "above the sweep"
    n: int = 0
    steps: int = 0

    def record(self) -> dict[str, object]:
        """What the card keeps (finite numbers; alpha_t = inf written as the string "inf")."""
        return {"alpha_ts": [a if math.isfinite(a) else "inf" for a in self.alpha_ts], "acc_g": self.acc_g,
                "acc_h": self.acc_h, "beta0": self.beta0, "where": self.where, "n": self.n, "steps": self.steps}


def check_alpha_ts(alpha_ts: Sequence[float | str], what: str = "alpha_ts") -> list[float]:
    """Attack-time alphas as floats (``"inf"`` allowed), each >= 0, at least one; one-line error otherwise."""
    out = []
    for a in (alpha_ts if isinstance(alpha_ts, list | tuple) else [alpha_ts]):
        try:
            v = float(a)
        except (TypeError, ValueError):
            v = math.nan
        if isinstance(a, bool) or not v >= 0:
            raise InputError(f"option {what} must be numbers >= 0 (inf allowed), e.g. 0,1,10,inf; got {a!r}")
        out.append(v)
    if not out:
        raise InputError(f"option {what} must list at least one attack-time alpha")
    return out


def crossover_point(alpha_ts: Sequence[float], acc_g: Sequence[float], acc_h: Sequence[float]) -> tuple[float, str]:
    """(beta_0, where): log of the first alpha_t (ascending) at which g's attacked accuracy reaches h's, linearly
    interpolated in log alpha_t with the alpha_t before it. Ends that cannot be interpolated (alpha_t = 0 or inf) or
    no crossing give the nearest finite positive alpha_t of the sweep, and ``where`` says so."""
    order = sorted(range(len(alpha_ts)), key=lambda i: alpha_ts[i])
    a = [float(alpha_ts[i]) for i in order]
    d = [float(acc_g[i]) - float(acc_h[i]) for i in order]
    finite = [v for v in a if 0 < v < math.inf]
    if not finite:
        raise InputError("the alpha_t sweep needs at least one finite alpha_t > 0 to place beta_0")
    k = next((i for i, v in enumerate(d) if v >= 0), None)
    if k is None:
        return math.log(finite[-1]), "above the sweep"
    if k == 0 or a[k - 1] == 0:
        return math.log(finite[0]), "below the sweep"
    if math.isinf(a[k]):
        return math.log(a[k - 1]), "above the sweep"
    t = d[k - 1] / (d[k - 1] - d[k])
    return (1 - t) * math.log(a[k - 1]) + t * math.log(a[k]), "interpolated"


def measure_crossover(clf: LocalSmoothingClassifier, images: torch.Tensor, labels: torch.Tensor,
                      alpha_ts: Sequence[float] = PAPER_ALPHA_TS, *, eps: float, norm: str = "Linf", steps: int = 10,
                      seed: int = 0, batch_size: int = 500) -> Crossover:
    """Bai et al. (local smoothing), Fig. 4 on ``images``: PGD-``steps`` at each alpha_t on the smoothed classifier
    ``clf`` (its R_i, space, norm; its own alpha is not used), g's and h's accuracy on the attacked points, and beta_0
    (:func:`crossover_point`). All (image, alpha_t) pairs form one batch, attacked in chunks of ``batch_size``; the
    random starts come from ``seed`` for the whole batch, so the chunking does not change the result."""
    alphas = check_alpha_ts(list(alpha_ts))
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise InputError(f"option crossover_steps must be an integer >= 1, got {steps!r}")
    n, m = len(images), len(alphas)
    if n == 0:
        raise InputError("the crossover needs at least one image (option n_crossover)")
    x = images.repeat(m, *([1] * (images.ndim - 1)))
    y = labels.to(images.device).repeat(m)
    a = torch.tensor(alphas, dtype=torch.float64).repeat_interleave(n)
    noise = torch.rand(x.shape, generator=torch.Generator().manual_seed(int(seed)))
    e = torch.full((len(x),), float(eps))
    right_g, right_h = [], []
    for lo in range(0, len(x), batch_size):
        sl = slice(lo, lo + batch_size)
        adv = attack_at_alpha(clf, x[sl], y[sl], a[sl], eps=e[sl], steps=steps, noise=noise[sl], norm=norm)
        with torch.no_grad():
            right_g.append(clf.abc(adv).argmax(1) == y[sl])
            right_h.append(clf.rbc(adv).argmax(1) == y[sl])
    acc_g = torch.cat(right_g).view(m, n).double().mean(1).tolist()
    acc_h = torch.cat(right_h).view(m, n).double().mean(1).tolist()
    beta0, where = crossover_point(alphas, acc_g, acc_h)
    return Crossover(alphas, acc_g, acc_h, beta0, where, n=n, steps=steps)

