"""How sure is a measured accuracy, and a difference between two models measured on the same images?

An accuracy on n images is a binomial proportion: :func:`wilson_interval` gives its score interval (Wilson, 1927),
which unlike the textbook mean +- 1.96 standard errors stays inside [0, 1] and keeps its coverage near 0 or 1
(robust accuracies of 0 % are common). Two models evaluated on the *same* images are compared example by example:
:func:`paired_difference` gives the difference of the two accuracies with Newcombe's (1998, "Improved confidence
intervals for the difference between binomial proportions based on paired data", method 10) interval, which uses
only the examples on which the two models disagree and so is several times narrower than two independent intervals
when the models mostly agree, as MixedNUTS and its RBC do.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

Z95 = 1.959963984540054  # the standard normal's 97.5 % quantile


def wilson_interval(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Score interval for a proportion with ``k`` successes in ``n`` trials (95 % by default)."""
    if n <= 0:
        raise ValueError("an interval needs at least one example")
    if not 0 <= k <= n:
        raise ValueError(f"k = {k} successes is outside [0, n = {n}]")
    p, z2 = k / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return (0.0 if k == 0 else max(0.0, centre - half)), (1.0 if k == n else min(1.0, centre + half))


@dataclass(frozen=True)
class PairedDifference:
    """Accuracy of model A minus accuracy of model B on the same ``n`` examples, with a 95 % interval."""

    difference: float
    low: float
    high: float
    n: int
    a_only: int  # examples A gets right and B wrong
    b_only: int  # examples B gets right and A wrong

    def to_dict(self) -> dict[str, float | int]:
        return {"difference": self.difference, "low": self.low, "high": self.high, "n": self.n,
                "a_only": self.a_only, "b_only": self.b_only}


def paired_difference(a: Sequence[bool] | torch.Tensor, b: Sequence[bool] | torch.Tensor,
                      z: float = Z95) -> PairedDifference:
    """mean(a) - mean(b) for per-example outcomes of two models on the same examples, with Newcombe's interval
    (:func:`newcombe_interval`)."""
    a, b = torch.as_tensor(a, dtype=torch.bool).flatten(), torch.as_tensor(b, dtype=torch.bool).flatten()
    if a.shape != b.shape:
        raise ValueError(f"paired outcomes need the same examples: {a.numel()} vs {b.numel()}")
    if a.numel() == 0:
        raise ValueError("an interval needs at least one example")
    both, a_only, b_only = int((a & b).sum()), int((a & ~b).sum()), int((b & ~a).sum())
    neither = a.numel() - both - a_only - b_only
    theta, low, high = newcombe_interval(both, a_only, b_only, neither, z)
    return PairedDifference(theta, low, high, a.numel(), a_only, b_only)


def newcombe_interval(both: int, a_only: int, b_only: int, neither: int, z: float = Z95) -> tuple[float, float, float]:
    """Difference of two paired proportions and Newcombe's (1998) method-10 interval, from the 2x2 table: the
    Wilson intervals of the two margins, combined with the phi correlation of the table."""
    n = both + a_only + b_only + neither
    p1, p2 = (both + a_only) / n, (both + b_only) / n
    l1, u1 = wilson_interval(both + a_only, n, z)
    l2, u2 = wilson_interval(both + b_only, n, z)
    denominator = (both + a_only) * (b_only + neither) * (both + b_only) * (a_only + neither)
    phi = (both * neither - a_only * b_only) / math.sqrt(denominator) if denominator else 0.0
    delta = _combined(p1 - l1, u2 - p2, phi)
    epsilon = _combined(u1 - p1, p2 - l2, phi)
    theta = p1 - p2
    return theta, max(-1.0, theta - delta), min(1.0, theta + epsilon)


def _combined(x: float, y: float, phi: float) -> float:
    """sqrt(x^2 - 2 phi x y + y^2), written as (x - y)^2 + 2 (1 - phi) x y: both terms >= 0 for phi <= 1, so no
    cancellation (the plain form left sqrt(rounding) ~ 1e-9 where the exact value is 0, e.g. table 39, 0, 0, 39)."""
    return math.sqrt(max(0.0, (x - y) ** 2 + 2 * (1 - phi) * x * y))
