"""The plans of ``mixzoo bench`` and ``mixzoo sanity`` (:class:`~mixzoo.core.plan.Plan`): their rows, attacks, images
and curve points, each phase estimated from the real attack timed on a share of the evaluation images (uncached),
with the budget applied as the commands apply it (:func:`~mixzoo.evaluation.job.budgeted`); the bench's plan
estimates the bench's own work list (:class:`~mixzoo.evaluation.job.BenchJob`).

A probe times the attack on :func:`~mixzoo.core.plan.probe_images` images spread over the run's (the share broken
at once is the run's), cut to :data:`~mixzoo.core.plan.FRACTIONS` of its iteration and query counts (timed whole
under :data:`~mixzoo.core.plan.MIN_CUT`), and extrapolates to the full counts and images
(:func:`~mixzoo.core.plan.per_image_cut`). A row counts only the examples whose outcomes the cache does not hold
(:func:`~mixzoo.attacks.runner.cached_examples`: the run's cache keys); a row the cache holds whole is not probed."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from mixzoo.attacks.result import Outcome
from mixzoo.attacks.runner import cached_examples, cached_outcome, evaluate
from mixzoo.core.budget import LINEAR_COUNTS, scaled_counts
from mixzoo.core.cache import Cache
from mixzoo.core.plan import FRACTIONS, Plan, cut_fractions, per_image_cut, probe_images, spread
from mixzoo.core.record import RunRecord
from mixzoo.core.request import EvalRequest
from mixzoo.core.settings import RunSettings, settings_of
from mixzoo.evaluation.job import BenchJob, CurveSettings, MatchSettings, Step, budgeted, sweep_steps
from mixzoo.evaluation.loading import (
    card_evaluation,
    card_key_parts,
    check_run_settings,
    evaluated_name,
    load_card,
    model_key_parts,
    resolved_batch_size,
    run_record_of,
)
from mixzoo.evaluation.matching import matched_linear_alpha
from mixzoo.evaluation.plan_figures import plan_curve, plan_report
from mixzoo.evaluation.worst_case import declared_attacks, evaluate_card, extra_request, worst_case
from mixzoo.methods.base import baseline_method

MATCH_STEPS = 6  # the baseline's bisection over its alpha grid: about log2(51) evaluations


@dataclass(frozen=True)
class Cost:
    """A row's seconds per image: ``total`` (its shared and declared attacks), ``extras`` (the declared part)."""

    total: float
    extras: float = 0.0


@dataclass
class Probes:
    """The timings and cache look-ups of one plan: the card evaluation ``ce``, the settings (budget applied),
    ``given`` (the user's ``-O``, which the declared attacks' counts follow) and the request whose cache and key
    the run uses (``request``)."""

    ce: Any
    s: RunSettings
    given: dict[str, Any]
    request: EvalRequest
    memo: dict[Any, Cost] = field(default_factory=dict)
    job: BenchJob | None = None  # the work list the plan estimates

    @property
    def n(self) -> int:
        return len(self.ce.data.labels)

    def cost(self, attack: str, options: dict[str, Any] | None, eps: float, *, card: Any = None, model: Any = None,
             extra_attacks: bool | None = None) -> Cost:
        """Seconds per image of ``attack`` (with ``options``, as the run has them) at ``eps`` on ``card``'s classifier
        (with its declared attacks unless ``extra_attacks`` is false; default: as the settings say) or on
        ``model``: the attack cut to :data:`FRACTIONS` of its counts on a few evaluation images, nothing read from or
        written to the cache, extrapolated to the full counts."""
        extras = bool(card is not None and (self.s.extra_attacks if extra_attacks is None else extra_attacks))
        memo_key = (attack, repr(sorted((options or {}).items())), eps, id(card), id(model), extras)
        if memo_key not in self.memo:
            self.memo[memo_key] = self._timed(attack, options or {}, eps, card if card is not None else model,
                                              extras)
        return self.memo[memo_key]

    def _timed(self, attack: str, options: dict[str, Any], eps: float, target: Any, extras: bool) -> Cost:
        from mixzoo.core.card import MixCard

        is_card = isinstance(target, MixCard)
        declared = declared_attacks(target, self.s.budget, self.given) if is_card and extras else []
        # the declared attacks' counts cut through -O counts: each the cut of the largest among them
        top = {c: max([v for e, o in declared for k, v in scaled_counts(e.attack, o, 1.0).items()
                       if (k == c or k.endswith("_" + c)) and isinstance(v, int)] or [0]) for c in LINEAR_COUNTS}
        record = RunRecord.from_settings(self.s, eps=eps, norm=self.ce.norm, precision="float32")
        request = EvalRequest(record, Cache(None, enabled=False), label="plan", progress=False)
        last: dict[int, Any] = {}

        def run(k: int, f: float) -> int:  # on k images spread over the run's (its robust share): those left robust
            at = spread(self.n, k)
            images, labels = self.ce.data.images[at], self.ce.data.labels[at]
            cut = request.replace(attack=attack, attack_options=scaled_counts(attack, options, f),
                                  key_parts={"plan": k})
            if is_card:
                over = {**self.given, **{c: max(1, math.ceil(v * f)) for c, v in top.items() if v}}
                last[k] = evaluate_card(target, self.ce.abc, self.ce.rbc, images, labels, cut,
                                           extra_attacks=extras, budget=self.s.budget, overrides=over)
            else:
                last[k] = Outcome.of(evaluate(target, images, labels, cut))
            return int(torch.as_tensor(last[k].robust_correct).sum())

        sec = per_image_cut(run, self.n, _fractions(attack, options), probe_images(self.n),
                            batch=self.s.batch_size)
        ev = last[max(last)]  # the probe on the most images: its declared attacks' share
        names = {e.name for e, _ in declared}
        share = sum(c["seconds"] for c in ev.components if c["name"] in names) / ev.seconds \
            if names and ev.seconds > 0 else 0.0
        return Cost(sec, sec * min(1.0, share))

    def cached(self, request: EvalRequest, *, card: Any = None, extra_attacks: bool = True) -> tuple[int, bool]:
        """How many of the row's examples the cache holds under the shared attack's ``request``, and whether it
        holds the row's declared attacks too (on the examples the cached outcome leaves robust)."""
        device = self.ce.data.images.device
        shared = cached_examples(request, self.n, device)
        if card is None or not extra_attacks or shared < self.n:
            return shared, card is None or not extra_attacks
        ev = cached_outcome(request, self.n, device)
        for extra, options in declared_attacks(card, self.s.budget, self.given):
            subset = torch.nonzero(torch.tensor(ev.robust_correct, dtype=torch.bool)).flatten()  # as evaluate_card
            if not len(subset):
                break
            sub = cached_outcome(extra_request(request, extra, options, subset), len(subset), device)
            if sub is None:
                return shared, False
            ev = worst_case(ev, sub, subset, extra.name)
        return shared, True

    def row(self, request: EvalRequest, cost: Any, *, card: Any = None, extra_attacks: bool = True
            ) -> tuple[float, int, bool]:
        """A row's estimate under ``request`` (the run's cache key), its cached examples and whether its declared
        attacks are cached; ``cost()`` (:meth:`cost`'s) is called only when something is left to run."""
        shared, extras_cached = self.cached(request, card=card, extra_attacks=extra_attacks)
        if shared == self.n and extras_cached:
            return 0.0, shared, True
        c = cost()
        # a shared outcome not whole in the cache changes the robust subset: the declared attacks run on all of it
        return (c.total - c.extras) * (self.n - shared) + (0.0 if extras_cached else c.extras * self.n), shared, \
            extras_cached

    def card_row(self, card: Any, eps: float | None = None, cost: Any = None) -> tuple[float, int, bool]:
        """:meth:`row` of ``card``'s row under the shared attack (at ``eps``, default the card evaluation's; ``cost``
        default: the shared attack timed on the card at that eps)."""
        ce, s, eps = self.ce, self.s, self.ce.eps if eps is None else eps
        return self.row(self.request.replace(eps=eps, key_parts=card_key_parts(card, ce.abc, ce.rbc, ce.data)),
                        cost or (lambda: self.cost(s.attack, s.attack_options, eps, card=card)), card=card,
                        extra_attacks=s.extra_attacks)

    @property
    def attack_text(self) -> str:
        """The shared attack with the user's ``-O``, for the phases' lines."""
        opts = ", ".join(f"{k}={v}" for k, v in sorted(self.given.items()))
        return f"{self.s.attack} ({opts})" if opts else self.s.attack

    def matched_alpha(self, match: MatchSettings) -> float | None:
        """The matched baseline's alpha when the cache holds its whole search (the bench's search replayed from the
        cache: nothing attacked or written), else ``None``."""
        from mixzoo.attacks.runner import NotCached, cache_only

        matching = self.request.replace(attack=match.attack, attack_options=match.options, precision="float32",
                                        save_adversarial=False)
        try:
            with cache_only():
                alpha, _, _ = matched_linear_alpha(self.ce, matching, match_n=match.n,
                                                   extra_attacks=self.s.extra_attacks, budget=self.s.budget,
                                                   overrides=self.given)
        except NotCached:
            return None
        return alpha


def _fractions(attack: str, options: dict[str, Any]) -> tuple[float, ...]:
    """:data:`FRACTIONS` as the cut counts make them (rounded up): those of the attack's largest iteration count
    (``(1, 1)``, no cut, for an attack without one or with one too small to cut:
    :func:`~mixzoo.core.plan.cut_fractions`)."""
    full = scaled_counts(attack, options, 1.0)
    counted = [(v, k) for k, v in full.items() if any(k == c or k.endswith("_" + c) for c in LINEAR_COUNTS)
               and isinstance(v, int) and not isinstance(v, bool) and v > 0 and k not in ("n_queries",)]
    if not counted:
        return (1.0, 1.0)
    value, key = max(counted)
    return cut_fractions(value, lambda f: scaled_counts(attack, options, f)[key], FRACTIONS)


def _cached_text(shared: int, n: int, extras_cached: bool, what: str = "") -> str:
    """The ", N of M cached" a row's line adds when the cache holds any of it."""
    if not shared:
        return ""
    return f", {shared} of {n} cached{what}" + ("" if extras_cached or shared < n else
                                                " (not its extra attacks' outcomes)")


def _probes(job: BenchJob, save_adversarial: bool) -> Probes:
    """The plan's :class:`Probes`: the first card's evaluation, the run's request (its batch size, record, cache)."""
    s = job.settings
    ce = card_evaluation(job.cards[0], s)
    s = s.changed(batch_size=resolved_batch_size(s.batch_size, ce.abc, ce.rbc, ce.data, s.device))
    request = EvalRequest(run_record_of(s, list(job.cards), ce, job.given), Cache(s.cache_dir, enabled=s.use_cache),
                          progress=False, save_adversarial=save_adversarial)
    return Probes(ce, s, job.given, request, job=job)


def plan_bench(card: Any, settings: RunSettings | None = None, *, baseline: MatchSettings | bool | None = True,
               curve: CurveSettings | bool | None = True, plots: bool = True, command: str = "mixzoo bench",
               save_adversarial: bool = False, **changes: Any) -> Plan:
    """What :func:`~mixzoo.evaluation.bench.bench` will run for ``card`` (one card or a list of one pair's cards)
    with these settings: the same work list (:meth:`~mixzoo.evaluation.job.BenchJob.steps`, the budget applied as
    the bench applies it; ``baseline`` and ``curve`` as the bench takes them, ``True``: the budget's), one phase
    per step, each estimated from its attack timed on a few images and counting only what the cache does not hold
    (``save_adversarial``: the run keeps the adversarial points, so a cached outcome without them is attacked
    again)."""
    job = BenchJob.of(settings_of(settings, changes), baseline, curve)
    check_run_settings(job.settings)
    job = job.changed(cards=[load_card(c) for c in (card if isinstance(card, list | tuple) else [card])])
    p = _probes(job, save_adversarial)
    plan = Plan(command)
    any_cached = False
    for step in job.steps():
        if step.kind == "report":
            plan_report(plan, p, plots)
        else:
            any_cached |= _PLANNERS[step.kind](plan, p, step)
    if p.s.attack_options.get("n_iter") is None:
        plan.notes.append("attacks stop on an example once it is broken, so the estimate follows the sample's "
                          "robust share")
    if any_cached:
        plan.notes.append("a matched baseline's search and the trade-off curve count as cached only when the cache "
                          "holds all of them")
    return plan


def _plan_model(plan: Plan, p: Probes, step: Step) -> bool:
    """The ABC's or the RBC's row; whether the cache holds any of it."""
    ce, s, n = p.ce, p.s, p.n
    model = getattr(ce, step.kind)
    sec, shared, done = p.row(p.request.replace(key_parts=model_key_parts(model, ce.data)),
                              lambda: p.cost(s.attack, s.attack_options, ce.eps, model=model))
    plan.add(f"{step.kind.upper()} {evaluated_name(p.job.cards[0], step.kind, model)}",
             f"{p.attack_text} on {n} images{_cached_text(shared, n, done)}", sec)
    return shared > 0


def _plan_card(plan: Plan, p: Probes, step: Step) -> bool:
    """A card's row: the shared attack and its method's extra attacks on the examples still robust."""
    s, n, c = p.s, p.n, step.card
    method = c.mixing_method
    extras = [e.name for e in method.extra_attacks(c)] if s.extra_attacks else []
    sec, shared, done = p.card_row(c)
    plus = f" + {', '.join(extras)} on the examples still robust" if extras else ""
    plan.add(method.title or method.name, f"{p.attack_text}{plus} on {n} images{_cached_text(shared, n, done)}",
             sec)
    return shared > 0


def _plan_baseline(plan: Plan, p: Probes, step: Step) -> bool:
    """The matched baseline: its search (cached only when the cache holds all of it), then its row."""
    ce, s, n, baseline, lin = p.ce, p.s, p.n, p.job.baseline, baseline_method()
    match_n = min(baseline.n, n)
    search = f"{step.card.mixing_method.title or step.card.method} and about {MATCH_STEPS} alphas under " \
             f"{baseline.attack} on {match_n} images"
    alpha = p.matched_alpha(baseline)
    if alpha is None:  # the card under the matching attack, the alphas tried, then a linear card's row
        lin_card = lin.card_at(0.9, step.card)
        card_sec = p.cost(baseline.attack, baseline.options, ce.eps, card=step.card).total
        sec = p.cost(baseline.attack, baseline.options, ce.eps, card=lin_card).total
        row_sec = p.cost(s.attack, s.attack_options, ce.eps, card=lin_card).total
        plan.add(f"matched {lin.title}", f"{search}, then its row: {p.attack_text} on {n} images",
                 (card_sec + MATCH_STEPS * sec) * match_n + row_sec * n)
        return False
    lin_card = lin.card_at(alpha, step.card)
    sec, shared, done = p.card_row(lin_card)
    plan.add(f"matched {lin.title}", f"{search} (cached: alpha {alpha:.2f}), then its row: {p.attack_text} on {n} "
                                     f"images{_cached_text(shared, n, done)}", sec)
    return shared > 0


_PLANNERS = {"abc": _plan_model, "rbc": _plan_model, "card": _plan_card, "baseline": _plan_baseline,
             "curve": plan_curve}


def plan_sanity(card: Any, settings: RunSettings | None = None, *, radii: list[float] | None = None,
                baseline: MatchSettings | float | bool | None = True, command: str = "mixzoo sanity",
                **changes: Any) -> Plan:
    """What :func:`~mixzoo.evaluation.sanity.eps_sweep` will run: each model at each radius, with the settings'
    budget applied as the sweep applies it (``baseline`` as the sweep takes it: ``True``, the budget's matched
    baseline; a number, the baseline at that alpha), counting only what the cache does not hold."""
    from mixzoo.evaluation.sanity import SWEEP_ATTACK, default_radii

    s = settings_of(settings, changes, attack=None, n=200)
    given = dict(s.attack_options or {})  # the user's -O, before the budget's caps
    fixed = isinstance(baseline, int | float) and not isinstance(baseline, bool)  # a given alpha: no matching
    s, match, _ = budgeted(s, None if fixed else baseline, None, default_attack=SWEEP_ATTACK)
    check_run_settings(s)
    p = _probes(BenchJob(s, given, match, None, (load_card(card),)), False)
    ce, s, n = p.ce, p.s, p.n
    radii = default_radii(ce.eps, ce.data.images, ce.norm) if radii is None else sorted({float(r) for r in radii})
    plan = Plan(command)
    rows: list[tuple[str, Any, Any]] = []
    lin = baseline_method()
    alpha = float(baseline) if fixed else None  # type: ignore[arg-type]
    for step in sweep_steps(ce.card, matched=match is not None, alpha_given=fixed):
        if step.kind == "match":
            alpha = p.matched_alpha(match)
            sec = 0.0 if alpha is not None else \
                p.cost(match.attack, match.options, ce.eps, card=ce.card).total + MATCH_STEPS * \
                p.cost(match.attack, match.options, ce.eps, card=lin.card_at(0.9, ce.card)).total
            plan.add(f"matched {lin.title} alpha", f"about {MATCH_STEPS} alphas under {match.attack} on "
                                                   f"{min(match.n, n)} images"
                                                   f"{'' if alpha is None else f' (cached: {alpha:.2f})'}",
                     sec * min(match.n, n))
        elif step.kind == "baseline":
            rows.append((lin.title, lin.card_at(0.9 if alpha is None else alpha, ce.card), None))
        elif step.kind == "card":
            rows.append((ce.card.mixing_method.title or ce.card.method, ce.card, None))
        else:
            rows.append((step.kind.upper(), None, getattr(ce, step.kind)))
    listed = ", ".join(f"{r:g}" for r in radii)
    for name, c, model in rows:
        # the smallest radius is the slowest (fewest examples break early): timed there, counted for every radius
        def cost(c: Any = c, model: Any = model) -> Any:
            return p.cost(s.attack, s.attack_options, min(radii), card=c, model=model)

        # the matched baseline's alpha is known only once matched (or its search is cached): else estimated uncached
        known = c is None or c is ce.card or alpha is not None
        at = [(p.card_row(c, r, cost) if c is not None else
               p.row(p.request.replace(eps=r, key_parts=model_key_parts(model, ce.data)), cost))
              if known else (cost().total * n, 0, False) for r in radii]
        shared, done = sum(a[1] for a in at), all(a[2] for a in at)
        plan.add(str(name), f"{s.attack} on {n} images at {len(radii)} radii (eps {listed})"
                            f"{_cached_text(shared, n * len(radii), done, ' (images x radii)')}",
                 sum(a[0] for a in at))
    plan.notes.append(f"the largest radius, {max(radii):g}, breaks most examples at once: the estimate is an upper "
                      "bound")
    return plan


__all__ = ["plan_bench", "plan_sanity"]
