"""Evaluating mix cards: clean and robust accuracy of the ABC, the RBC and one row per card, any method.

Every row is attacked with the same attack (from the attack hook) on the same evaluation images, disjoint from the
calibration images; each card's row also with the extra attacks its method declares, worst case per example
(:func:`evaluate_card`: a robust example is one that the shared attack and every extra attack failed to break).
With one card, the baseline method (linear, the "Mixed" classifier of Bai et al. 2024b, Eq. 3.4) gets the constant
alpha whose robust accuracy matches the card's worst case as closely as its alpha grid allows (Bai et al. 2024a, Fig. 5
/ Fig. 8 comparison). How a run goes is data: :class:`~mixzoo.core.settings.RunSettings`, :class:`MatchSettings`,
:class:`CurveSettings`.
Each model's evaluation is saved per batch and resumes after an interruption; finished evaluations are reused
when nothing they depend on changed.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mixzoo.attacks.memory import auto_batch_size, parse_batch_size
from mixzoo.attacks.precision import check_precision_device, resolve_precision
from mixzoo.attacks.runner import ADV_SUFFIX, BENCH_CODE_VERSION, BF16_COUNTS, evaluate, merge_warnings  # noqa: F401
from mixzoo.core import distributed
from mixzoo.core.budget import Budget, budget_of, component_options, shared_attack, shared_options
from mixzoo.core.cache import Cache, check_writable, content_key
from mixzoo.core.checks import distinct_row_names, reach_note
from mixzoo.core.errors import InputError
from mixzoo.core.labels import row_label
from mixzoo.core.machine import run_record
from mixzoo.core.progress import next_phase
from mixzoo.core.record import RunRecord, check_ranks_agree, sha256_of
from mixzoo.core.request import EvalRequest, ReportRequest
from mixzoo.core.settings import RunSettings, settings_of
from mixzoo.evaluation.report import (  # noqa: F401 - print_report and the cells: their names here before
    ADVERSARIAL_FILE,
    ci_cell,
    comparison_lines,
    display_name,
    print_report,
    seconds_cell,
    write_report,
)
from mixzoo.methods.base import baseline_method
from mixzoo.zoo.pairs import (  # noqa: F401 - mixed_key_parts: the name scripts used
    card_dataset,
    card_key_parts,
    card_models,
    check_device,
    check_model_fits,
    model_key,
    threat_model_of,
    weight_mismatches,
)


@dataclass
class ModelResult:
    """One row of the bench table (fractions, not percents)."""

    name: str
    kind: str  # abc | rbc | the mixing method of a card row (a suffix -2, -3, ... when two rows share one)
    clean_accuracy: float
    robust_accuracy: float
    attack: str
    epsilon: float
    norm: str
    n: int
    seconds: float
    alpha: float | None = None
    components: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    device: str = ""  # where the attack ran ("cpu", "cuda", "cpu+cuda" for a run resumed elsewhere)
    # the hardware of its batches (mixzoo.core.machine.machine_summary; " + "-joined when a resumed run changed machine,
    # "unknown" for outcomes cached before it was recorded); a cached row keeps the machine that computed it
    machine: str = ""
    cached: bool = False  # True when the row was read from the cache rather than attacked in this run
    clean_ci: list[float] = field(default_factory=list)  # 95 % Wilson interval (mixzoo.evaluation.stats)
    robust_ci: list[float] = field(default_factory=list)
    # per evaluation image, in order: "1" correct, "0" not; kept so any two rows can be compared example by example
    clean_outcomes: str = ""
    robust_outcomes: str = ""
    # the mixing method and card of a mixed row (None for the base models): enough to rebuild its classifier
    method: str | None = None
    card: dict[str, Any] | None = None
    card_path: str | None = None
    precision: str = "float32"  # the attack's arithmetic (bf16: every break confirmed in float32)


@dataclass
class Report:
    """Everything ``mixzoo bench`` prints and writes."""

    models: list[ModelResult]
    card: Any  # the first card (every card: ``cards``)
    dataset: dict[str, Any]
    settings: dict[str, Any]
    curve: dict[str, Any] | None = None
    calibration: dict[str, Any] | None = None
    out: Path | None = None
    files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # kind -> {"index", "images"}: the attack's point for every example it broke (``save_adversarial``)
    adversarial: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)
    # versions, git commit, machine and finish time of this run (mixzoo.core.machine.run_record)
    run: dict[str, Any] = field(default_factory=dict)
    cards: list[Any] = field(default_factory=list)
    # what decided the outcomes (mixzoo.core.record.RunRecord.to_dict) and its digest
    record: dict[str, Any] = field(default_factory=dict)
    # per card (in the order of ``cards``): what its method's figures plot (MixingMethod.figure_data), computed by
    # the bench; writing the report only renders it
    figure_data: list[dict[str, Any] | None] = field(default_factory=list)

    def row(self, kind: str) -> ModelResult:
        return next(m for m in self.models if m.kind == kind)

    def mixed_rows(self) -> list[ModelResult]:
        """The rows of mixed classifiers (cards and the matched baseline), in table order."""
        return [m for m in self.models if m.kind not in ("abc", "rbc")]

    def comparisons(self) -> list[dict[str, Any]]:
        """Each card's row against the RBC, the matched baseline and every later card, then the baseline against
        the RBC; clean and robust, paired example by example on the same images
        (:func:`mixzoo.evaluation.stats.paired_difference`: difference of accuracies, 95 % interval)."""
        from mixzoo.evaluation.stats import paired_difference

        rbc = [m for m in self.models if m.kind == "rbc"]
        cards = [m for m in self.mixed_rows() if m.card is None or m.name not in self._baseline_names()]
        baselines = [m for m in self.mixed_rows() if m.name in self._baseline_names()]
        pairs = [(a, b) for i, a in enumerate(cards) for b in [*rbc, *baselines, *cards[i + 1:]]]
        pairs += [(a, b) for a in baselines for b in rbc]
        out = []
        for a, b in pairs:
            entry: dict[str, Any] = {"a": a.name, "b": b.name, "b_kind": b.kind, "a_label": row_label(a),
                                     "b_label": row_label(b)}
            for what in ("clean", "robust"):
                x, y = getattr(a, f"{what}_outcomes"), getattr(b, f"{what}_outcomes")
                if x and y and len(x) == len(y):
                    entry[what] = paired_difference([c == "1" for c in x], [c == "1" for c in y]).to_dict()
            out.append(entry)
        return out

    def _baseline_names(self) -> set[str]:
        n_cards = len(self.cards) if self.cards else 1
        return {m.name for m in self.mixed_rows()[:max(0, len(self.mixed_rows()) - n_cards)]}

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {
            "models": [{**asdict(m), "label": row_label(m)} for m in self.models],
            "card": self.card.to_dict() if hasattr(self.card, "to_dict") else self.card,
            "cards": [c.to_dict() if hasattr(c, "to_dict") else c for c in self.cards],
            "dataset": self.dataset,
            "settings": self.settings,
            "curve": self.curve,
            "calibration": self.calibration,
            "comparisons": self.comparisons(),
            "notes": self.notes,
            "run": self.run,
            "record": self.record,
            "figure_data": self.figure_data,
        }


def mixed_key_parts(card: Any, abc: nn.Module, rbc: nn.Module, data: Any) -> dict[str, Any]:
    """Cache key of a mix card's evaluation rows (:func:`card_key_parts`; kept for scripts that use the name)."""
    return card_key_parts(card, abc, rbc, data)


def model_key_parts(model: nn.Module, data: Any) -> dict[str, Any]:
    """Cache key of the ABC's or the RBC's evaluation row."""
    return {"data": data.fingerprint, "model": model_key(model)}


def linear_key_parts(abc: nn.Module, rbc: nn.Module, data: Any, alpha: float) -> dict[str, Any]:
    """Cache key of the linear baseline's evaluation row at ``alpha``."""
    return {"data": data.fingerprint, "abc": model_key(abc), "rbc": model_key(rbc), "linear_alpha": alpha}


def _result(name: str, kind: str, ev: dict[str, Any], attack: str, eps: float, norm: str,
            alpha: float | None = None, card: Any = None) -> ModelResult:
    from mixzoo.evaluation.stats import wilson_interval

    n = len(ev["clean_correct"])
    clean, robust = sum(ev["clean_correct"]), sum(ev["robust_correct"])
    return ModelResult(
        name=name, kind=kind, clean_accuracy=clean / n, robust_accuracy=robust / n, attack=attack, epsilon=eps,
        norm=norm, n=n, seconds=ev["seconds"], alpha=alpha, components=ev["components"], warnings=ev["warnings"],
        device=ev.get("device", "unknown"), machine=ev.get("machine", "unknown"), cached=bool(ev.get("cached", False)),
        clean_ci=list(wilson_interval(clean, n)), robust_ci=list(wilson_interval(robust, n)),
        clean_outcomes="".join("1" if v else "0" for v in ev["clean_correct"]),
        robust_outcomes="".join("1" if v else "0" for v in ev["robust_correct"]),
        method=None if card is None else card.method,
        card=None if card is None else card.to_dict(),
        card_path=None if card is None or card.path is None else str(card.path),
        precision=ev.get("precision", "float32"),
    )


BENCH_MATCH_ATTACK = "adaptive-apgd"  # what matches the baseline's alpha: cheaper than the main attack
BENCH_MATCH_OPTIONS: dict[str, Any] = {"n_iter": 25, "n_target_classes": 3}


def matched_linear_alpha(ce: CardEvaluation, request: EvalRequest, *, match_n: int, extra_attacks: bool = True,
                         budget: str | Budget = "standard", overrides: dict[str, Any] | None = None
                         ) -> tuple[float, list[dict], float]:
    """The matched baseline's alpha for a card: the card's worst-case robust accuracy on the first ``match_n``
    evaluation images under the attack of ``request`` (:class:`~mixzoo.core.request.EvalRequest`: its record names
    the matching attack, its options, eps, norm, seed, batch size and per-example seeds; its cache and progress) and
    the extra attacks its method declares (:func:`evaluate_card`; none with ``extra_attacks=False``, as the bench's
    rows then have none), then the baseline method's ``match`` against it (for linear: bisection over its alpha
    grid). Returns the alpha, every alpha tried and the target. ``mixzoo bench`` and ``mixzoo sanity`` share it, and
    so share its cached evaluations. ``budget`` and ``overrides`` (the user's ``-O``) go to the declared attacks
    (:func:`declared_attacks`)."""
    base = baseline_method()
    if base is None:
        raise InputError("no installed mixing method is marked as the bench's baseline; pass baseline=False")
    images, labels = ce.data.images[:match_n], ce.data.labels[:match_n]
    card_request = request.replace(key_parts={**card_key_parts(ce.card, ce.abc, ce.rbc, ce.data), "match_n": match_n},
                                   label=f"{ce.card.mixing_method.title or ce.card.method} (matching attack)")
    ev = evaluate_card(ce.card, ce.abc, ce.rbc, images, labels, card_request, extra_attacks=extra_attacks,
                       budget=budget, overrides=overrides)
    target = sum(ev["robust_correct"]) / len(ev["robust_correct"])
    key = {"data": ce.data.fingerprint, "abc": model_key(ce.abc), "rbc": model_key(ce.rbc), "match_n": match_n}
    match_request = request.replace(key_parts=key)
    alpha, tried = base.match(ce.abc, ce.rbc, images, labels, target, match_request)
    return alpha, tried, target


def check_run_settings(settings: RunSettings, out: str | Path | None = None) -> None:
    """One-line errors for settings every card evaluation shares, before anything is loaded or attacked."""
    from mixzoo.core.plugins import lookup

    if settings.n <= 0:
        raise InputError(f"--n must be positive, got {settings.n}")
    parse_batch_size(settings.batch_size)  # a positive number or "auto"
    check_precision_device(settings.precision, check_device(settings.device))
    # an unknown name or option fails now, not after calibrating and attacking three models
    attack_cls = lookup("attack", settings.attack)
    check_options = getattr(attack_cls, "check_options", None)  # a plugin's attack need not subclass Attack
    if settings.attack_options and check_options is not None:
        check_options(dict(settings.attack_options))
    if out is not None:  # last: the probe writes (and removes) a file, which a refused command should not do
        check_writable(out, directory=True, what="--out directory")


@dataclass
class CardEvaluation:
    """A mix card ready to evaluate: its models, its mixed classifier, the attack radius and the evaluation
    images."""

    card: Any
    abc: nn.Module
    rbc: nn.Module
    mixed: nn.Module
    data: Any
    eps: float
    norm: str
    notes: list[str]  # weight-hash mismatches against the card (also issued as warnings)


def load_card(card: Any) -> Any:
    """A :class:`~mixzoo.core.card.MixCard` from a card, a card file or a published card's name."""
    from mixzoo.core.card import MixCard

    return card if isinstance(card, MixCard) else MixCard.load(card)


def card_evaluation(card: Any, settings: RunSettings | None = None, **changes: Any) -> CardEvaluation:
    """Load what evaluating ``card`` needs: the ABC and RBC (:func:`~mixzoo.zoo.pairs.card_models`; the settings'
    ``abc`` / ``rbc`` replace the card's), the card's mixed classifier (its method's ``build``), eps and norm (the
    settings', else the card's attack, else the RBC's threat model) and the first ``n`` evaluation images, refusing
    models that cannot classify them."""
    from mixzoo.zoo.data import load_dataset, model_options

    s = settings_of(settings, changes)
    card = load_card(card)
    abc_m, rbc_m = card_models(card, s.abc, s.rbc, device=s.device, allow_unsafe=s.allow_unsafe)
    notes = weight_mismatches(card, abc_m, rbc_m)
    for note in notes:
        warnings.warn(note, stacklevel=3)
    mixed = card.mixing_method.build(abc_m, rbc_m, card)
    attack = card.attack or {}
    eps, norm = threat_model_of(rbc_m, attack.get("eps") if s.eps is None else s.eps,
                                        attack.get("norm") if s.norm is None else s.norm)
    data = load_dataset(card_dataset(card, rbc_m), "evaluation", n=s.n, root=s.data_dir,
                        **model_options(rbc_m, abc_m))
    top_k = card.params.get("top_k")
    if top_k is not None and top_k > data.num_classes:
        raise InputError(f"the card's top_k ({top_k}) exceeds the {data.num_classes} classes of {data.name!r};"
                         " it was calibrated for another task")
    check_model_fits(abc_m, data, "ABC")
    check_model_fits(rbc_m, data, "RBC")
    return CardEvaluation(card, abc_m, rbc_m, mixed, data, eps, norm, notes)


def run_record_of(settings: RunSettings, cards: list[Any], ce: CardEvaluation) -> RunRecord:
    """The :class:`~mixzoo.core.record.RunRecord` of benching ``cards`` with ``settings`` (eps and norm as
    resolved, the models and images ``ce`` loaded)."""
    return RunRecord.from_settings(
        settings, card=sha256_of([c.to_dict() for c in cards]), abc=model_key(ce.abc), rbc=model_key(ce.rbc),
        dataset=ce.data.name, examples=ce.data.fingerprint, eps=float(ce.eps), norm=ce.norm)


def _same_pair(cards: list[Any]) -> None:
    """Cards benched together must mix the same ABC and RBC (names and weights) on the same dataset."""
    first = cards[0]
    for other in cards[1:]:
        for role in ("abc", "rbc"):
            a, b = getattr(first, role), getattr(other, role)
            if (a.get("name"), a.get("weight_hash")) != (b.get("name"), b.get("weight_hash")):
                raise InputError(f"the cards mix different {role.upper()}s ({a.get('name')!r} and {b.get('name')!r}"
                                 f" or other weights); bench cards of one pair together, or pass --{role}")
        if first.dataset != other.dataset:
            raise InputError(f"the cards are for different datasets ({first.dataset!r}, {other.dataset!r}); bench"
                             " cards of one pair together")


def worst_case(ev: dict[str, Any], extra: dict[str, Any], subset: torch.Tensor, name: str) -> dict[str, Any]:
    """Merge an extra attack run on the still-robust examples ``subset`` into evaluation ``ev`` example by
    example: robust only if both attacks failed; the extra attack's breaks are a component named ``name``."""
    robust = list(ev["robust_correct"])
    broken = 0
    for i, ok in zip(subset.tolist(), extra["robust_correct"], strict=True):
        if robust[i] and not ok:
            robust[i], broken = False, broken + 1
    stat = {"name": name, "newly_broken": broken, "seconds": extra["seconds"]}
    if extra.get("components") and all("found_bf16" in c for c in extra["components"]):  # a bf16 run's two counts
        stat.update({k: sum(c.get(k, 0) for c in extra["components"]) for k in BF16_COUNTS})
    merged = {**ev, "robust_correct": robust, "seconds": ev["seconds"] + extra["seconds"],
              "components": [*ev["components"], stat],
              "warnings": [*ev["warnings"], *(f"{name}: {w}" for w in extra["warnings"])],
              "cached": bool(ev.get("cached")) and bool(extra.get("cached"))}
    if "adversarial" in ev:
        pts = extra["adversarial"]
        index = subset[pts["index"]] if len(pts["index"]) else pts["index"]
        merged["adversarial"] = {"index": torch.cat([ev["adversarial"]["index"], index]).long(),
                                 "images": torch.cat([ev["adversarial"]["images"], pts["images"]])}
    return merged


def declared_attacks(card: Any, budget: str | Budget = "standard", overrides: dict[str, Any] | None = None
                     ) -> list[tuple[Any, dict[str, Any]]]:
    """The extra attacks ``card``'s method declares, each with the options it runs with under ``budget``
    (:func:`~mixzoo.core.budget.component_options`: the declared options, their counts capped by the budget,
    then set by ``overrides``, the user's ``-O``)."""
    return [(extra, component_options(budget, extra.attack, extra.options, overrides))
            for extra in card.mixing_method.extra_attacks(card)]


def evaluate_card(card: Any, abc: nn.Module, rbc: nn.Module, images: torch.Tensor, labels: torch.Tensor,
                  request: EvalRequest, *, extra_attacks: bool = True, budget: str | Budget = "standard",
                  overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """A card's classifier under the shared attack (``request``: :func:`~mixzoo.attacks.runner.evaluate`'s
    request, its ``key_parts`` the cache key of the shared run, :func:`card_key_parts`), then under each extra attack
    its method declares (:meth:`~mixzoo.methods.MixingMethod.extra_attacks`) on the examples still robust, merged per
    example: the card's worst case, which every evaluation of a card reports (bench rows, the matched baseline's
    target, sanity's sweep). Each extra's request is the shared one with the extra's attack, options and seed,
    its cache key adding its name, gradient and subset; it runs with the options :func:`declared_attacks` gives it
    under ``budget`` and ``overrides``."""
    method = card.mixing_method
    ev = evaluate(method.build(abc, rbc, card), images, labels, request)
    if not extra_attacks:
        return ev
    for extra, extra_options in declared_attacks(card, budget, overrides):
        subset = torch.tensor([i for i, ok in enumerate(ev["robust_correct"]) if ok], dtype=torch.long)
        if not len(subset):
            break
        sub_request = extra_request(request, extra, extra_options, subset)
        sub = evaluate(method.build(abc, rbc, card, gradient=extra.gradient), images[subset], labels[subset],
                       sub_request)
        ev = worst_case(ev, sub, subset, extra.name)
    return ev


def extra_request(request: EvalRequest, extra: Any, options: dict[str, Any], subset: torch.Tensor) -> EvalRequest:
    """The request of declared attack ``extra`` (with ``options``) on the examples ``subset`` still robust under the
    shared attack's ``request`` (:func:`evaluate_card`): the extra's attack, options and seed, the subset's own
    indices (in the data set, when the images are a subset of it), its cache key adding its name, gradient and
    subset."""
    index = subset if request.example_index is None else request.example_index[subset]
    return request.replace(
        attack=extra.attack, attack_options=options, seed=request.record.seed + extra.seed_offset,
        example_index=index, label=f"{request.label}: {extra.name}",
        key_parts={**request.key_parts, "extra": extra.name, "gradient": extra.gradient,
                   "subset": content_key({"rows": subset.tolist()})})


@dataclass(frozen=True)
class MatchSettings:
    """The bench's matched baseline row (Bai et al. 2024a, Fig. 5 / Fig. 8 comparison): the baseline method's parameter
    whose robust accuracy under ``attack`` (with ``options``, cheaper than the shared attack) on the first ``n``
    evaluation images is closest to the card's worst case there (:func:`matched_linear_alpha`)."""

    attack: str = BENCH_MATCH_ATTACK
    options: dict[str, Any] = field(default_factory=lambda: dict(BENCH_MATCH_OPTIONS))
    n: int = 500

    @classmethod
    def for_budget(cls, budget: str | Budget) -> MatchSettings:
        """The matched baseline of ``budget`` (:data:`~mixzoo.core.budget.BUDGETS`)."""
        b = budget_of(budget)
        return cls(options=dict(b.match_options), n=b.match_n)


@dataclass(frozen=True)
class CurveSettings:
    """A method's trade-off curve in the report (:meth:`~mixzoo.methods.MixingMethod.tradeoff_curve`): each point
    attacked with ``attack`` and ``options`` on the first ``n`` evaluation images."""

    attack: str = "fast"  # a screening attack: the report and the plot label the curve's points so
    options: dict[str, Any] = field(default_factory=lambda: {"n_iter": 25, "n_target_classes": 3})
    n: int = 300
    points: int | None = None  # points per curve, evenly spread over the method's own (None: all of them)

    @classmethod
    def for_budget(cls, budget: str | Budget) -> CurveSettings:
        """The trade-off curve of ``budget`` (:data:`~mixzoo.core.budget.BUDGETS`)."""
        b = budget_of(budget)
        return cls(options=dict(b.curve_options), n=b.curve_n, points=b.curve_points)


MATCH = MatchSettings()
CURVE = CurveSettings()


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
    settings' budget's; ``None`` or ``False``: no such row) adds the baseline method at the parameter matched to
    the card's worst case, evaluated like the other rows. ``curve`` (:class:`CurveSettings`; ``True``: the budget's;
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
    s = settings_of(settings, changes)
    given = dict(s.attack_options or {})  # the user's -O, before the budget's caps
    s, baseline, curve = budgeted(s, baseline, curve, default_attack="adaptive")
    _check_bench(s, out, curve)
    t0 = time.perf_counter()
    # under torchrun: every rank runs this function; the runner shares the batches out, rank 0 writes the report
    w = distributed.init(s.device)
    s = s.changed(device=distributed.rank_device(s.device), progress=s.progress and w.main)
    check_ranks_agree(RunRecord.from_settings(s), "settings")  # before any attack (fitting a card attacks too)
    run = _bench_run(card, s, given, save_adversarial)
    next_phase()  # the phases of mixzoo.evaluation.plan.plan_bench, in its order
    rows = [_model_row(run, "abc")]
    next_phase()
    rows.append(_model_row(run, "rbc"))
    card_rows, kinds = _card_rows(run)
    settings_record = _settings_record(run, card_rows, w.size)
    lin = baseline_method()
    if baseline is not None and len(run.cards) == 1 and lin is not None and run.cards[0].method != lin.name \
            and lin.name not in kinds:
        next_phase()
        rows.append(_baseline_row(run, baseline, card_rows[0].name, settings_record))
    rows += card_rows
    report = _report(run, rows, settings_record)
    if curve is not None:
        next_phase()
        _add_curve(run, report, curve)
    from mixzoo.evaluation.versions import report_code_versions

    report.settings["code_versions"] = report_code_versions(report)  # what ran, for stale_code
    if out is not None:
        next_phase()
        if plots:  # what the figures plot, computed here with every rank (writing the report only renders it)
            request = _report_request(run, curve)
            report.figure_data = [c.mixing_method.figure_data(c, run.ce.abc, run.ce.rbc, run.ce.data, request)
                                  for c in run.cards]
    report.settings["seconds"] = time.perf_counter() - t0
    report.run = run_record(run.s.device)
    report.record = {**run.request.record.to_dict(), "digest": run.request.record.digest()}
    if out is not None and w.main:
        write_report(report, Path(out), plots=plots)
    return report


def _check_bench(s: RunSettings, out: str | Path | None, curve: CurveSettings | None) -> None:
    """The bench's one-line errors before anything is loaded or attacked."""
    check_run_settings(s, out)
    if out is not None:  # a report.json mixzoo did not write, or a FIFO where one of the report's files goes
        from mixzoo.evaluation.report import check_report_dir

        check_report_dir(Path(out))
    if curve is not None and curve.n <= 0:
        raise InputError(f"--curve-n must be positive, got {curve.n} (or pass --no-curve)")


@dataclass
class BenchRun:
    """One bench run once its cards, models and images are loaded: the settings (batch size resolved), the cards,
    the first card's :class:`CardEvaluation`, the rows' :class:`~mixzoo.core.request.EvalRequest` (its record the
    run's :class:`~mixzoo.core.record.RunRecord`), the user's ``-O`` (``given``), the batch size policy, the notes
    and, with ``save_adversarial``, the points each row's attack found."""

    s: RunSettings
    cards: list[Any]
    ce: CardEvaluation
    request: EvalRequest
    given: dict[str, Any]
    batch_policy: Any
    notes: list[str]
    points: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)

    def row(self, name: str, kind: str, ev: dict[str, Any], alpha: float | None = None, card: Any = None
            ) -> ModelResult:
        if self.request.save_adversarial:
            self.points[kind] = ev["adversarial"]
        return _result(name, kind, ev, self.s.attack, self.ce.eps, self.ce.norm, alpha=alpha, card=card)

    @property
    def spend(self) -> dict[str, Any]:
        """The declared attacks' budget and the user's ``-O`` (:func:`evaluate_card`'s ``budget``, ``overrides``)."""
        return {"budget": self.s.budget, "overrides": self.given}


def _bench_run(card: Any, s: RunSettings, given: dict[str, Any], save_adversarial: bool) -> BenchRun:
    """Load what the bench evaluates (fitting a card first when none is given), resolve the batch size, and check
    under torchrun that every rank has the same run record before any attack."""
    if card is None:
        from mixzoo.methods import fit

        card = fit(None, s.abc, s.rbc, cache_dir=s.cache_dir, use_cache=s.use_cache, device=s.device,
                   data_dir=s.data_dir, allow_unsafe=s.allow_unsafe, progress=s.progress, eps=s.eps, norm=s.norm,
                   seed=s.seed).card
    cards = [load_card(c) for c in (card if isinstance(card, list | tuple) else [card])]
    if not cards:
        raise InputError("no mix card to bench; pass one or more cards (files or published names)")
    if s.abc is None and s.rbc is None:
        _same_pair(cards)
    ce = card_evaluation(cards[0], s)
    batch_policy = parse_batch_size(s.batch_size)
    s = s.changed(batch_size=resolved_batch_size(s.batch_size, ce.abc, ce.rbc, ce.data, s.device))
    notes = list(ce.notes)  # the report must say so, not only the terminal
    notes += [note for note in [reach_note(ce.eps, ce.norm, ce.data.input_size)] if note]  # eps beyond every image
    for other in cards[1:]:
        notes += weight_mismatches(other, ce.abc, ce.rbc)
    record = run_record_of(s, cards, ce)
    check_ranks_agree(record)  # the cards, models and images too, before any attack
    # the rows' attacks in the settings' precision (breaks confirmed in float32)
    request = EvalRequest(record, Cache(s.cache_dir, enabled=s.use_cache), progress=s.progress,
                          save_adversarial=save_adversarial)
    return BenchRun(s, cards, ce, request, given, batch_policy, notes)


def _model_row(run: BenchRun, role: str) -> ModelResult:
    """The ABC's or the RBC's row (labelled with the model actually evaluated, an --abc/--rbc override, not the
    card's name)."""
    model = getattr(run.ce, role)
    name = evaluated_name(run.cards[0], role, model)
    ev = evaluate(model, run.ce.data.images, run.ce.data.labels,
                  run.request.replace(key_parts=model_key_parts(model, run.ce.data), label=name))
    return run.row(name, role, ev)


def _card_rows(run: BenchRun) -> tuple[list[ModelResult], set[str]]:
    """One row per card (its worst case over the shared attack and its method's extras) and the rows' kinds."""
    abc_m, rbc_m, data = run.ce.abc, run.ce.rbc, run.ce.data
    card_rows, kinds = [], {"abc", "rbc"}
    for c in run.cards:
        method = c.mixing_method
        kind = method.name if method.name not in kinds else f"{method.name}-{len(kinds) - 1}"
        kinds.add(kind)
        title = method.title or method.name
        label = title if len(run.cards) == 1 else f"{title} ({c.path.stem if c.path else kind})"
        next_phase()
        ev = evaluate_card(c, abc_m, rbc_m, data.images, data.labels,
                           run.request.replace(key_parts=card_key_parts(c, abc_m, rbc_m, data), label=label),
                           extra_attacks=run.s.extra_attacks, **run.spend)
        card_rows.append(run.row(label, kind, ev, alpha=c.params.get("alpha"), card=c))
    distinct_row_names(card_rows, [c.path for c in run.cards])  # two cards with one file stem: rows told apart
    return card_rows, kinds


def _settings_record(run: BenchRun, card_rows: list[ModelResult], world_size: int) -> dict[str, Any]:
    """The report's ``settings``: the shared attack, the threat model, the seeding, the device and precision, and
    each component's attack and options."""
    s, device = run.s, run.s.device
    return {
        "attack": s.attack, "eps": run.ce.eps, "norm": run.ce.norm, "seed": s.seed, "batch_size": s.batch_size,
        "batch_size_policy": run.batch_policy,
        "per_example_seeds": s.per_example_seeds, "world_size": world_size, "attack_options": s.attack_options or {},
        "extra_attacks": s.extra_attacks, "device": device,
        "precision": resolve_precision(s.precision, device), "precision_policy": s.precision,
        "adversarial_file": ADVERSARIAL_FILE if run.request.save_adversarial else None, "seconds": None,
        "budget": s.budget,
        "components": {"attack": {"attack": s.attack, "options": dict(s.attack_options)}, **{
            f"{row.name}: {extra.name}": {"attack": extra.attack, "options": opts}
            for c, row in zip(run.cards, card_rows, strict=True) if s.extra_attacks
            for extra, opts in declared_attacks(c, s.budget, run.given)}}}


def _baseline_row(run: BenchRun, baseline: MatchSettings, card_name: str, settings_record: dict[str, Any]
                  ) -> ModelResult:
    """The baseline method at the parameter matched to the card's worst case (its search in float32, under the
    matching attack), evaluated like the other rows; the search is recorded in ``settings_record``."""
    lin = baseline_method()
    ce, n = run.ce, len(run.ce.data.labels)
    t_match = time.perf_counter()
    matching = run.request.replace(attack=baseline.attack, attack_options=baseline.options, precision="float32",
                                   save_adversarial=False)
    alpha_lin, tried, target = matched_linear_alpha(ce, matching, match_n=baseline.n,
                                                    extra_attacks=run.s.extra_attacks, **run.spend)
    lin_card = lin.card_at(alpha_lin, run.cards[0])
    ev = evaluate_card(lin_card, ce.abc, ce.rbc, ce.data.images, ce.data.labels,
                       run.request.replace(key_parts=card_key_parts(lin_card, ce.abc, ce.rbc, ce.data),
                                           label=f"{lin.title} alpha={alpha_lin}"),
                       extra_attacks=run.s.extra_attacks, **run.spend)
    row = run.row(f"{lin.title} (alpha={alpha_lin:.2f})", lin.name, ev, alpha=alpha_lin, card=lin_card)
    settings_record["components"]["baseline"] = {"attack": baseline.attack, "options": dict(baseline.options),
                                                 "n": min(baseline.n, n),
                                                 "seconds": time.perf_counter() - t_match}  # search and row
    if alpha_lin >= 1.0:  # the matched baseline is the RBC itself: said where the row is read
        run.notes.append(f"the matched {lin.title} row has alpha 1.00, so it is the RBC alone (on the first "
                         f"{min(baseline.n, n)} images, alpha 1 came closest to the card's robust accuracy, "
                         f"{100 * target:.1f}%)")
    settings_record.update(linear_alpha_search=tried, linear_alpha_match={
        "attack": baseline.attack, "options": baseline.options, "n": min(baseline.n, n),
        "card": card_name, "target_robust_accuracy": target})
    return row


def _report(run: BenchRun, rows: list[ModelResult], settings_record: dict[str, Any]) -> Report:
    from mixzoo.zoo.data import shortfall_note

    data, cards = run.ce.data, run.cards
    report = Report(
        models=rows, card=cards[0], cards=cards,
        dataset={"name": data.name, "split": "evaluation", "n": len(data.labels), "fingerprint": data.fingerprint,
                 "source": getattr(data, "source", ""), "calibration": cards[0].data},
        settings=settings_record, adversarial=run.points,
    )
    report.notes = run.notes + [note for note in [shortfall_note(data, run.s.n, "--n")] if note is not None]
    return report


def _report_request(run: BenchRun, curve: CurveSettings | None) -> ReportRequest:
    """What the first card's method computes its curve (``curve``'s attack, in float32, drawing per example) and
    every card's method its figure data with."""
    evaluation = run.request.replace(save_adversarial=False, precision="float32", per_example_seeds=True,
                                     **({} if curve is None else {"attack": curve.attack,
                                                                  "attack_options": curve.options}))
    return ReportRequest(evaluation, data_dir=run.s.data_dir, device=run.s.device,
                         n=run.s.n if curve is None else curve.n, points=None if curve is None else curve.points)


def _add_curve(run: BenchRun, report: Report, curve: CurveSettings) -> None:
    """The first card's method's trade-off curve (``report.curve``) and its component record."""
    t_curve = time.perf_counter()
    method, request = run.cards[0].mixing_method, _report_request(run, curve)
    args = (run.cards[0], run.ce.abc, run.ce.rbc, run.ce.data)
    report.curve = method.tradeoff_curve(*args, request)
    report.settings["components"]["curve"] = {"attack": curve.attack, "options": dict(curve.options),
                                              "n": min(curve.n, len(run.ce.data.labels)), "points": curve.points,
                                              "seconds": time.perf_counter() - t_curve}


def resolved_batch_size(batch_size: int | str, abc: nn.Module, rbc: nn.Module, data: Any, device: str) -> int:
    """``--batch-size`` as a number of images: ``"auto"`` from one attack step's memory of both networks at once (as
    the mixture holds them), the same on every torchrun rank (the smallest), so the shards are the same."""
    if parse_batch_size(batch_size) != "auto":
        return int(batch_size)
    x = data.images[:2].to(device)
    size = auto_batch_size(lambda v: abc(v) + rbc(v), x, data.labels[:2].to(device), n=len(data.labels))
    return min(distributed.gather(size))


def budgeted(s: RunSettings, baseline: MatchSettings | bool | None, curve: CurveSettings | bool | None, *,
             default_attack: str) -> tuple[RunSettings, MatchSettings | None, CurveSettings | None]:
    """The settings, matched baseline and curve with the settings' budget applied
    (:mod:`mixzoo.core.budget`): the shared attack named (the given one, else the budget's, else
    ``default_attack``) with the budget's caps under the user's ``-O``; ``True`` for the baseline or the curve:
    the budget's, ``False``: none; the ``-O`` counts set on the baseline's and the curve's attacks."""
    from dataclasses import replace

    given = dict(s.attack_options or {})
    attack = shared_attack(s.budget, s.attack, default_attack)
    s = s.changed(attack=attack, attack_options=shared_options(s.budget, attack, given))
    match = MatchSettings.for_budget(s.budget) if baseline is True else baseline or None
    if match is not None:
        match = replace(match, options=component_options(s.budget, match.attack, match.options, given))
    points = CurveSettings.for_budget(s.budget) if curve is True else curve or None
    if points is not None:
        points = replace(points, options=component_options(s.budget, points.attack, points.options, given))
    return s, match, points


def evaluated_name(card: Any, role: str, model: nn.Module) -> str:
    """The name a row is labelled with: the model actually evaluated (``--abc`` / ``--rbc`` replace the card's;
    :func:`card_evaluation` notes when its weights are not the ones the card was fitted for)."""
    name = getattr(model, "name", None)
    return name if isinstance(name, str) and name else (getattr(card, role) or {}).get("name") or role.upper()
