"""The plans of ``mixzoo bench`` and ``mixzoo sanity`` (:class:`~mixzoo.core.plan.Plan`): their rows, attacks, images
and curve points, each phase estimated from the real attack timed on a few evaluation images (uncached)."""

from __future__ import annotations

from typing import Any

from mixzoo.attacks.runner import evaluate
from mixzoo.core.cache import Cache
from mixzoo.core.plan import Plan, per_image
from mixzoo.core.record import RunRecord
from mixzoo.core.request import EvalRequest
from mixzoo.core.settings import RunSettings, settings_of
from mixzoo.evaluation.bench import (
    CURVE,
    MATCH,
    CurveSettings,
    MatchSettings,
    card_evaluation,
    check_run_settings,
    evaluate_card,
    evaluated_name,
    load_card,
)
from mixzoo.methods.base import baseline_method

MATCH_STEPS = 6  # the baseline's bisection over its alpha grid: about log2(51) evaluations


def _probe(ce: Any, s: RunSettings, attack: str, options: dict[str, Any] | None, eps: float,
           card: Any = None, model: Any = None, extra_attacks: bool | None = None) -> float:
    """Seconds per image of ``attack`` on a card's classifier (with its extra attacks unless ``extra_attacks`` is
    false; default: as the settings say) or on ``model``: the real attack on a few evaluation images, nothing read
    from or written to the cache."""
    extras = s.extra_attacks if extra_attacks is None else extra_attacks
    record = RunRecord.from_settings(s, eps=eps, norm=ce.norm, precision="float32").replace(
        attack=attack, attack_options=options or {})
    request = EvalRequest(record, Cache(None, enabled=False), label="plan", progress=False)

    def run(k: int) -> None:
        images, labels = ce.data.images[:k], ce.data.labels[:k]
        if card is not None:
            evaluate_card(card, ce.abc, ce.rbc, images, labels, request.replace(key_parts={"plan": k}),
                          extra_attacks=extras)
        else:
            evaluate(model, images, labels, request.replace(key_parts={"plan": k}))

    return per_image(run, len(ce.data.labels))


def plan_bench(card: Any, settings: RunSettings | None = None, *, baseline: MatchSettings | None = MATCH,
               curve: CurveSettings | None = CURVE, plots: bool = True, command: str = "mixzoo bench",
               **changes: Any) -> Plan:
    """What :func:`~mixzoo.evaluation.bench.bench` will run for ``card`` (one card or a list of one pair's cards)
    with these settings, phase by phase, each estimated from its attack timed on a few images."""
    s = settings_of(settings, changes)
    check_run_settings(s)
    cards = [load_card(c) for c in (card if isinstance(card, list | tuple) else [card])]
    ce = card_evaluation(cards[0], s)
    n = len(ce.data.labels)
    plan = Plan(command)
    given = ", ".join(f"{k}={v}" for k, v in sorted(s.attack_options.items()))
    attack = f"{s.attack} ({given})" if given else s.attack
    for role, model in (("ABC", ce.abc), ("RBC", ce.rbc)):
        sec = _probe(ce, s, s.attack, s.attack_options, ce.eps, model=model)
        plan.add(f"{role} {evaluated_name(cards[0], role.lower(), model)}", f"{attack} on {n} images", sec * n)
    card_sec = None
    for c in cards:
        method = c.mixing_method
        extras = [e.name for e in method.extra_attacks(c)] if s.extra_attacks else []
        sec = _probe(ce, s, s.attack, s.attack_options, ce.eps, card=c)
        card_sec = card_sec if card_sec is not None else sec
        plus = f" + {', '.join(extras)} on the examples still robust" if extras else ""
        plan.add(method.title or method.name, f"{attack}{plus} on {n} images", sec * n)
    lin = baseline_method()
    if baseline is not None and len(cards) == 1 and lin is not None and cards[0].method != lin.name:
        match_n = min(baseline.n, n)
        sec = _probe(ce, s, baseline.attack, baseline.options, ce.eps, card=lin.card_at(0.9, cards[0]))
        plan.add(f"matched {lin.title}",
                 f"{cards[0].mixing_method.title or cards[0].method} and about {MATCH_STEPS} alphas under "
                 f"{baseline.attack} on {match_n} images, then its row: {attack} on {n} images",
                 (MATCH_STEPS + 1) * sec * match_n + (card_sec or 0.0) * n)
    method = cards[0].mixing_method
    points = method.curve_points
    if curve is not None:
        curve_n = min(curve.n, n)
        # the curve's points get the curve's attack alone, never the card's extra attacks
        sec = _probe(ce, s, curve.attack, curve.options, ce.eps, card=cards[0], extra_attacks=False) if points \
            else None
        count = str(points) if points else "the method's"
        plan.add("trade-off curve", f"{count} points under {curve.attack} on {curve_n} images",
                 None if sec is None else points * sec * curve_n)
    figures = (" and figures (a method's figures may need its calibration data: cached by `mixzoo mix` on this "
               "machine)") if plots else ""
    plan.add("report", f"report.json, report.md{figures}", None)
    if s.attack_options.get("n_iter") is None:
        plan.notes.append("attacks stop on an example once it is broken, so the estimate follows the sample's "
                          "robust share")
    return plan


def plan_sanity(card: Any, settings: RunSettings | None = None, *, radii: list[float] | None = None,
                baseline: MatchSettings | float | None = MATCH, command: str = "mixzoo sanity",
                **changes: Any) -> Plan:
    """What :func:`~mixzoo.evaluation.sanity.eps_sweep` will run: each model at each radius."""
    from mixzoo.evaluation.sanity import default_radii

    s = settings_of(settings, changes, attack="adaptive-apgd", n=200)
    check_run_settings(s)
    ce = card_evaluation(load_card(card), s)
    n = len(ce.data.labels)
    radii = default_radii(ce.eps, ce.data.images, ce.norm) if radii is None else sorted({float(r) for r in radii})
    plan = Plan(command)
    top = max(radii)
    rows = [("ABC", None, ce.abc), ("RBC", None, ce.rbc)]
    lin = baseline_method()
    if baseline is not None and lin is not None and ce.card.method != lin.name:
        if isinstance(baseline, MatchSettings):
            sec = _probe(ce, s, baseline.attack, baseline.options, ce.eps, card=lin.card_at(0.9, ce.card))
            plan.add(f"matched {lin.title} alpha", f"about {MATCH_STEPS} alphas under {baseline.attack} on "
                                                   f"{min(baseline.n, n)} images",
                     (MATCH_STEPS + 1) * sec * min(baseline.n, n))
        rows.append((lin.title, lin.card_at(0.9, ce.card), None))
    rows.append((ce.card.mixing_method.title or ce.card.method, ce.card, None))
    for name, c, model in rows:
        # the smallest radius is the slowest (fewest examples break early): timed there, counted for every radius
        sec = _probe(ce, s, s.attack, s.attack_options, min(radii), card=c, model=model)
        listed = ", ".join(f"{r:g}" for r in radii)
        plan.add(str(name), f"{s.attack} on {n} images at {len(radii)} radii (eps {listed})", sec * n * len(radii))
    plan.notes.append(f"the largest radius, {top:g}, breaks most examples at once: the estimate is an upper bound")
    return plan


__all__ = ["plan_bench", "plan_sanity"]
