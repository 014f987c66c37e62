"""How much an evaluation spends, as one setting every component honours: ``--budget quick|standard|strong``.

:data:`BUDGETS` is the one table of what each budget means. A budget sets

* the shared attack: its name where the command was not given one (``strong``: ``adaptive-strong``) and caps on
  its iteration counts (``n_iter``, ``n_restarts``, ``n_target_classes``, ``n_queries``);
* every extra attack a card's method declares: the same caps on its declared options (also on options named after
  them, e.g. ``screen_n_iter``), each the smaller of the declared value and the cap;
* the matched baseline (:class:`~mixzoo.evaluation.bench.MatchSettings`): its attack's options and images;
* the trade-off curve (:class:`~mixzoo.evaluation.bench.CurveSettings`): its attack's options, images and points
  per curve.

``-O KEY=VALUE`` (``RunSettings.attack_options``) sets the shared attack's option ``KEY``; a count of :data:`COUNTS`
is also set on every other component whose attack accepts it, in place of the budget's. ``standard`` caps nothing.
Each component's resolved attack and options go into the report (``settings.components``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mixzoo.core.errors import InputError

# the option names a budget caps and an -O of the same name sets on every component
COUNTS = ("n_iter", "n_restarts", "n_target_classes", "n_queries")
DEFAULT_BUDGET = "standard"


@dataclass(frozen=True)
class Budget:
    """One row of :data:`BUDGETS`: ``caps`` on the counts of :data:`COUNTS` (absent: not capped), ``attack`` when the
    command names none (``None``: the command's default), and the ``match_*`` and ``curve_*`` settings (points per
    curve ``None``: every point)."""

    name: str
    caps: dict[str, int] = field(default_factory=dict)
    attack: str | None = None
    match_options: dict[str, Any] = field(default_factory=lambda: {"n_iter": 25, "n_target_classes": 3})
    match_n: int = 500
    curve_options: dict[str, Any] = field(default_factory=lambda: {"n_iter": 25, "n_target_classes": 3})
    curve_n: int = 300
    curve_points: int | None = None


# ``strong``: ``adaptive-strong``, the matched baseline and the curve at APGD's own counts (100 iterations, 9 targets)
BUDGETS: dict[str, Budget] = {
    "quick": Budget("quick", caps={"n_iter": 10, "n_restarts": 1, "n_target_classes": 3, "n_queries": 200},
                    match_options={"n_iter": 10, "n_target_classes": 3}, match_n=100,
                    curve_options={"n_iter": 10, "n_target_classes": 3}, curve_n=100, curve_points=3),
    "standard": Budget("standard"),
    "strong": Budget("strong", attack="adaptive-strong", match_options={"n_iter": 100, "n_target_classes": 9},
                     curve_options={"n_iter": 100, "n_target_classes": 9}),
}


def budget_of(name: str | Budget) -> Budget:
    """The :class:`Budget` named ``name`` (one of :data:`BUDGETS`); a one-line error naming them otherwise."""
    if isinstance(name, Budget):
        return name
    if name not in BUDGETS:
        raise InputError(f"unknown budget {name!r}; choose {' | '.join(BUDGETS)} (--budget)")
    return BUDGETS[name]


def counts_of(options: dict[str, Any] | None) -> dict[str, Any]:
    """The counts of :data:`COUNTS` among ``options`` (the user's ``-O``): what it sets on every component."""
    return {k: v for k, v in (options or {}).items() if k in COUNTS}


def _accepted(attack: str) -> dict[str, Any] | None:
    """The options attack plugin ``attack`` accepts with their defaults (``None``: it does not declare them)."""
    from mixzoo.core.errors import MixzooError
    from mixzoo.core.plugins import lookup

    try:
        defaults = getattr(lookup("attack", attack), "defaults", None)
    except MixzooError:
        return None
    return dict(defaults) if isinstance(defaults, dict) else None


def _count_of(key: str) -> str | None:
    """The count of :data:`COUNTS` an option stands for: itself, or the count it ends with (``screen_n_iter``)."""
    return next((c for c in COUNTS if key == c or key.endswith("_" + c)), None)


def component_options(budget: str | Budget, attack: str, declared: dict[str, Any] | None,
                      overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The options a component runs attack ``attack`` with under ``budget``: ``declared`` (its own options) with
    every count the attack accepts capped at the budget's cap, or set to ``overrides``' value of that count (the
    user's ``-O``, :func:`counts_of`)."""
    b = budget_of(budget)
    out = dict(declared or {})
    counts = counts_of(overrides)
    if not b.caps and not counts:
        return out
    accepted = _accepted(attack)
    if accepted is None:  # a plugin's attack that does not declare its options: left as declared
        return out
    for key, default in accepted.items():
        count = _count_of(key)
        if count is None:
            continue
        if count in counts:
            out[key] = counts[count]
            continue
        value = out.get(key, default)
        cap = b.caps.get(count)
        if cap is not None and isinstance(value, int) and not isinstance(value, bool) and value > cap:
            out[key] = cap
    return out


LINEAR_COUNTS = ("n_iter", "n_queries")  # the counts an attack's time grows linearly with (a plan's probes cut them)


def scaled_counts(attack: str, options: dict[str, Any] | None, fraction: float) -> dict[str, Any]:
    """``options`` of ``attack`` with each count of :data:`LINEAR_COUNTS` it accepts (also ``screen_n_iter`` and the
    like) at ``fraction`` of its value (given, else the attack's default), rounded up, at least 1: a cut whose time
    past a fixed part is about ``fraction`` of the attack's (a plan times two cuts and extrapolates). An attack that
    does not declare its options is left as given."""
    import math

    out = dict(options or {})
    accepted = _accepted(attack)
    if accepted is None:
        return out
    for key, default in accepted.items():
        value = out.get(key, default)
        if _count_of(key) in LINEAR_COUNTS and isinstance(value, int) and not isinstance(value, bool) and value > 0:
            out[key] = max(1, math.ceil(value * fraction))
    return out


def shared_options(budget: str | Budget, attack: str, given: dict[str, Any] | None) -> dict[str, Any]:
    """The shared attack's options: the budget's caps on its counts (where below the attack's defaults), then the
    options given (``-O``) as they are."""
    return {**component_options(budget, attack, {}), **dict(given or {})}


def shared_attack(budget: str | Budget, given: str | None, default: str) -> str:
    """The shared attack: the one given, else the budget's (``strong``: ``adaptive-strong``), else ``default``."""
    return given if given is not None else budget_of(budget).attack or default


def curve_points(values: tuple[float, ...], points: int | None) -> tuple[float, ...]:
    """``points`` of ``values`` evenly spread over them, both ends kept (all of them when ``points`` is ``None`` or
    not fewer)."""
    if points is None or points >= len(values):
        return tuple(values)
    if points <= 1:
        return (values[-1],)
    step = (len(values) - 1) / (points - 1)
    return tuple(values[round(i * step)] for i in range(points))


def budget_help() -> str:
    """``--budget``'s help: each budget's caps, matched baseline and curve, from :data:`BUDGETS`."""
    def one(b: Budget) -> str:
        caps = ", ".join(f"{k} {v}" for k, v in b.caps.items()) or "no caps"
        attack = f"{b.attack}; " if b.attack else ""
        points = "all points" if b.curve_points is None else f"{b.curve_points} points per curve"
        return (f"{b.name} ({attack}{caps}; baseline {_opts(b.match_options)} on {b.match_n} images; curve "
                f"{_opts(b.curve_options)} on {b.curve_n} images, {points})")

    return ("what every component spends (the shared attack, the declared attacks, the matched baseline, the "
            "curve): " + " | ".join(one(b) for b in BUDGETS.values()) + "; -O n_iter=... (n_restarts, "
            "n_target_classes, n_queries) sets that count on every component")


def _opts(options: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in options.items())


__all__ = ["BUDGETS", "COUNTS", "DEFAULT_BUDGET", "LINEAR_COUNTS", "Budget", "budget_help", "budget_of",
           "component_options", "counts_of", "curve_points", "scaled_counts", "shared_attack", "shared_options"]
