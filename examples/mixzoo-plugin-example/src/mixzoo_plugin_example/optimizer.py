"""A calibration optimizer: MixedNUTS's search for (s, p, c) (Bai et al. 2024a, Eq. 7, Algorithm 1).

An optimizer is ``optimizer(problem, grid) -> SearchResult``: ``problem.evaluate(s_values, p_values, c_values)``
evaluates the objective on every combination, ``problem.result(evaluation, ...)`` is the best point with mixzoo's
tie rule. ``mixzoo mix --optimizer NAME`` uses it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mixzoo.methods.mixednuts.calibrate import CalibrationProblem, Grid, SearchResult

NAME = "example-coarse"


def coarse(problem: CalibrationProblem, grid: Grid) -> SearchResult:
    """Every other value of the grid on each axis: about an eighth of the grid's cost."""
    ev = problem.evaluate(grid.s_values()[::2], grid.p_values()[::2], grid.c_values()[::2])
    return problem.result(ev, method=NAME, n_evaluated=ev.counts.numel(), notes=["every other grid value"])
