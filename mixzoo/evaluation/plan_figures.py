"""The plans of the bench's trade-off curve and report phases (:func:`~mixzoo.evaluation.plan.plan_bench`'s, with
its :class:`~mixzoo.evaluation.plan.Probes` ``p``): the curve's points under its attack plus its method's own work,
counted as nothing when the cache holds all of it; the report's figure data and the drawing of its figures."""

from __future__ import annotations

from typing import Any

from mixzoo.core.plan import Plan, drawing_seconds, figures_seconds
from mixzoo.core.request import ReportRequest
from mixzoo.evaluation.job import Step


def plan_curve(plan: Plan, p: Any, step: Step) -> bool:
    """The first card's curve: its :attr:`Step.points` classifiers under the curve's attack alone (each timed as the
    mean of the card and the ABC), plus the method's own work
    (:meth:`~mixzoo.methods.MixingMethod.report_data_seconds`); nothing when the cache holds all of it."""
    curve, method = p.job.curve, step.card.mixing_method
    curve_n = min(curve.n, p.n)
    count = f"{step.points} classifiers" if step.points else "the method's points"
    request = _curve_request(p)
    args = (step.card, p.ce.abc, p.ce.rbc, p.ce.data, request)
    setup = method.report_data_seconds(*args)
    if setup == 0.0 and _curve_cached(method, args):
        plan.add("trade-off curve", f"{count} under {curve.attack} on {curve_n} images, cached", 0.0)
        return True
    # the points run from the ABC's robustness up to about the card's: each costs about the mean of the two
    sec = (p.cost(curve.attack, curve.options, p.ce.eps, card=step.card, extra_attacks=False).total +
           p.cost(curve.attack, curve.options, p.ce.eps, model=p.ce.abc).total) / 2 if step.points else None
    plus = f" + {method.title or method.name}'s own work on it (~{setup:.0f} s)" if setup else ""
    plan.add("trade-off curve", f"{count} under {curve.attack} on {curve_n} images{plus}",
             None if sec is None else step.points * sec * curve_n + setup)
    return False


def _curve_request(p: Any) -> ReportRequest:
    """The curve's and figures' request as the bench makes it (the curve's attack, float32, per-example draws)."""
    c, s = p.job.curve, p.s
    evaluation = p.request.replace(save_adversarial=False, precision="float32", per_example_seeds=True,
                                   **({} if c is None else {"attack": c.attack, "attack_options": c.options}))
    return ReportRequest(evaluation, data_dir=s.data_dir, device=s.device, n=s.n if c is None else c.n,
                         points=None if c is None else c.points)


def _curve_cached(method: Any, args: tuple[Any, ...]) -> bool:
    """Whether the cache holds the curve's clean logits and every attack of the method's curve (the curve replayed
    under :func:`~mixzoo.attacks.runner.cache_only`: nothing computed or written)."""
    from mixzoo.attacks.runner import NotCached, cache_only
    from mixzoo.core.cache import content_key
    from mixzoo.zoo.pairs import model_key

    _, abc, rbc, data, request = args
    cache = request.evaluation.cache  # the curve's clean logits: computed and written when not cached
    if not all(cache.load("logits", content_key({"model": model_key(m), "data": data.fingerprint, "kind": "logits"}))
               is not None for m in (abc, rbc)):
        return False
    try:
        with cache_only():
            method.tradeoff_curve(*args)
    except NotCached:
        return False
    return True


def plan_report(plan: Plan, p: Any, plots: bool) -> None:
    """The report: with figures, the data each card's method computes for them
    (:meth:`~mixzoo.methods.MixingMethod.report_data_seconds`; the first card's found cached after its curve) and
    their drawing (:func:`_drawing_seconds`)."""
    if not plots:
        plan.add("report", "report.json, report.md", None)
        return
    cards, request = p.job.cards[1:] if p.job.curve is not None else p.job.cards, _curve_request(p)
    data = sum(c.mixing_method.report_data_seconds(c, p.ce.abc, p.ce.rbc, p.ce.data, request) for c in cards)
    count, drawing = _drawing_seconds(p)
    plan.add("report", f"report.json, report.md and about {count} figures" + (f" (their data ~{data:.0f} s)"
                                                                             if data else ""), data + drawing)


def _drawing_seconds(p: Any) -> tuple[int, float]:
    """About how many figures the report draws and their seconds: per card its method's figures (those it draws from
    the card alone, :meth:`~mixzoo.methods.MixingMethod.figures` without the run's curve and data, timed by
    :func:`~mixzoo.core.plan.figures_seconds`), one more when it computes figure data and one for the first card's
    curve, each of these as long as one of the former (or :func:`~mixzoo.core.plan.drawing_seconds`'s)."""
    from types import SimpleNamespace

    from mixzoo.methods.base import MixingMethod

    count, seconds = 0, 0.0
    for k, card in enumerate(p.job.cards):
        stub = SimpleNamespace(curve=None, card=card, cards=list(p.job.cards))  # the report as far as the card says
        own, took = figures_seconds(lambda d, c=card, r=stub, k=k: len(c.mixing_method.figures(
            r, c, d, prefix="" if k == 0 else f"card{k + 1}-", data=None)))
        # __class__, not type(): a plugin's method is a Guarded proxy whose __class__ is the method's
        draws = own > 0 or card.mixing_method.__class__.figures is not MixingMethod.figures
        extra = draws * ((card.mixing_method.__class__.figure_data is not MixingMethod.figure_data) +
                         (k == 0 and p.job.curve is not None))
        count, seconds = count + own + extra, seconds + took + extra * (took / own if own else drawing_seconds(1))
    return count, seconds


__all__ = ["plan_curve", "plan_report"]
