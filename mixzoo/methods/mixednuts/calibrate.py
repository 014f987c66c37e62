"""Algorithm 1 of the paper (Sec. 4.3): choose s, p, c and alpha of MixedNUTS from cached RBC logits, vectorised.

Given the RBC's logits on clean calibration images and on their MMAA (minimum-margin) perturbations, Algorithm 1
keeps the clean examples the (layer-normalised) RBC gets wrong and the attacked examples it still gets right. For
every grid point (s, p, c) it computes the confidence margins (Def. 2.1) of M(s, p, c) (Eq. 4) on both sets, takes
the threshold ``q`` that a share ``beta`` of the attacked margins reaches, and scores the point by the share of
clean mistakes whose margin also reaches ``q`` (those the ABC could not overrule). The best point gives
``alpha = 1 / (1 + q)``, which makes the robustness constraint of Eq. 7 active.

Definitions used here (the paper leaves them implicit):

* quantile: with the attacked margins sorted ascending, ``m_(0) <= ... <= m_(n-1)``,
  ``q = m_(i)`` with ``i = floor((1 - beta) * n)`` (clipped to ``n - 1``). At least ``n - i >= beta * n`` margins
  are ``>= q``, and any larger threshold would keep fewer than ``beta * n`` (up to ties), so ``q`` is the largest
  threshold satisfying the constraint of Eq. 7.
* objective: the share of clean mistakes with margin ``>= q`` (App. D.8.3 ``relaxed``: among clean mistakes the
  ABC gets right).
* ties (objectives are multiples of 1/n, so ties are common): smallest objective, then smallest p, then s closest
  to 1 in log scale, then c closest to 0, then smaller s, then smaller c - the most "modest" transformation
  (App. D.2 prefers modest values for numerical stability).

Differences from the authors' code (``calc_spca.py`` of github.com/Bai-YT/MixedNUTS; found by running both on the
same logits: the margins agree at every grid point). mixzoo's default (``search="mixzoo"``) keeps the first two
because they are the closer reading of the paper; ``search="authors"`` (``mixzoo mix --search authors``) reproduces
their search exactly:

* (a) threshold: mixzoo takes the order statistic above, so at least ``beta * n`` attacked-correct margins reach
  ``q`` (Eq. 7's constraint holds on the calibration set); theirs is ``np.percentile(m, 100 (1 - beta))`` with
  linear interpolation, which lies between two order statistics and can keep fewer than ``beta * n`` (718 of 729
  against mixzoo's 719 on the built-in Fashion-MNIST pair, ``benchmarks/investigations/layer_norm_parity.md``).
* (b) App. D.8.2: mixzoo drops every c whose transform changes more than ``max_argmax_change`` (0.5 %) of the RBC's
  predictions; theirs only prints a warning (``authors`` warns once, for the chosen c).
* (c) saturation: when a threshold reaches 1 in float precision (large s), theirs caps it at ``1 - 1e-9`` for the
  objective (alpha still comes from the uncapped q) and prints a warning; mixzoo does not cap. Both modes warn
  (``warnings.warn``, one line) when the chosen threshold saturates (``authors``: any grid point's), and when beta
  is degenerate (beta = 0, or more than ``max(8, grid size / 20)`` grid points tie at the optimum, saying how
  many).
* ``authors`` also computes in float64 and, among tied optima, takes the first in their loop order (s, c, p), the
  first line their script prints; their LN is :func:`mixzoo.transforms.layer_norm` in both modes.

Speed: the work is the exponentials of the softmax denominators. LN, the clamp and the power depend only on
(p, c), so ``u = sgn * |Clamp(LN + c)|^p`` is computed once per (p, c) (``|.|^p = exp(p log|.|)`` with the log
shared by all p) and the margins for every s follow from ``d = u_top1 - u``:
``margin(s) = (1 - exp(-s (u_1 - u_2))) / sum_k exp(-s d_k)``. Exponents are clipped at -80 (exp(-80) ~ 2e-35,
far below float32 resolution of a sum >= 1) because the CPU exp kernel is ~50x slower on arguments below -88.
The numerator uses the top-two values recomputed in float64; the denominator is float32 unless ``dtype=float64``.
"""

from __future__ import annotations

import hashlib
import math
import warnings
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from mixzoo.core.errors import InputError
from mixzoo.core.progress import progress_bar
from mixzoo.methods.mixednuts.transforms import LAYER_NORM_VERSION, check_top_k, get_clamp, layer_norm

if TYPE_CHECKING:
    from mixzoo.core.card import MixCard

EXP_FLOOR = -80.0
SATURATED = 1.0 - 1e-9  # a threshold q at or above this is saturated; the authors' code caps q here (difference c)
SEARCHES = ("mixzoo", "authors")
DEFAULT_CHUNK = 1 << 17  # float elements in the exponent buffer (512 KiB in float32: stays in cache)
U_BATCH = 1 << 22  # float elements of u computed at once


# --------------------------------------------------------------------------------------------------- grid
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


# ------------------------------------------------------------------------------------------------ problem
@dataclass
class CalibrationProblem:
    """The surrogate problem of Eq. 7 on fixed data, with a vectorised evaluator any optimizer can call.

    ``clean`` holds the (layer-normalised) RBC logits of clean examples the RBC gets wrong, ``attacked`` those of
    attacked examples it gets right. ``clean_weights`` (relaxed objective, App. D.8.3) marks the clean mistakes the
    ABC gets right; the objective is then measured on those only.
    """

    clean: torch.Tensor
    attacked: torch.Tensor
    beta: float
    clamp: str = "gelu"
    clean_weights: torch.Tensor | None = None
    reference: torch.Tensor | None = None
    max_argmax_change: float | None = None
    chunk_size: int = DEFAULT_CHUNK
    dtype: torch.dtype = torch.float32
    progress: bool = False
    search: str = "mixzoo"

    def __post_init__(self) -> None:
        if self.clean.ndim != 2 or self.attacked.ndim != 2 or self.clean.shape[1] != self.attacked.shape[1]:
            raise InputError(f"clean {tuple(self.clean.shape)} and attacked {tuple(self.attacked.shape)} logits"
                             " must be 2-D with the same number of classes")
        if len(self.clean) == 0 or len(self.attacked) == 0:
            raise InputError("Algorithm 1 needs at least one clean mistake and one correct attacked example")
        if not 0.0 <= self.beta <= 1.0:
            raise InputError(f"beta must lie in [0, 1], got {self.beta}")
        if self.chunk_size < 1:
            raise InputError(f"chunk_size must be positive, got {self.chunk_size}")
        check_search(self.search)
        self._clamp_fn = get_clamp(self.clamp)
        if self.max_argmax_change is not None and not 0.0 <= self.max_argmax_change <= 1.0:
            raise InputError(f"max_argmax_change must lie in [0, 1], got {self.max_argmax_change}")
        self._ref_top_first: torch.Tensor | None = None
        self._argmax_changes: dict[float, float] = {}
        self._z_top_first = _top_first(torch.cat([self.clean, self.attacked]).to(torch.float64))

    @property
    def n_clean(self) -> int:
        return len(self.clean)

    @property
    def n_attacked(self) -> int:
        return len(self.attacked)

    @property
    def quantile_index(self) -> int:
        """``floor((1 - beta) * n_attacked)`` (with a 1e-9 guard against 0.1 * 10 = 0.9999...), at most n - 1."""
        return _order_index(self.beta, self.n_attacked)

    def thresholds(self, attacked_margins: torch.Tensor) -> torch.Tensor:
        """The threshold q over the last dimension of ``attacked_margins`` (..., n_attacked), by the search's rule.

        ``mixzoo``: the order statistic ``m_(i)``, ``i = floor((1 - beta) n)`` (:attr:`quantile_index`).
        ``authors``: ``np.percentile(m, 100 (1 - beta))`` with numpy's default linear interpolation between the
        order statistics around ``(1 - beta)(n - 1)`` (``calc_spca.py`` of the authors' code), vectorised.
        """
        n = attacked_margins.shape[-1]
        if self.search == "mixzoo":
            return attacked_margins.kthvalue(_order_index(self.beta, n) + 1, dim=-1).values
        pos = (100.0 - 100.0 * self.beta) / 100.0 * (n - 1)
        lo = min(max(int(math.floor(pos)), 0), n - 1)
        t = pos - lo
        a = attacked_margins.kthvalue(lo + 1, dim=-1).values
        b = attacked_margins.kthvalue(min(lo + 2, n), dim=-1).values if lo + 1 < n else a
        d = b - a
        return b - d * (1.0 - t) if t >= 0.5 else a + d * t  # numpy's lerp, the same two branches

    @property
    def denominator(self) -> int:
        return self.n_clean if self.clean_weights is None else int(self.clean_weights.sum())

    def argmax_change(self, c_value: float) -> float:
        """Share of ``reference`` logits whose predicted class Clamp(LN + c) changes (App. D.8.2).

        s > 0 and the sign-preserving power are monotone, so the prediction of M(s, p, c) depends on c (and the
        clamp) only: one check per c covers the whole (s, p) slice.
        """
        if self.reference is None:
            return 0.0
        c_value = float(c_value)
        if c_value not in self._argmax_changes:  # asked once by the search and again for the card's notes
            if self._ref_top_first is None:
                self._ref_top_first = _top_first(self.reference.to(self.dtype))
            self._argmax_changes[c_value] = prediction_change_share(self._ref_top_first, self._clamp_fn, c_value)
        return self._argmax_changes[c_value]

    # -------------------------------------------------------------------------------------------- margins
    def margins(self, s_values: torch.Tensor, p_values: torch.Tensor, c_value: float) -> torch.Tensor:
        """Confidence margins of M(s, p, c) for every s in ``s_values`` and p in ``p_values`` at one c:
        shape (S, P, n_clean + n_attacked), clean examples first."""
        s_values, s_order = torch.as_tensor(s_values, dtype=torch.float64).flatten().sort()  # ascending: see below
        p_values = torch.as_tensor(p_values, dtype=torch.float64).flatten()
        z = self._z_top_first
        n, k = z.shape
        ct = self.dtype
        h = self._clamp_fn(z.to(ct) + float(c_value))
        log_abs, sign = h.abs().clamp_min_(1e-30).log_(), h.sign()
        out = torch.empty(len(s_values), len(p_values), n, dtype=torch.float64, device=z.device)
        s_dev = s_values.to(device=z.device)
        neg_s = (-s_dev).to(ct)
        p_batch = max(1, U_BATCH // max(1, n * k))
        for a in range(0, len(p_values), p_batch):
            ps = p_values[a:a + p_batch].to(device=z.device)
            # |h|^p = exp(p log|h|); the floor keeps exp on its fast path and changes u by < 2e-35
            u = torch.mul(log_abs.unsqueeze(0), ps.to(ct).view(-1, 1, 1)).clamp_min_(EXP_FLOOR).exp_().mul_(sign)
            top, idx = _top2(u)
            if not torch.isfinite(top).all():
                raise InputError(f"clamp {self.clamp!r} produced non-finite values at c={float(c_value)};"
                                 " check the clamp function")
            d = torch.sub(top[..., :1], u, out=u)  # u_top1 - u >= 0, in place
            gap = self._top_gap(z, idx, ps, float(c_value))  # (Pb, N) float64
            numer = -torch.expm1(-s_dev.view(-1, 1, 1) * gap.unsqueeze(0))  # (S, Pb, N)
            denom = self._denominators(d.view(-1, k), neg_s).view(len(s_values), len(ps), n)
            out[:, a:a + len(ps)] = numer / denom
        return torch.empty_like(out).index_copy_(0, s_order.to(out.device), out)

    def _top_gap(self, z: torch.Tensor, idx: torch.Tensor, ps: torch.Tensor, c: float) -> torch.Tensor:
        """u_1 - u_2 recomputed in float64 from the top-two classes (the margin numerator needs it exactly)."""
        z2 = torch.gather(z.unsqueeze(0).expand(len(ps), -1, -1), 2, idx)  # (Pb, N, 2)
        h = self._clamp_fn(z2 + c)
        u = torch.sign(h) * h.abs().clamp_min(1e-30).pow(ps.view(-1, 1, 1))
        return (u[..., 0] - u[..., 1]).abs()

    def _denominators(self, d: torch.Tensor, neg_s: torch.Tensor) -> torch.Tensor:
        """sum_k exp(-s d_k) for every s and row of ``d`` (R, K), in row chunks whose exponent buffer holds about
        ``chunk_size`` elements; returns (S, R) float64."""
        r, k = d.shape
        s_n = len(neg_s)
        rows = max(1, self.chunk_size // max(1, s_n * k))
        buf = torch.empty(s_n * min(rows, r) * k, dtype=d.dtype, device=d.device)
        out = torch.empty(s_n, r, dtype=d.dtype, device=d.device)
        # only the s values whose exponent can fall below the floor need the clamp pass (s is sorted ascending)
        n_chunks = -(-r // rows)
        row_max = torch.nn.functional.pad(d.amax(dim=-1), (0, n_chunks * rows - r))
        below = neg_s.view(1, -1) * row_max.view(n_chunks, rows).amax(dim=1, keepdim=True) < EXP_FLOOR
        first_clamped = torch.where(below.any(1), below.to(torch.int8).argmax(1), s_n).tolist()
        for ci, a in enumerate(range(0, r, rows)):
            b = min(r, a + rows)
            t = buf[: s_n * (b - a) * k].view(s_n, (b - a) * k)
            torch.outer(neg_s, d[a:b].reshape(-1), out=t)
            if first_clamped[ci] < s_n:
                t[first_clamped[ci]:].clamp_min_(EXP_FLOOR)
            t.exp_()
            torch.sum(t.view(s_n, b - a, k), dim=-1, out=out[:, a:b])
        return out.to(torch.float64)

    # ----------------------------------------------------------------------------------------- evaluation
    def evaluate(self, s_values: torch.Tensor | list[float], p_values: torch.Tensor | list[float],
                 c_values: torch.Tensor | list[float]) -> GridEvaluation:
        """Algorithm 1 lines 4-13 for every combination of the given values (a full tensor grid)."""
        s_values = torch.as_tensor(s_values, dtype=torch.float64).flatten()
        p_values = torch.as_tensor(p_values, dtype=torch.float64).flatten()
        c_values = torch.as_tensor(c_values, dtype=torch.float64).flatten()
        if (s_values <= 0).any() or (p_values <= 0).any():
            raise InputError("s and p values must be positive")
        counts = torch.empty(len(s_values), len(p_values), len(c_values), dtype=torch.int64)
        q = torch.empty(len(s_values), len(p_values), len(c_values), dtype=torch.float64)
        nc = self.n_clean
        weights = None if self.clean_weights is None else self.clean_weights.to(self._z_top_first.device, torch.bool)
        with progress_bar(self.progress) as bar:
            task = bar.add_task("Algorithm 1 grid search", total=len(c_values))
            for kc, c in enumerate(c_values.tolist()):
                if self.max_argmax_change is not None and self.argmax_change(c) > self.max_argmax_change:
                    # infeasible (App. D.8.2): M would change too many RBC predictions; objective > 1 marks it,
                    # and alpha = 1 (q = 0: the RBC alone) is the only safe weight there
                    counts[:, :, kc] = self.denominator + 1
                    q[:, :, kc] = 0.0
                    bar.advance(task)
                    continue
                m = self.margins(s_values, p_values, c)  # (S, P, N)
                qq = self.thresholds(m[..., nc:])  # (S, P)
                # the authors' code caps a saturated threshold for the objective only (alpha keeps the uncapped q)
                thr = qq.clamp_max(SATURATED) if self.search == "authors" else qq
                reach = m[..., :nc] >= thr.unsqueeze(-1)
                if weights is not None:
                    reach &= weights
                counts[:, :, kc] = reach.sum(-1).cpu()
                q[:, :, kc] = qq.cpu()
                bar.advance(task)
        return GridEvaluation(s_values, p_values, c_values, counts, self.denominator, q)

    def best_index(self, ev: GridEvaluation) -> tuple[int, int, int]:
        """The arg-min of the objective with the module's tie-breaking rule (most modest s, p, c); with
        ``search="authors"`` the first minimum in the authors' loop order (s, then c, then p: the first line their
        ``calc_spca.py`` prints)."""
        S, P, C = ev.counts.shape
        if self.search == "authors":
            si, pi, ci = torch.meshgrid(torch.arange(S), torch.arange(P), torch.arange(C), indexing="ij")
            keys = [ev.counts.flatten().numpy(), si.flatten().numpy(), ci.flatten().numpy(), pi.flatten().numpy()]
            flat = int(np.lexsort(keys[::-1])[0])
            return flat // (P * C), (flat // C) % P, flat % C
        s, p, c = torch.meshgrid(ev.s_values, ev.p_values, ev.c_values, indexing="ij")
        keys = [ev.counts.flatten().numpy(), p.flatten().numpy(), np.abs(np.log(s.flatten().numpy())),
                np.abs(c.flatten().numpy()), s.flatten().numpy(), c.flatten().numpy()]
        flat = int(np.lexsort(keys[::-1])[0])
        return flat // (P * C), (flat // C) % P, flat % C

    def result(self, ev: GridEvaluation, method: str = "grid", n_evaluated: int | None = None,
               notes: list[str] | None = None) -> SearchResult:
        """The :class:`SearchResult` for the best point of ``ev``."""
        i, j, k = self.best_index(ev)
        q = float(ev.q[i, j, k])
        return SearchResult(s=float(ev.s_values[i]), p=float(ev.p_values[j]), c=float(ev.c_values[k]),
                            alpha=1.0 / (1.0 + q), objective=float(ev.objectives[i, j, k]), q=q, evaluation=ev,
                            n_evaluated=ev.counts.numel() if n_evaluated is None else n_evaluated,
                            method=method, notes=list(notes or []))

    def exact(self, result: SearchResult) -> SearchResult:
        """``result`` with q, alpha and the objective recomputed in float64 at its (s, p, c).

        The search may run in float32 (fast); the card's alpha must still make the constraint of Eq. 7 active when
        the margins are computed exactly, or a float32 rounding of the quantile could leave one attacked example
        below the threshold (and a robust accuracy below what beta promises)."""
        if self.dtype == torch.float64:
            return result
        point = replace(self, dtype=torch.float64, progress=False, reference=None, max_argmax_change=None)
        ev = point.evaluate([result.s], [result.p], [result.c])
        q = float(ev.q[0, 0, 0])
        return replace(result, q=q, alpha=1.0 / (1.0 + q), objective=float(ev.objectives[0, 0, 0]))


def _order_index(beta: float, n: int) -> int:
    """``floor((1 - beta) n)`` with a 1e-9 guard against 0.1 * 10 = 0.9999..., at most ``n - 1``."""
    return min(int(math.floor((1.0 - beta) * n + 1e-9)), n - 1)


def _top_first(z: torch.Tensor, head: int = 8) -> torch.Tensor:
    """Permute each row so its ``head`` largest values come first, in descending order (the rest keep their order).

    Margins do not depend on the order of classes; with the top classes first, the top two of
    ``u = sgn|Clamp(z + c)|^p`` lie in the first columns for every monotone clamp (and GELU in practice), so
    :func:`_top2` finds them in a narrow slice. Much cheaper than a full sort.
    """
    k = z.shape[-1]
    if k <= head:
        return z.sort(dim=-1, descending=True).values
    top, idx = z.topk(head, dim=-1)
    keep = torch.ones_like(z, dtype=torch.bool).scatter_(-1, idx, False)
    return torch.cat([top, z[keep].view(len(z), k - head)], dim=-1)


def _top2(u: torch.Tensor, head: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-two values and indices along the last dimension, exact for any input.

    Rows are expected to be nearly sorted (descending), so the top two are taken from the first ``head`` columns
    and confirmed against the maximum of the rest; rows where the rest is larger fall back to a full ``topk``.
    """
    k = u.shape[-1]
    if k <= head:
        return u.topk(2, dim=-1)
    top, idx = u[..., :head].topk(2, dim=-1)
    bad = u[..., head:].amax(dim=-1) > top[..., 1]
    if bad.any():
        top_b, idx_b = u[bad].topk(2, dim=-1)
        top[bad], idx[bad] = top_b, idx_b
    return top, idx


def grid_search(problem: CalibrationProblem, grid: Grid) -> SearchResult:
    """The plain Algorithm 1: every point of ``grid``, vectorised (optimizer ``"grid"``)."""
    return problem.result(problem.evaluate(grid.s_values(), grid.p_values(), grid.c_values()))


# ------------------------------------------------------------------------------------------------ calibrate
def _check_logits(x: Any, what: str) -> None:
    if not isinstance(x, torch.Tensor) or x.ndim != 2 or not x.is_floating_point():
        shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise InputError(f"{what} must be a 2-D float tensor (examples x classes), got {shape}")
    if x.shape[1] < 2:
        raise InputError(f"{what} has {x.shape[1]} class; a classifier needs at least 2")
    if x.numel() and not torch.isfinite(x).all():
        bad = int((~torch.isfinite(x)).any(1).sum())
        raise InputError(f"{what} has NaN or infinite values in {bad} rows; check the model that produced them")


def _check_labels(y: Any, n: int, k: int, what: str) -> None:
    if not isinstance(y, torch.Tensor) or y.ndim != 1 or y.is_floating_point() or y.dtype == torch.bool:
        raise InputError(f"{what} must be a 1-D integer tensor")
    if len(y) != n:
        raise InputError(f"{what} has {len(y)} entries for {n} examples; they must match")
    if n and (int(y.min()) < 0 or int(y.max()) >= k):
        raise InputError(f"{what} must lie in [0, {k}), got range [{int(y.min())}, {int(y.max())}]")


def _model_info(m: Any) -> dict[str, Any]:
    if m is None:
        return {}
    if isinstance(m, dict):
        return dict(m)
    from mixzoo.zoo.models import BaseClassifier, weight_hash

    if isinstance(m, BaseClassifier):
        return {"name": m.name, "weight_hash": m.weight_hash}
    return {"name": type(m).__name__, "weight_hash": weight_hash(m)}


def _selection_hash(*masks: torch.Tensor) -> str:
    h = hashlib.sha256()
    for m in masks:
        h.update(m.to(torch.uint8).cpu().numpy().tobytes())
        h.update(b"|")
    return h.hexdigest()[:16]


def check_search(search: object, optimizer: str = "grid") -> None:
    """Raise :class:`InputError` unless ``search`` is a known search rule usable with ``optimizer``."""
    if search not in SEARCHES:
        raise InputError(f"search must be one of {', '.join(map(repr, SEARCHES))} (see mixzoo.calibrate), got"
                         f" {search!r}")
    if search == "authors" and optimizer != "grid":
        raise InputError(f"search='authors' reproduces the authors' grid loop; use optimizer 'grid', not {optimizer!r}")


def check_settings(*, beta: float, clamp: str, objective: str, optimizer: str, grid: Grid | None,
                   top_k: int | None = None, search: str = "mixzoo") -> None:
    """One-line :class:`InputError` for a bad Algorithm 1 setting; callers run it before any expensive attack."""
    from mixzoo.core.plugins import lookup

    if not isinstance(beta, int | float) or not 0.0 <= beta <= 1.0:
        raise InputError(f"beta must lie in [0, 1], got {beta}")
    check_search(search, optimizer)
    check_top_k(top_k)
    if objective not in ("standard", "relaxed"):
        raise InputError(f"objective must be 'standard' or 'relaxed', got {objective!r}")
    if grid is not None and not isinstance(grid, Grid):
        raise InputError(f"grid must be a mixzoo.methods.mixednuts.calibrate.Grid, got {type(grid).__name__}")
    if not isinstance(clamp, str):
        raise InputError(f"clamp must be a clamp name (it is recorded in the card), got {type(clamp).__name__}")
    get_clamp(clamp)  # unknown names fail here with suggestions
    lookup("optimizer", optimizer)


@dataclass(frozen=True)
class CalibrationSettings:
    """The knobs of :func:`calibrate` (its docstring says what each does)."""

    beta: float = 0.985
    clamp: str = "gelu"
    top_k: int | None = None
    grid: Grid | None = None
    objective: str = "standard"
    optimizer: str = "grid"
    linear: bool = False
    max_argmax_change: float | None = 0.005
    chunk_size: int = DEFAULT_CHUNK
    dtype: torch.dtype = torch.float32
    progress: bool = False
    search: str = "mixzoo"
    more_images: bool = True


@dataclass(frozen=True)
class CardRecords:
    """What :func:`calibrate` records in the card besides the fit: the models (``{name, weight_hash}`` dicts or the
    models themselves), the dataset, and the data and attack records."""

    abc: Any = None
    rbc: Any = None
    dataset: str | None = None
    data_info: dict[str, Any] | None = None
    attack_info: dict[str, Any] | None = None


def _settings_of(settings: CalibrationSettings | None, records: CardRecords | None, changes: dict[str, Any]
                 ) -> tuple[CalibrationSettings, CardRecords]:
    """``settings`` and ``records`` (default: the defaults) with the keywords of ``changes`` named after fields."""
    settings = settings if settings is not None else CalibrationSettings()
    records = records if records is not None else CardRecords()
    names = {f.name for f in fields(CalibrationSettings)}
    record_names = {f.name for f in fields(CardRecords)}
    for key in changes:
        if key not in names and key not in record_names:
            raise TypeError(f"calibrate() got an unexpected keyword argument {key!r}")
    settings = replace(settings, **{k: v for k, v in changes.items() if k in names})
    return settings, replace(records, **{k: v for k, v in changes.items() if k in record_names})


def calibrate(
    *,
    clean_logits: torch.Tensor,
    clean_labels: torch.Tensor,
    attacked_logits: torch.Tensor,
    attacked_labels: torch.Tensor,
    abc_clean_correct: torch.Tensor | None = None,
    settings: CalibrationSettings | None = None,
    records: CardRecords | None = None,
    **changes: Any,
) -> MixCard:
    """Algorithm 1 (Sec. 4.3): s, p, c and alpha of MixedNUTS from the RBC's clean and MMAA-attacked logits.

    ``clean_logits``/``attacked_logits`` are raw RBC logits (N, K) on the calibration images and on their
    minimum-margin perturbations. ``settings`` (:class:`CalibrationSettings`) and ``records``
    (:class:`CardRecords`); keywords named after their fields change a copy (``calibrate(..., beta=0.99)``).
    ``objective="relaxed"`` (App. D.8.3) needs ``abc_clean_correct`` (bool per clean example). ``optimizer`` names
    a search from the ``mixzoo_calibration_optimizers`` hook (``grid``, ``refine``). ``linear=True`` calibrates only
    alpha for the linear baseline (raw logits, s = p = 1, c = 0). Every card also gets ``alpha_d`` for the auxiliary
    mixture of Eq. 8. ``abc``/``rbc`` are ``{name, weight_hash}`` dicts or the models themselves;
    ``data_info``/``attack_info`` are recorded in the card.

    ``max_argmax_change`` (App. D.8.2): grid points whose transform changes the RBC's predicted class on more than
    this share of the clean and attacked-correct calibration images are infeasible (GELU is not monotone below
    zero, so a large negative c can flip unconfident predictions and cost both accuracy and robustness);
    ``None`` disables the check.

    ``search="authors"`` reproduces the authors' ``calc_spca.py`` loop (module docstring: percentile threshold, no
    App. D.8.2 filter, saturated thresholds capped for the objective, the first optimum in their loop order, float64
    throughout); ``max_argmax_change`` then only warns. Warns (one line each) when thresholds saturate and when beta
    is degenerate (many grid points tie at the optimum).
    """
    cs, records = _settings_of(settings, records, changes)
    sel = _Selection.of(clean_logits, clean_labels, attacked_logits, attacked_labels, cs)
    warn_change = cs.max_argmax_change
    if cs.search == "authors":  # the authors' code filters nothing (difference b) and computes in float64
        cs = replace(cs, max_argmax_change=None, dtype=torch.float64)
    weights = sel.relaxed_weights(cs.objective, abc_clean_correct)
    result, problem, alpha_d = _search(sel, cs, weights)
    notes = list(result.notes)
    notes += _search_warnings(result, float(cs.beta), cs.search, cs.linear, cs.more_images)
    notes += _filter_notes(result, problem, cs, warn_change)
    data = sel.record(cs, weights)
    if not cs.linear:
        moved = _argmax_changed(sel.clean_ln, result, cs.clamp)
        data["transform_argmax_changed"] = moved
        if moved > 0.01:
            notes.append(f"M(s*, p*, c*) changes the RBC's prediction on {moved:.1%} of clean images (App. D.8.2);"
                         " consider another clamp or grid")
    data.update(records.data_info or {})
    if cs.search == "authors":
        data["search"] = "authors"
    return _card(result, cs, records, data, notes, alpha_d)


@dataclass
class _Selection:
    """Algorithm 1's data: the layer-normed logits, the clean mistakes and the attacked-correct examples."""

    clean_logits: torch.Tensor
    attacked_logits: torch.Tensor
    clean_ln: torch.Tensor
    attacked_ln: torch.Tensor
    clean_wrong: torch.Tensor
    attacked_right: torch.Tensor

    @classmethod
    def of(cls, clean_logits: torch.Tensor, clean_labels: torch.Tensor, attacked_logits: torch.Tensor,
           attacked_labels: torch.Tensor, cs: CalibrationSettings) -> _Selection:
        """The inputs checked (one-line errors), then selected as Algorithm 1 lines 1-3 do."""
        _check_logits(clean_logits, "clean_logits")
        _check_logits(attacked_logits, "attacked_logits")
        n_c, k = clean_logits.shape
        n_a = attacked_logits.shape[0]
        if attacked_logits.shape[1] != k:
            raise InputError(f"clean_logits have {k} classes but attacked_logits have {attacked_logits.shape[1]};"
                             " they must come from the same RBC")
        _check_labels(clean_labels, n_c, k, "clean_labels")
        _check_labels(attacked_labels, n_a, k, "attacked_labels")
        if n_c == 0 or n_a == 0:
            raise InputError("the calibration set is empty; pass logits of at least a few hundred images")
        check_settings(beta=cs.beta, clamp=cs.clamp, objective=cs.objective, optimizer=cs.optimizer, grid=cs.grid,
                       top_k=cs.top_k, search=cs.search)
        top_k = cs.top_k
        if top_k is not None and (top_k < 2 or top_k > k):
            raise InputError(f"top_k must lie in [2, {k}] (number of classes), got {top_k}")
        clean_ln = layer_norm(clean_logits.detach().to(torch.float64), top_k)
        attacked_ln = layer_norm(attacked_logits.detach().to(torch.float64), top_k)
        clean_wrong = clean_ln.argmax(1) != clean_labels.to(clean_ln.device)
        attacked_right = attacked_ln.argmax(1) == attacked_labels.to(attacked_ln.device)
        if int(clean_wrong.sum()) == 0:
            raise InputError(f"the RBC makes no mistakes on the {n_c} calibration images; use more images")
        if int(attacked_right.sum()) == 0:
            raise InputError(f"the RBC is wrong on all {n_a} attacked images, so there is no robustness to keep;"
                             " check the attack radius (eps) and the RBC")
        return cls(clean_logits, attacked_logits, clean_ln, attacked_ln, clean_wrong, attacked_right)

    def relaxed_weights(self, objective: str, abc_clean_correct: Any) -> torch.Tensor | None:
        """App. D.8.3: the clean mistakes the ABC gets right (``objective="relaxed"``), else ``None``."""
        if objective != "relaxed":
            return None
        n_c = len(self.clean_logits)
        if abc_clean_correct is None:
            raise InputError("objective='relaxed' (App. D.8.3) needs abc_clean_correct, one bool per clean image")
        abc_clean_correct = torch.as_tensor(abc_clean_correct)
        if abc_clean_correct.shape != (n_c,):
            raise InputError(f"abc_clean_correct has shape {tuple(abc_clean_correct.shape)} for {n_c} clean"
                             " images; it must be one bool per image")
        weights = abc_clean_correct.to(torch.bool).to(self.clean_wrong.device)[self.clean_wrong]
        if not weights.any():
            raise InputError("the ABC is wrong on every clean image the RBC gets wrong, so the relaxed objective"
                             " is undefined; use objective='standard' or more images")
        return weights

    def record(self, cs: CalibrationSettings, weights: torch.Tensor | None) -> dict[str, Any]:
        """The card's data table: the counts of Algorithm 1's sets and the hash of the selection."""
        data: dict[str, Any] = {
            "n_clean": len(self.clean_logits), "n_clean_incorrect": int(self.clean_wrong.sum()),
            "n_attacked": len(self.attacked_logits), "n_attacked_correct": int(self.attacked_right.sum()),
            "objective_kind": cs.objective, "selection_hash": _selection_hash(self.clean_wrong, self.attacked_right),
        }
        if weights is not None:
            data["n_clean_incorrect_abc_correct"] = int(weights.sum())
        return data


def _search(sel: _Selection, cs: CalibrationSettings, weights: torch.Tensor | None
            ) -> tuple[SearchResult, CalibrationProblem | None, float]:
    """Algorithm 1's search (or the linear method's alpha), the problem it ran on, and alpha_d of Eq. 8."""
    from mixzoo.core.plugins import lookup

    clean_wrong, attacked_right = sel.clean_wrong, sel.attacked_right
    common = dict(beta=float(cs.beta), clean_weights=weights, chunk_size=cs.chunk_size, dtype=cs.dtype,
                  search=cs.search)
    one_point = {**common, "dtype": torch.float64}  # a single (s, p, c): exact arithmetic costs nothing
    aux_problem = CalibrationProblem(sel.clean_ln[clean_wrong], sel.attacked_ln[attacked_right], clamp="linear",
                                     **one_point)
    alpha_d = float(aux_problem.evaluate([1.0], [1.0], [0.0]).alphas[0, 0, 0])
    if cs.linear:
        raw = CalibrationProblem(sel.clean_logits.detach().to(torch.float64)[clean_wrong],
                                 sel.attacked_logits.detach().to(torch.float64)[attacked_right], clamp="linear",
                                 **one_point)
        return raw.result(raw.evaluate([1.0], [1.0], [0.0]), method="linear"), None, alpha_d
    problem = CalibrationProblem(sel.clean_ln[clean_wrong], sel.attacked_ln[attacked_right], clamp=cs.clamp,
                                 progress=cs.progress,
                                 reference=torch.cat([sel.clean_ln, sel.attacked_ln[attacked_right]]),
                                 max_argmax_change=cs.max_argmax_change, **common)
    search_fn = lookup("optimizer", cs.optimizer)
    result = search_fn(problem, Grid() if cs.grid is None else cs.grid)
    if not isinstance(result, SearchResult):
        from mixzoo.core.errors import PluginError

        raise PluginError(f"calibration optimizer {cs.optimizer!r} returned {type(result).__name__}, expected"
                          " mixzoo.methods.mixednuts.calibrate.SearchResult")
    return problem.exact(result), problem, alpha_d


def _filter_notes(result: SearchResult, problem: CalibrationProblem | None, cs: CalibrationSettings,
                  warn_change: float | None) -> list[str]:
    """The notes (and, for ``search="authors"``, the warning) of App. D.8.2's filter and of optima on the grid's
    edge; an error when the filter leaves no c."""
    if cs.linear or problem is None:
        return []
    notes, ev, max_change = [], result.evaluation, cs.max_argmax_change
    if cs.search == "authors" and warn_change is not None:
        moved = problem.argmax_change(result.c)
        if moved > warn_change:
            notes.append(_warn(f"search='authors' keeps c = {result.c:.4g}, where the transform changes {moved:.1%} of"
                               f" the RBC's calibration predictions (over {warn_change:.1%}; the authors' code only"
                               " warns, mixzoo's default search drops such c, App. D.8.2)", stacklevel=4))
    if max_change is not None:
        excluded = [c for c in ev.c_values.tolist() if problem.argmax_change(c) > max_change]
        if len(excluded) == len(ev.c_values):
            raise InputError(f"every c in the grid changes more than {max_change:.1%} of the RBC's"
                             " predictions (App. D.8.2); widen the c range towards 0, use another clamp, or pass"
                             " max_argmax_change=None")
        if excluded:
            notes.append(f"c values {', '.join(f'{c:.3g}' for c in excluded)} excluded: the transform changes more"
                         f" than {max_change:.1%} of the RBC's predictions there (App. D.8.2)")
    for axis, values, v in (("s", ev.s_values, result.s), ("p", ev.p_values, result.p),
                            ("c", ev.c_values, result.c)):
        if len(values) > 1 and (v <= float(values.min()) or v >= float(values.max())):
            notes.append(f"the optimum {axis} = {v:.4g} is on the edge of the grid; consider widening it")
    return notes


def _card(result: SearchResult, cs: CalibrationSettings, records: CardRecords, data: dict[str, Any],
          notes: list[str], alpha_d: float) -> MixCard:
    """The mix card of Algorithm 1's result (the linear method's card when ``cs.linear``)."""
    from mixzoo.core.card import MixCard, provenance

    ev = result.evaluation
    grid_info = {"optimizer": "linear" if cs.linear else cs.optimizer, "n_evaluated": result.n_evaluated,
                 "s_values": ev.s_values.tolist(), "p_values": ev.p_values.tolist(),
                 "c_values": ev.c_values.tolist(), "objectives": ev.objectives.tolist(), "alphas": ev.alphas.tolist()}
    if cs.linear:  # the linear method's section: Algorithm 1's alpha on the raw RBC logits
        method, params = "linear", {"alpha": result.alpha, "beta": float(cs.beta), "temperature": 1.0,
                                    "fit": "linear"}
    else:
        method, params = "mixednuts", {
            "s": result.s, "p": result.p, "c": result.c, "alpha": result.alpha, "beta": float(cs.beta),
            "clamp": cs.clamp, "top_k": cs.top_k, "temperature": 0.0, "alpha_d": alpha_d,
            "objective": result.objective, "grid": grid_info, "fit": "mmaa"}
    return MixCard(method, params, abc=_model_info(records.abc), rbc=_model_info(records.rbc),
                   dataset=records.dataset, data=data, attack=dict(records.attack_info or {}),
                   provenance=provenance(layer_norm=LAYER_NORM_VERSION), notes=notes)


def _warn(message: str, stacklevel: int = 4) -> str:
    """Warn with ``message`` pointing at the caller of :func:`calibrate` (from a helper it calls), return it."""
    warnings.warn(message, stacklevel=stacklevel)
    return message


def _search_warnings(result: SearchResult, beta: float, search: str, linear: bool,
                     more_images: bool = True) -> list[str]:
    """Warn (one line each) when thresholds saturate (q >= 1 - 1e-9 in float precision, difference c: at the chosen
    point, or with ``search="authors"`` at any point, whose objective the cap changes) or beta is degenerate (many
    grid points tie at the optimum; a note, not a warning, when ``more_images`` is false: the calibration split has
    no more images to give); returns the messages for the card's notes."""
    ev, out = result.evaluation, []
    feasible = ev.counts <= ev.denominator  # infeasible points (App. D.8.2) carry counts denominator + 1
    saturated = int(((ev.q >= SATURATED) & feasible).sum())
    if result.q >= SATURATED or (saturated and search == "authors"):
        chosen = " including the chosen one" if result.q >= SATURATED else ""
        how = ("capped at 1 - 1e-9 for the objective, as the authors' code does" if search == "authors" else
               "not capped: the objective there counts clean margins that round to 1")
        out.append(_warn(f"Algorithm 1: the threshold q saturates (>= 1 - 1e-9) at {saturated} of {ev.counts.numel()}"
                         f" grid points{chosen} ({how}); lower the grid's s_max"))
    n_tied = int((ev.counts == ev.counts[feasible].min()).sum()) if feasible.any() else 0
    if not linear and (beta == 0.0 or n_tied > max(8, ev.counts.numel() // 20)):
        tie = (f"Algorithm 1: {n_tied} of {ev.counts.numel()} grid points tie at the best objective with"
               f" beta = {beta:g}, so the tie rule, not the data, picks s, p, c")
        out.append(_warn(f"{tie}; use more calibration images or a beta closer to 1") if more_images else
                   f"{tie} (every image of the calibration split was used; a beta closer to 1 changes this)")
    return out


def prediction_change_share(z_top_first: torch.Tensor, clamp_fn: Any, c: float) -> float:
    """Share of rows whose predicted class Clamp(z + c) changes (App. D.8.2), rows given by :func:`_top_first`.

    s > 0 and the sign-preserving power are monotone, so this is also the share for M(s, p, c) at any s, p. The
    prediction is column 0; it changes when another class overtakes it, or ties with it where it was strictly ahead
    before (e.g. ReLU zeroing every logit leaves no prediction). ``amax`` is cheaper than ``argmax``.
    """
    if z_top_first.shape[1] < 2:
        return 0.0
    h = clamp_fn(z_top_first + float(c))
    others = h[:, 1:].amax(dim=1)
    changed = (others > h[:, 0]) | ((others == h[:, 0]) & (z_top_first[:, 1] < z_top_first[:, 0]))
    return float(changed.double().mean())


def _argmax_changed(ln_logits: torch.Tensor, result: SearchResult, clamp: str) -> float:
    """Share of examples whose predicted class M(s*, p*, c*) changes (Assumption 4.2 check, App. D.8.2)."""
    return prediction_change_share(_top_first(ln_logits.float()), get_clamp(clamp), result.c)


def calibrate_alpha_linear(**kwargs: Any) -> MixCard:
    """Alpha of the linear baseline (Bai et al.: constant alpha, no LN/clamp/power, ABC at T = 1) by Algorithm 1
    on the raw logits; same arguments as :func:`calibrate`."""
    return calibrate(linear=True, **kwargs)
