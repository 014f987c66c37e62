"""Choosing the evaluation-time lower bound alpha_min of adaptive smoothing (Bai et al. 2024b, App. D.1) on the
calibration split.

The mixing network is trained with alpha in the full (0, 1); at evaluation its output is mapped into
``(alpha_min, alpha_max)`` (:func:`.mixing.check_bounds`). App. D.1 fixes ``(0.96, 1)`` for CIFAR-10 by hand. Here
``alpha_min`` is searched: the smallest value of a grid whose robust accuracy on calibration images stays within
``robust_drop`` points of the RBC's under the same attack. A smaller ``alpha_min`` lets the ABC decide more often
(more clean accuracy); a larger one keeps the RBC in charge (more robustness), so robust accuracy grows with
``alpha_min`` and a bisection over the grid needs about log2(len(grid)) attacks.

The attack of the search is white-box and aimed at the method: per example, the worst of APGD-CE + APGD-T through
the whole classifier and of setting D (the same with a term lowering a(x), Bai et al. 2024b, Sec. 4.2), at a reduced
budget (:data:`SEARCH_OPTIONS`). The calibration split is disjoint from the evaluation split, so the bench's numbers are
not fitted to; the bench then attacks the chosen card with everything it has.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from mixzoo.core.errors import InputError
from mixzoo.core.request import EvalRequest

ALPHA_MIN_GRID = (0.0, 0.5, 0.7, 0.8, 0.85, 0.9, 0.92, 0.94, 0.95, 0.96, 0.97, 0.98, 0.99)
SEARCH_OPTIONS: dict[str, Any] = {"n_iter": 25, "n_target_classes": 3}  # the linear alpha match's budget
# (attack plugin, components): run on every candidate, worst case per example
SEARCH_ATTACKS = (("apgd", ["apgd-ce", "apgd-t"]), ("adaptive-smoothing-apgd", ["apgd-ce-alpha", "apgd-t-alpha"]))


def first_reaching(robust: Callable[[int], float], n: int, target: float) -> int:
    """The smallest index ``i`` in ``0 .. n-1`` with ``robust(i) >= target`` by bisection, for ``robust`` growing
    with ``i`` (about log2(n) calls; ``n - 1`` when no index reaches the target). Measured robust accuracy is only
    roughly monotone, so the bracket's invariant ``robust(lo) < target <= robust(hi)`` is all that is relied on."""
    if n < 1:
        raise InputError("the alpha_min grid is empty")
    if robust(0) >= target:
        return 0
    lo, hi = 0, n - 1
    if robust(hi) < target:
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if robust(mid) >= target:
            hi = mid
        else:
            lo = mid
    return hi


def _worst_case(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, attacks: tuple, *,
                run: Callable[..., dict[str, Any]], label: str) -> tuple[float, float]:
    """(clean accuracy, robust accuracy with every attack's breaks combined per example)."""
    robust = None
    clean = 0.0
    for attack, components in attacks:
        ev = run(model, attack, {**SEARCH_OPTIONS, "components": components}, f"{label} {attack}")
        ok = torch.tensor(ev["robust_correct"], dtype=torch.bool)
        robust = ok if robust is None else robust & ok
        clean = sum(ev["clean_correct"]) / len(labels)
    assert robust is not None
    return clean, float(robust.float().mean())


def search_alpha_min(build: Callable[[float], nn.Module], rbc: nn.Module, images: torch.Tensor,
                     labels: torch.Tensor, *, robust_drop: float, request: EvalRequest,
                     key_parts: Callable[[float], dict[str, Any]], rbc_key: dict[str, Any],
                     grid: tuple[float, ...] = ALPHA_MIN_GRID) -> tuple[float, dict[str, Any]]:
    """The smallest ``alpha_min`` of ``grid`` whose robust accuracy on ``images`` is at least the RBC's minus
    ``robust_drop`` points, and the record of the search (every candidate tried, for the card).

    ``build(alpha_min)``: the adaptively smoothed classifier with that bound; ``request``: the
    :func:`mixzoo.attacks.runner.evaluate` request every run starts from (eps, norm, seed, batch size, cache,
    progress; each run sets its attack, options, label and cache key);
    ``key_parts(alpha_min)`` / ``rbc_key``: the cache keys of the candidates and of the RBC.
    """
    from mixzoo.attacks.runner import evaluate

    if not 0 <= robust_drop <= 100:
        raise InputError(f"option robust_drop of adaptive-smoothing must be in [0, 100] points, got {robust_drop}")

    def run_with(keys: dict[str, Any]) -> Callable[..., dict[str, Any]]:
        def run(model: nn.Module, attack: str, options: dict[str, Any], label: str) -> dict[str, Any]:
            return evaluate(model, images, labels, request.replace(attack=attack, attack_options=options, label=label,
                                                                   key_parts=keys))
        return run

    rbc_clean, rbc_robust = _worst_case(rbc, images, labels, SEARCH_ATTACKS[:1], run=run_with(rbc_key),
                                        label="RBC")
    target = rbc_robust - robust_drop / 100
    tried: dict[int, tuple[float, float]] = {}

    def robust(i: int) -> float:
        if i not in tried:
            tried[i] = _worst_case(build(grid[i]), images, labels, SEARCH_ATTACKS,
                                   run=run_with(key_parts(grid[i])), label=f"alpha_min={grid[i]:g}")
        return tried[i][1]

    best = first_reaching(robust, len(grid), target)
    record = {"split": "calibration", "n": len(labels), "attacks": [f"{a} ({', '.join(c)})" for a, c in SEARCH_ATTACKS],
              "options": dict(SEARCH_OPTIONS), "robust_drop": robust_drop, "rbc_clean": rbc_clean,
              "rbc_robust": rbc_robust, "target_robust": target, "met": tried[best][1] >= target,
              "tried": [{"alpha_min": grid[i], "clean_accuracy": c, "robust_accuracy": r}
                        for i, (c, r) in sorted(tried.items())]}
    return grid[best], record
