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

Speed: :mod:`mixzoo.methods.mixednuts.calibration_problem` (the margins of every s from one pass per (p, c)).
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch

from mixzoo.core.errors import InputError
from mixzoo.methods.mixednuts.calibration_problem import (
    SATURATED,
    CalibrationProblem,
    _top_first,
    grid_search,
    prediction_change_share,
)
from mixzoo.methods.mixednuts.calibration_settings import CalibrationSettings, CardRecords, with_changes
from mixzoo.methods.mixednuts.grid import Grid, SearchResult
from mixzoo.methods.mixednuts.selection import _Selection
from mixzoo.methods.mixednuts.transforms import LAYER_NORM_VERSION, get_clamp

if TYPE_CHECKING:
    from mixzoo.core.card import MixCard

# what optimizer plugins and mixzoo 0.1's ``mixzoo.calibrate`` import from here
__all__ = ["CalibrationProblem", "CalibrationSettings", "CardRecords", "Grid", "SearchResult", "calibrate",
           "grid_search"]


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

    ``search="authors"`` reproduces the authors' ``calc_spca.py`` loop (the differences the module docstring lists);
    ``max_argmax_change`` then only warns. Warns (one line each) when thresholds saturate and when beta is
    degenerate (many grid points tie at the optimum).
    """
    cs, records = with_changes("calibrate", changes, settings if settings is not None else CalibrationSettings(),
                               records if records is not None else CardRecords())
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
        # the share of clean predictions M(s*, p*, c*) changes (Assumption 4.2 check, App. D.8.2)
        moved = prediction_change_share(_top_first(sel.clean_ln.float()), get_clamp(cs.clamp), result.c)
        data["transform_argmax_changed"] = moved
        if moved > 0.01:
            notes.append(f"M(s*, p*, c*) changes the RBC's prediction on {moved:.1%} of clean images (App. D.8.2);"
                         " consider another clamp or grid")
    data.update(records.data_info or {})
    if cs.search == "authors":
        data["search"] = "authors"
    return _card(result, cs, records, data, notes, alpha_d)


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


def _model_info(m: Any) -> dict[str, Any]:
    if m is None:
        return {}
    if isinstance(m, dict):
        return dict(m)
    from mixzoo.zoo.models import BaseClassifier, weight_hash

    if isinstance(m, BaseClassifier):
        return {"name": m.name, "weight_hash": m.weight_hash}
    return {"name": type(m).__name__, "weight_hash": weight_hash(m)}
