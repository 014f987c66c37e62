"""What the bench returns, typed: one :class:`ModelResult` per row and the :class:`Report` that
:func:`mixzoo.evaluation.report.write_report` writes as ``report.json`` (its schema: :mod:`mixzoo.core.schema`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from mixzoo.attacks.result import Outcome, outcome_text
from mixzoo.core.labels import row_label
from mixzoo.evaluation.stats import paired_difference, wilson_interval


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


def row_result(name: str, kind: str, ev: Outcome | Mapping[str, Any], attack: str, eps: float, norm: str,
               alpha: float | None = None, card: Any = None) -> ModelResult:
    """A bench row from its evaluation's :class:`~mixzoo.attacks.result.Outcome` (accuracies, their 95 % Wilson
    intervals, the outcomes per example), its attack and threat model, and for a mixed row its alpha and card."""
    ev = Outcome.of(ev)
    n = ev.n
    clean, robust = sum(ev.clean_correct), sum(ev.robust_correct)
    return ModelResult(
        name=name, kind=kind, clean_accuracy=clean / n, robust_accuracy=robust / n, attack=attack, epsilon=eps,
        norm=norm, n=n, seconds=ev.seconds, alpha=alpha, components=ev.components, warnings=ev.warnings,
        device=ev.device, machine=ev.machine, cached=bool(ev.cached),
        clean_ci=list(wilson_interval(clean, n)), robust_ci=list(wilson_interval(robust, n)),
        clean_outcomes=outcome_text(ev.clean_correct), robust_outcomes=outcome_text(ev.robust_correct),
        method=None if card is None else card.method,
        card=None if card is None else card.to_dict(),
        card_path=None if card is None or card.path is None else str(card.path),
        precision=ev.precision,
    )
