"""Built-in searches for the surrogate problem of Bai et al. 2024a, Eq. 7 (hook ``mixzoo_calibration_optimizers``).

* ``grid``: Algorithm 1 as in the paper, every grid point (vectorised in :mod:`mixzoo.methods.mixednuts.calibrate`).
* ``refine``: the grid, then a second grid of the same size between the neighbours of the best point (s in log
  scale). The objective landscape is smooth (App. D.1), so this finds a better point at twice the cost.

Both use only the public evaluator of :class:`mixzoo.methods.mixednuts.calibrate.CalibrationProblem`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from mixzoo.core.plugins import hookimpl

PROVIDES = {"optimizers": ["grid", "refine"]}  # what `mixzoo plugins` lists

if TYPE_CHECKING:
    import torch

    from mixzoo.methods.mixednuts.calibration_problem import CalibrationProblem
    from mixzoo.methods.mixednuts.grid import Grid, SearchResult


def _around(values: torch.Tensor, i: int, n: int, log: bool) -> torch.Tensor:
    """``n`` values spanning the neighbours of ``values[i]`` (plus that value itself)."""
    import torch

    if len(values) == 1 or n == 1:
        return values[i:i + 1]
    lo, hi = float(values[max(i - 1, 0)]), float(values[min(i + 1, len(values) - 1)])
    new = (torch.logspace(torch.log10(torch.tensor(lo)), torch.log10(torch.tensor(hi)), n, dtype=torch.float64)
           if log else torch.linspace(lo, hi, n, dtype=torch.float64))
    return torch.unique(torch.cat([new, values[i:i + 1]]))


def refine(problem: CalibrationProblem, grid: Grid) -> SearchResult:
    """Coarse grid, then a grid of the same shape around its optimum; the better (same tie rule) wins."""
    from mixzoo.methods.mixednuts.calibration_problem import grid_search
    from mixzoo.methods.mixednuts.grid import SearchResult

    coarse = grid_search(problem, grid)
    ev = coarse.evaluation
    i, j, k = problem.best_index(ev)
    fine_ev = problem.evaluate(_around(ev.s_values, i, grid.s_n, log=True), _around(ev.p_values, j, grid.p_n, False),
                               _around(ev.c_values, k, grid.c_n, log=False))
    fine = problem.result(fine_ev)
    note = (f"refined on a {len(fine_ev.s_values)}x{len(fine_ev.p_values)}x{len(fine_ev.c_values)} grid around the"
            f" grid optimum: objective {coarse.objective:.4f} -> {fine.objective:.4f}")
    return SearchResult(s=fine.s, p=fine.p, c=fine.c, alpha=fine.alpha, objective=fine.objective, q=fine.q,
                        evaluation=ev, n_evaluated=ev.counts.numel() + fine_ev.counts.numel(), method="refine",
                        notes=[note])


@hookimpl
def mixzoo_calibration_optimizers() -> dict[str, Callable[[CalibrationProblem, Grid], SearchResult]]:
    from mixzoo.methods.mixednuts.calibration_problem import grid_search

    return {"grid": grid_search, "refine": refine}
