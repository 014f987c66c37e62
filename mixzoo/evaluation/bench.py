"""Evaluating mix cards (:func:`bench`): clean and robust accuracy of the ABC, the RBC and one row per card, any
method, on evaluation images disjoint from the calibration images. With one card, the baseline method (linear, the
"Mixed" classifier of Bai et al. 2024b, Eq. 3.4) gets the constant alpha whose robust accuracy matches the card's
worst case as closely as its alpha grid allows (Bai et al. 2024a, Fig. 5 / Fig. 8 comparison). :func:`bench` runs the
work list of a :class:`~mixzoo.evaluation.job.BenchJob`, the one the plan estimates; each model's evaluation is
saved per batch, resumes after an interruption and is reused while nothing it depends on changed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from mixzoo.attacks import runner
from mixzoo.attacks.memory import parse_batch_size
from mixzoo.attacks.precision import resolve_precision
from mixzoo.attacks.result import Outcome
from mixzoo.core import distributed
from mixzoo.core.cache import Cache
from mixzoo.core.checks import distinct_row_names, reach_note
from mixzoo.core.errors import InputError
from mixzoo.core.labels import eps_text
from mixzoo.core.machine import run_record
from mixzoo.core.progress import next_phase
from mixzoo.core.record import RunRecord, check_ranks_agree
from mixzoo.core.request import EvalRequest, ReportRequest
from mixzoo.core.schema import SETTINGS_FROM_RECORD
from mixzoo.core.settings import RunSettings, settings_of
from mixzoo.evaluation import loading
from mixzoo.evaluation.job import BenchJob, CurveSettings, MatchSettings, Step
from mixzoo.evaluation.loading import CardEvaluation, card_evaluation, check_run_settings
from mixzoo.evaluation.matching import matched_linear_alpha
from mixzoo.evaluation.report import ADVERSARIAL_FILE, check_report_dir, write_report
from mixzoo.evaluation.results import ModelResult, Report, row_result
from mixzoo.evaluation.versions import report_code_versions
from mixzoo.evaluation.worst_case import declared_attacks, evaluate_card
from mixzoo.methods.base import baseline_method
from mixzoo.zoo.data import shortfall_note
from mixzoo.zoo.pairs import card_key_parts, weight_mismatches


def bench(card: Any = None, settings: RunSettings | None = None, *, out: str | Path | None = None,
          baseline: MatchSettings | bool | None = True, curve: CurveSettings | bool | None = True, plots: bool = True,
          save_adversarial: bool = False, **changes: Any) -> Report:
    """Clean and robust accuracy of the ABC, the RBC and one row per mix card on the evaluation split.

    ``card`` is a :class:`~mixzoo.core.card.MixCard`, a card file, a published card's name, or a list of them (cards
    of one pair, any methods); without a card the pair (default: the built-in Fashion-MNIST pair) is fitted first
    with the default method. ``settings`` (:class:`~mixzoo.core.settings.RunSettings`, changed by keyword arguments
    named after its fields) say how: every row is attacked with the shared attack on the same first ``n`` images;
    each card's row also with the extra attacks its method declares (on the examples still robust), and reports
    the worst case per example. With per-example seeds (the default) every draw is a function of (seed, example
    index), so the outcome per example does not depend on the batch size or the number of processes
    (:func:`mixzoo.attacks.runner.evaluate` says which components cannot, and the report's warnings name them).

    With one card whose method is not the baseline method, ``baseline`` (:class:`MatchSettings`; ``True``: the
    settings' budget's, matched under the rows' attack when the settings name one other than the budget's
    default; ``None`` or ``False``: no such row) adds the baseline method at the parameter matched to the card's
    worst case, evaluated like the other rows. ``curve`` (:class:`CurveSettings`; ``True``: the budget's;
    ``None`` or ``False``: none) asks the first card's method for its trade-off curve; ``plots`` for its figures.
    The settings' ``budget`` (:mod:`mixzoo.core.budget`) reaches every component: the shared attack's
    counts, each declared attack's, the baseline's and the curve's; ``-O`` counts (``attack_options``) set them
    on every component; the report records each component's attack and options (``settings.components``).
    Writes ``report.json``, ``report.md`` and plots to ``out`` when given; the data the plots show (each card's
    method's :meth:`~mixzoo.methods.MixingMethod.figure_data`, ``report.figure_data``) is computed here, with
    ``out`` and ``plots``, so writing the report attacks nothing.
    ``save_adversarial`` keeps, for each row, the point that broke each broken example and writes them to
    ``adversarial.safetensors`` next to the report, so anyone can check the robust errors without attacking
    (:func:`mixzoo.evaluation.verify.verify_report`, ``mixzoo verify``).
    """
    job = BenchJob.of(settings_of(settings, changes), baseline, curve)
    check_run_settings(job.settings, out)  # the one-line errors before anything is loaded or attacked
    if out is not None:  # a report.json mixzoo did not write, or a FIFO where one of the report's files goes
        check_report_dir(Path(out))
    if job.curve is not None and job.curve.n <= 0:
        raise InputError(f"--curve-n must be positive, got {job.curve.n} (or pass --no-curve)")
    t0 = time.perf_counter()
    # under torchrun: every rank runs this function; the runner shares the batches out, rank 0 writes the report
    w = distributed.init(job.settings.device)
    job = job.changed(device=distributed.rank_device(job.settings.device), progress=job.settings.progress and w.main)
    check_ranks_agree(RunRecord.from_settings(job.settings), "settings")  # before any attack (fitting attacks too)
    run = _bench_run(card, job, save_adversarial)
    report = _execute(run, w.size, out is not None, plots)
    report.settings["seconds"] = time.perf_counter() - t0
    report.run = run_record(run.s.device)
    report.record = {**run.request.record.to_dict(), "digest": run.request.record.digest()}
    if out is not None and w.main:
        write_report(report, Path(out), plots=plots)
    return report


def _execute(run: BenchRun, world_size: int, written: bool, plots: bool) -> Report:
    """Run the job's work list (:meth:`~mixzoo.evaluation.job.BenchJob.steps`), one progress phase per step, into
    the report; when it is ``written`` with ``plots``, each card's method's figure data is computed."""
    models: list[ModelResult] = []  # the ABC, the RBC, then the matched baseline
    card_rows: list[ModelResult] = []
    report: Report | None = None
    for step in run.job.steps():
        if step.kind in ("abc", "rbc"):
            next_phase()
            models.append(_model_row(run, step.kind))
            continue
        if step.kind == "card":
            next_phase()
            card_rows.append(_card_row(run, step.card, {"abc", "rbc", *(r.kind for r in card_rows)}))
            continue
        if report is None:  # the rows are in: named apart, then the report's settings record
            distinct_row_names(card_rows, [c.path for c in run.cards])  # two cards with one file stem
            report = _report(run, [], _settings(run, card_rows, world_size))
        if step.kind == "baseline":
            next_phase()
            models.append(_baseline_row(run, card_rows[0], report.settings))
        elif step.kind == "curve":
            next_phase()
            _add_curve(run, report, step)
        else:
            report = _report(run, models + card_rows, report.settings)
            report.curve = run.curve_data
            report.settings["code_versions"] = report_code_versions(report)  # what ran, for stale_code
            if written:
                next_phase()
            if written and plots:  # what the figures plot, computed here with every rank (writing only renders it)
                request = _report_request(run)
                report.figure_data = [c.mixing_method.figure_data(c, run.ce.abc, run.ce.rbc, run.ce.data, request)
                                      for c in run.cards]
    assert report is not None  # the work list ends with its report
    return report


@dataclass
class BenchRun:
    """One bench run once its cards, models and images are loaded: the job (its settings' batch size resolved, its
    cards loaded), the first card's :class:`CardEvaluation`, the rows' :class:`~mixzoo.core.request.EvalRequest`
    (its record the run's :class:`~mixzoo.core.record.RunRecord`), the batch size policy, the notes, with
    ``save_adversarial`` the points each row's attack found, and the curve once computed."""

    job: BenchJob
    ce: CardEvaluation
    request: EvalRequest
    batch_policy: Any
    notes: list[str]
    points: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)
    curve_data: dict[str, Any] | None = None

    @property
    def s(self) -> RunSettings:
        return self.job.settings

    @property
    def cards(self) -> list[Any]:
        return list(self.job.cards)

    def row(self, name: str, kind: str, ev: Outcome, alpha: float | None = None, card: Any = None
            ) -> ModelResult:
        ev = Outcome.of(ev)
        if self.request.save_adversarial:
            self.points[kind] = ev.adversarial
        return row_result(name, kind, ev, self.s.attack, self.ce.eps, self.ce.norm, alpha=alpha, card=card)


def _bench_run(card: Any, job: BenchJob, save_adversarial: bool) -> BenchRun:
    """Load what the bench evaluates (fitting a card first when none is given), resolve the batch size, and check
    under torchrun that every rank has the same run record before any attack."""
    s = job.settings
    if card is None:
        from mixzoo.methods import fit

        card = fit(None, s.abc, s.rbc, cache_dir=s.cache_dir, use_cache=s.use_cache, device=s.device,
                   data_dir=s.data_dir, allow_unsafe=s.allow_unsafe, progress=s.progress, eps=s.eps, norm=s.norm,
                   seed=s.seed).card
    cards = [loading.load_card(c) for c in (card if isinstance(card, list | tuple) else [card])]
    if not cards:
        raise InputError("no mix card to bench; pass one or more cards (files or published names)")
    if s.abc is None and s.rbc is None:
        loading.same_pair(cards)
    ce = card_evaluation(cards[0], s)
    batch_policy = parse_batch_size(s.batch_size)
    job = job.changed(cards=cards,
                      batch_size=loading.resolved_batch_size(s.batch_size, ce.abc, ce.rbc, ce.data, s.device))
    notes = list(ce.notes)  # the report must say so, not only the terminal
    notes += [note for note in [reach_note(ce.eps, ce.norm, ce.data.input_size)] if note]  # eps beyond every image
    for other in cards[1:]:
        notes += weight_mismatches(other, ce.abc, ce.rbc)
    record = loading.run_record_of(job.settings, cards, ce, job.given)
    check_ranks_agree(record)  # the cards, models and images too, before any attack
    # the rows' attacks in the settings' precision (breaks confirmed in float32)
    request = EvalRequest(record, Cache(s.cache_dir, enabled=s.use_cache), progress=s.progress,
                          save_adversarial=save_adversarial)
    return BenchRun(job, ce, request, batch_policy, notes)


def _model_row(run: BenchRun, role: str) -> ModelResult:
    """The ABC's or the RBC's row (labelled with the model actually evaluated, an --abc/--rbc override, not the
    card's name)."""
    model = getattr(run.ce, role)
    name = loading.evaluated_name(run.cards[0], role, model)
    ev = runner.evaluate(model, run.ce.data.images, run.ce.data.labels,
                         run.request.replace(key_parts=loading.model_key_parts(model, run.ce.data), label=name))
    return run.row(name, role, ev)


def _card_row(run: BenchRun, c: Any, kinds: set[str]) -> ModelResult:
    """Card ``c``'s row (its worst case over the shared attack and its method's extras; :func:`row_name`), of a kind
    not in ``kinds``."""
    abc_m, rbc_m, data = run.ce.abc, run.ce.rbc, run.ce.data
    method = c.mixing_method
    kind = method.name if method.name not in kinds else f"{method.name}-{len(kinds) - 1}"
    label = row_name(c, kind, len(run.cards))
    ev = evaluate_card(c, abc_m, rbc_m, data.images, data.labels,
                       run.request.replace(key_parts=card_key_parts(c, abc_m, rbc_m, data), label=label))
    return run.row(label, kind, ev, alpha=c.params.get("alpha"), card=c)


def row_name(card: Any, kind: str, n_cards: int) -> str:
    """A card row's name: its method's title; with several cards also the card's file stem (else its kind) in
    parentheses, once (a title that already ends with it keeps it)."""
    title = card.mixing_method.title or card.mixing_method.name
    tag = f"({card.path.stem if card.path else kind})"
    return title if n_cards == 1 or title.endswith(tag) else f"{title} {tag}"


# report.json's settings, in their order: the run record's copies (mixzoo.core.schema.SETTINGS_FROM_RECORD) and the
# run's own facts
REPORT_SETTINGS = ("attack", "eps", "norm", "seed", "batch_size", "batch_size_policy", "per_example_seeds",
                   "world_size", "attack_options", "extra_attacks", "device", "precision", "precision_policy",
                   "adversarial_file", "seconds", "budget", "components")


def report_settings(record: RunRecord, components: dict[str, Any], **run: Any) -> dict[str, Any]:
    """The report's ``settings`` of run record ``record``: every field the report schema checks against it, the
    shared attack's options in the order it runs them (``components["attack"]``), each component's attack and
    options (``components``), and ``run``'s facts (``batch_size_policy``, ``world_size``, ``device``, ``precision``
    as resolved, ``adversarial_file``, ``seconds``), in :data:`REPORT_SETTINGS`' order."""
    values = {k: getattr(record, r) for k, r in SETTINGS_FROM_RECORD.items()}
    values.update(run, attack_options=dict(components["attack"]["options"]), components=components)
    return {k: values[k] for k in REPORT_SETTINGS}


def _settings(run: BenchRun, card_rows: list[ModelResult], world_size: int) -> dict[str, Any]:
    """The bench's :func:`report_settings`: its record, the shared attack and each card row's declared attacks."""
    s, record = run.s, run.request.record
    extras = {f"{row.name}: {extra.name}": {"attack": extra.attack, "options": opts}
              for c, row in zip(run.cards, card_rows, strict=True) if record.extra_attacks
              for extra, opts in declared_attacks(c, record.budget, record.counts())}
    return report_settings(record, {"attack": {"attack": record.attack, "options": dict(s.attack_options)}, **extras},
                           batch_size_policy=run.batch_policy, world_size=world_size, device=s.device,
                           precision=resolve_precision(record.precision, s.device),
                           adversarial_file=ADVERSARIAL_FILE if run.request.save_adversarial else None, seconds=None)


def _baseline_row(run: BenchRun, card_row: ModelResult, settings_record: dict[str, Any]) -> ModelResult:
    """The baseline method at the parameter matched to the card's worst case (its search in float32, under the
    matching attack), evaluated like the other rows; the search is recorded in ``settings_record``."""
    lin, baseline = baseline_method(), run.job.baseline
    ce, n = run.ce, len(run.ce.data.labels)
    t_match = time.perf_counter()
    matching = run.request.replace(attack=baseline.attack, attack_options=baseline.options, precision="float32",
                                   save_adversarial=False)
    alpha_lin, tried, target = matched_linear_alpha(ce, matching, match_n=baseline.n)
    lin_card = lin.card_at(alpha_lin, run.cards[0])
    ev = evaluate_card(lin_card, ce.abc, ce.rbc, ce.data.images, ce.data.labels,
                       run.request.replace(key_parts=card_key_parts(lin_card, ce.abc, ce.rbc, ce.data),
                                           label=f"{lin.title} alpha={alpha_lin}"))
    row = run.row(f"{lin.title} (alpha={alpha_lin:.2f})", lin.name, ev, alpha=alpha_lin, card=lin_card)
    m = min(baseline.n, n)
    settings_record["components"]["baseline"] = {"attack": baseline.attack, "options": dict(baseline.options),
                                                 "n": m, "seconds": time.perf_counter() - t_match}  # search and row
    if alpha_lin >= 1.0:  # the matched baseline is the RBC itself: said where the row is read, with what it matched
        opts = ", ".join(f"{k}={v}" for k, v in baseline.options.items())
        run.notes.append(f"the matched {lin.title} row has alpha 1.00, so it is the RBC alone: on the first {m} "
                         f"images, under {baseline.attack}{f' ({opts})' if opts else ''} at eps {eps_text(ce.eps)}, "
                         f"the card's robust accuracy is {100 * target:.1f}% and alpha 1 came closest to it (the "
                         f"card's row: {100 * card_row.robust_accuracy:.1f}% under {run.s.attack} on {n} images)")
    settings_record.update(linear_alpha_search=tried, linear_alpha_match={
        "attack": baseline.attack, "options": baseline.options, "n": m,
        "card": card_row.name, "target_robust_accuracy": target})
    return row


def _report(run: BenchRun, rows: list[ModelResult], settings_record: dict[str, Any]) -> Report:
    data, cards = run.ce.data, run.cards
    report = Report(
        models=rows, card=cards[0], cards=cards,
        dataset={"name": data.name, "split": "evaluation", "n": len(data.labels), "fingerprint": data.fingerprint,
                 "source": getattr(data, "source", ""), "calibration": cards[0].data},
        settings=settings_record, adversarial=run.points,
    )
    report.notes = run.notes + [note for note in [shortfall_note(data, run.s.n, "--n")] if note is not None]
    return report


def _report_request(run: BenchRun) -> ReportRequest:
    """What the first card's method computes its curve (the job's curve attack, in float32, drawing per example)
    and every card's method its figure data with."""
    curve = run.job.curve
    evaluation = run.request.replace(save_adversarial=False, precision="float32", per_example_seeds=True,
                                     **({} if curve is None else {"attack": curve.attack,
                                                                  "attack_options": curve.options}))
    return ReportRequest(evaluation, data_dir=run.s.data_dir, device=run.s.device,
                         n=run.s.n if curve is None else curve.n, points=None if curve is None else curve.points)


def _add_curve(run: BenchRun, report: Report, step: Step) -> None:
    """The first card's method's trade-off curve (``run.curve_data``) and its component record."""
    curve, t_curve = run.job.curve, time.perf_counter()
    method, request = step.card.mixing_method, _report_request(run)
    args = (step.card, run.ce.abc, run.ce.rbc, run.ce.data)
    run.curve_data = method.tradeoff_curve(*args, request)
    report.settings["components"]["curve"] = {"attack": curve.attack, "options": dict(curve.options),
                                              "n": min(curve.n, len(run.ce.data.labels)), "points": curve.points,
                                              "seconds": time.perf_counter() - t_curve}
