"""The bench's job as one value, built once per command (:class:`BenchJob`); its work list
(:meth:`BenchJob.steps`) is what the plan (:func:`mixzoo.evaluation.plan.plan_bench`: estimate, ``--dry-run``) and
the run (:func:`mixzoo.evaluation.bench.bench`) both execute, so they cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from mixzoo.core.budget import (
    BUDGETS,
    DEFAULT_BUDGET,
    Budget,
    budget_of,
    component_options,
    shared_attack,
    shared_options,
)
from mixzoo.core.settings import DEFAULT_ATTACK, RunSettings
from mixzoo.methods.base import baseline_method

BENCH_MATCH_ATTACK = "adaptive-apgd"  # what matches the baseline's alpha: cheaper than the main attack


@dataclass(frozen=True)
class MatchSettings:
    """The bench's matched baseline row (Bai et al. 2024a, Fig. 5 / Fig. 8 comparison): the baseline method's parameter
    whose robust accuracy under ``attack`` (with ``options``, cheaper than the shared attack) on the first ``n``
    evaluation images is closest to the card's worst case there
    (:func:`~mixzoo.evaluation.matching.matched_linear_alpha`). Defaults: the ``standard`` budget's."""

    attack: str = BENCH_MATCH_ATTACK
    options: dict[str, Any] = field(default_factory=lambda: dict(BUDGETS[DEFAULT_BUDGET].match_options))
    n: int = BUDGETS[DEFAULT_BUDGET].match_n

    @classmethod
    def for_budget(cls, budget: str | Budget) -> MatchSettings:
        """The matched baseline of ``budget`` (:data:`~mixzoo.core.budget.BUDGETS`)."""
        b = budget_of(budget)
        return cls(options=dict(b.match_options), n=b.match_n)


@dataclass(frozen=True)
class CurveSettings:
    """A method's trade-off curve in the report (:meth:`~mixzoo.methods.MixingMethod.tradeoff_curve`): each point
    attacked with ``attack`` and ``options`` on the first ``n`` evaluation images. Defaults: the ``standard``
    budget's."""

    attack: str = "fast"  # a screening attack: the report and the plot label the curve's points so
    options: dict[str, Any] = field(default_factory=lambda: dict(BUDGETS[DEFAULT_BUDGET].curve_options))
    n: int = BUDGETS[DEFAULT_BUDGET].curve_n
    points: int | None = None  # points per curve, evenly spread over the method's own (None: all of them)

    @classmethod
    def for_budget(cls, budget: str | Budget) -> CurveSettings:
        """The trade-off curve of ``budget`` (:data:`~mixzoo.core.budget.BUDGETS`)."""
        b = budget_of(budget)
        return cls(options=dict(b.curve_options), n=b.curve_n, points=b.curve_points)


def budgeted(s: RunSettings, baseline: MatchSettings | bool | None, curve: CurveSettings | bool | None, *,
             default_attack: str) -> tuple[RunSettings, MatchSettings | None, CurveSettings | None]:
    """The settings, matched baseline and curve with the settings' budget applied
    (:mod:`mixzoo.core.budget`): the shared attack named (the given one, else the budget's, else
    ``default_attack``) with the budget's caps under the user's ``-O``; ``True`` for the baseline or the curve:
    the budget's, ``False``: none; the ``-O`` counts set on the baseline's and the curve's attacks. With a shared
    attack other than the budget's default and its matching attack (a plugin's, say), the budget's baseline is
    matched under the rows' attack and options (the card's robust accuracy it matches is then the one its row
    reports); the budget's matching attack as the shared one keeps the budget's cheaper matching counts."""
    given = dict(s.attack_options or {})
    attack = shared_attack(s.budget, s.attack, default_attack)
    s = s.changed(attack=attack, attack_options=shared_options(s.budget, attack, given))
    match = MatchSettings.for_budget(s.budget) if baseline is True else baseline or None
    if baseline is True and attack not in (match.attack, shared_attack(s.budget, None, default_attack)):
        match = replace(match, attack=attack, options=dict(s.attack_options))
    elif match is not None:
        match = replace(match, options=component_options(s.budget, match.attack, match.options, given))
    points = CurveSettings.for_budget(s.budget) if curve is True else curve or None
    if points is not None:
        points = replace(points, options=component_options(s.budget, points.attack, points.options, given))
    return s, match, points


@dataclass(frozen=True)
class Step:
    """One item of the bench's work list, in the order it runs: ``kind`` (``abc``, ``rbc``, ``card``, ``baseline``,
    ``curve``, ``report``), the card it concerns (a card row's card; the first card for the baseline and the
    curve) and, for the curve, how many classifiers it attacks (:meth:`mixzoo.methods.MixingMethod.curve_size`;
    ``None``: unknown)."""

    kind: str
    card: Any = None
    points: int | None = None


@dataclass(frozen=True)
class BenchJob:
    """What one bench runs: ``settings`` (the budget applied once: :func:`budgeted`), ``given`` (the user's ``-O``,
    which the declared attacks' counts follow), ``baseline`` / ``curve`` (``None``: none) and the loaded
    ``cards``."""

    settings: RunSettings
    given: dict[str, Any]
    baseline: MatchSettings | None
    curve: CurveSettings | None
    cards: tuple[Any, ...] = ()

    @classmethod
    def of(cls, settings: RunSettings, baseline: MatchSettings | bool | None, curve: CurveSettings | bool | None,
           cards: Any = (), *, default_attack: str = DEFAULT_ATTACK) -> BenchJob:
        """The job of ``settings`` with the budget applied (``baseline``, ``curve`` as :func:`budgeted` takes them)."""
        given = dict(settings.attack_options or {})  # the user's -O, before the budget's caps
        s, match, points = budgeted(settings, baseline, curve, default_attack=default_attack)
        return cls(s, given, match, points, tuple(cards))

    def changed(self, **changes: Any) -> BenchJob:
        """A copy: ``cards`` (any sequence) replaced, other names change the settings (:meth:`RunSettings.changed`)."""
        cards = tuple(changes.pop("cards", self.cards))
        return replace(self, cards=cards, settings=self.settings.changed(**changes) if changes else self.settings)

    def matches_baseline(self) -> bool:
        """Whether the job has a matched baseline row: one card, not of the baseline method itself."""
        lin = baseline_method()
        return self.baseline is not None and len(self.cards) == 1 and lin is not None \
            and self.cards[0].method != lin.name

    def steps(self) -> list[Step]:
        """The work list, in the order the bench runs it: the ABC, the RBC, one row per card, the matched baseline,
        the first card's trade-off curve, the report."""
        out = [Step("abc"), Step("rbc"), *(Step("card", c) for c in self.cards)]
        if self.matches_baseline():
            out.append(Step("baseline", self.cards[0]))
        if self.curve is not None and self.cards:
            card = self.cards[0]
            out.append(Step("curve", card, card.mixing_method.curve_size(card, self.curve.points)))
        return [*out, Step("report")]


def sweep_steps(card: Any, *, matched: bool, alpha_given: bool) -> list[Step]:
    """The work list of sanity's eps sweep (:func:`mixzoo.evaluation.sanity.eps_sweep` runs it, its plan
    :func:`mixzoo.evaluation.plan.plan_sanity` estimates it), in order: the baseline's matching (``matched`` and no
    alpha given), then the rows: the ABC, the RBC, the baseline method's row (matched, or at the given alpha; not for
    a card of the baseline method), the card."""
    lin = baseline_method()
    baseline = (matched or alpha_given) and lin is not None and card.method != lin.name
    return [*([Step("match", card)] if baseline and not alpha_given else []), Step("abc"), Step("rbc"),
            *([Step("baseline", card)] if baseline else []), Step("card", card)]


__all__ = ["BENCH_MATCH_ATTACK", "BenchJob", "CurveSettings", "MatchSettings", "Step", "budgeted", "sweep_steps"]
