"""The surrogate problem of Eq. 7 (Bai et al. 2024a, Sec. 4.3) on fixed data: Algorithm 1 lines 4-13, vectorised.

Speed: the work is the exponentials of the softmax denominators. LN, the clamp and the power depend only on
(p, c), so ``u = sgn * |Clamp(LN + c)|^p`` is computed once per (p, c) (``|.|^p = exp(p log|.|)`` with the log
shared by all p) and the margins for every s follow from ``d = u_top1 - u``:
``margin(s) = (1 - exp(-s (u_1 - u_2))) / sum_k exp(-s d_k)``. Exponents are clipped at -80 (exp(-80) ~ 2e-35,
far below float32 resolution of a sum >= 1) because the CPU exp kernel is ~50x slower on arguments below -88.
The numerator uses the top-two values recomputed in float64; the denominator is float32 unless ``dtype=float64``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from mixzoo.core.errors import InputError
from mixzoo.core.progress import progress_bar
from mixzoo.methods.mixednuts.grid import Grid, GridEvaluation, SearchResult
from mixzoo.methods.mixednuts.transforms import get_clamp

EXP_FLOOR = -80.0
SATURATED = 1.0 - 1e-9  # a threshold q at or above this is saturated; the authors' code caps q here (difference c)
SEARCHES = ("mixzoo", "authors")
DEFAULT_CHUNK = 1 << 17  # float elements in the exponent buffer (512 KiB in float32: stays in cache)
U_BATCH = 1 << 22  # float elements of u computed at once


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
        else:
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


def check_search(search: object, optimizer: str = "grid") -> None:
    """Raise :class:`InputError` unless ``search`` is a known search rule usable with ``optimizer``."""
    if search not in SEARCHES:
        raise InputError(f"search must be one of {', '.join(map(repr, SEARCHES))} (see mixzoo.calibrate), got"
                         f" {search!r}")
    if search == "authors" and optimizer != "grid":
        raise InputError(f"search='authors' reproduces the authors' grid loop; use optimizer 'grid', not {optimizer!r}")


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
