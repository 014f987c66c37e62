"""The candidate grid of Algorithm 1 (App. C.1) and what a search over it returns (Bai et al. 2024a, Sec. 4.3)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from mixzoo.core.errors import InputError


@dataclass(frozen=True)
class Grid:
    """Candidate values of Algorithm 1 (App. C.1): s log-spaced, p and c linearly spaced, ``*_n`` values each.

    The defaults cover the paper's Table 3 ranges (s 0.05-5, p 1-4, c -1.1-0) with 8 values per axis (512 points);
    s reaches 100 because layer-normed logits of 10-class models are small (unit variance over few classes), and
    the built-in zoo's optimum sat on an upper edge of 10.
    """

    s_min: float = 0.05
    s_max: float = 100.0
    s_n: int = 8
    p_min: float = 1.0
    p_max: float = 4.0
    p_n: int = 8
    c_min: float = -2.0
    c_max: float = 0.0
    c_n: int = 8

    def __post_init__(self) -> None:
        for axis in "spc":
            lo, hi, n = getattr(self, f"{axis}_min"), getattr(self, f"{axis}_max"), getattr(self, f"{axis}_n")
            if not (isinstance(n, int | np.integer) and n >= 1):
                raise InputError(f"grid {axis}_n must be an integer >= 1, got {n!r}")
            if not (math.isfinite(lo) and math.isfinite(hi)):
                raise InputError(f"grid {axis} range must be finite, got [{lo}, {hi}]")
            if lo > hi:
                raise InputError(f"grid {axis}_min ({lo}) is larger than {axis}_max ({hi}); swap them")
        if self.s_min <= 0:
            raise InputError(f"grid s_min must be positive (s scales logits), got {self.s_min}")
        if self.p_min <= 0:
            raise InputError(f"grid p_min must be positive (p is an exponent), got {self.p_min}")

    def s_values(self) -> torch.Tensor:
        if self.s_n == 1:
            return torch.tensor([self.s_min], dtype=torch.float64)
        return torch.logspace(math.log10(self.s_min), math.log10(self.s_max), self.s_n, dtype=torch.float64)

    def p_values(self) -> torch.Tensor:
        return torch.linspace(self.p_min, self.p_max, self.p_n, dtype=torch.float64)

    def c_values(self) -> torch.Tensor:
        return torch.linspace(self.c_min, self.c_max, self.c_n, dtype=torch.float64)

    @property
    def size(self) -> int:
        return self.s_n * self.p_n * self.c_n

    @classmethod
    def point(cls, s: float, p: float, c: float) -> Grid:
        """The one-point grid (s, p, c): Algorithm 1 at given parameters (alpha and objective only)."""
        return cls(s_min=s, s_max=s, s_n=1, p_min=p, p_max=p, p_n=1, c_min=c, c_max=c, c_n=1)

    @classmethod
    def from_record(cls, record: dict[str, Any] | None) -> Grid | None:
        """The grid a mix card's ``grid`` field (``s_values``, ``p_values``, ``c_values``) was searched on, or
        None when the card records no grid values."""
        try:
            s, p, c = (list(record[f"{a}_values"]) for a in "spc")  # type: ignore[index]
        except (KeyError, TypeError):
            return None
        if not (s and p and c):
            return None
        return cls(s_min=min(s), s_max=max(s), s_n=len(s), p_min=min(p), p_max=max(p), p_n=len(p), c_min=min(c),
                   c_max=max(c), c_n=len(c))


# ------------------------------------------------------------------------------------------------ results
@dataclass
class GridEvaluation:
    """Algorithm 1 lines 7-10 on a grid: per (s, p, c) the threshold q, the objective and alpha = 1/(1+q)."""

    s_values: torch.Tensor
    p_values: torch.Tensor
    c_values: torch.Tensor
    counts: torch.Tensor  # (S, P, C) int64: clean mistakes (or ABC-correct ones, relaxed) with margin >= q
    denominator: int  # the number those counts are shares of
    q: torch.Tensor  # (S, P, C) float64

    @property
    def objectives(self) -> torch.Tensor:
        return self.counts.double() / self.denominator

    @property
    def alphas(self) -> torch.Tensor:
        return 1.0 / (1.0 + self.q)


@dataclass
class SearchResult:
    """What a calibration optimizer returns (hook ``mixzoo_calibration_optimizers``)."""

    s: float
    p: float
    c: float
    alpha: float
    objective: float
    q: float
    evaluation: GridEvaluation  # the grid shown in cards and plots (Fig. 9)
    n_evaluated: int
    method: str = "grid"
    notes: list[str] = field(default_factory=list)
