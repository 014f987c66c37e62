"""Checking a bench report's robust errors without attacking: ``mixzoo verify BENCH_DIR``.

A robust accuracy is an upper bound whose other side is the attack's successes: every example counted as broken
must have a point inside the threat model that the model misclassifies. ``mixzoo bench --save-adversarial`` keeps
those points (``adversarial.safetensors``, one index and one image per broken example and model); this module
reloads the card's models by name, rebuilds the four classifiers of the report, and checks each point again with
plain forward passes (the idea behind RobustBench's requirement to publish adversarial examples):

* the point lies in [0, 1] and within eps of its clean image (the same tolerance the attack used);
* the model misclassifies it (MixedNUTS: the true mixture's output, not the surrogate the attack differentiated);
* the saved points are exactly the examples the report counts as clean-correct and broken, and the clean
  predictions recomputed here agree with the report's.

The robust accuracy that survives, (clean-correct - confirmed broken) / n, is what anyone with the card, the
weights and this file can reproduce; when everything checks out it equals the report's figure.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mixzoo.attacks.base import within_threat_model
from mixzoo.core.cache import atomic_write_text, check_writable
from mixzoo.core.card import MixCard
from mixzoo.core.errors import InputError
from mixzoo.core.paths import check_output, inside, json_with
from mixzoo.core.reading import read_data
from mixzoo.core.schema import ReportFile, validate
from mixzoo.core.settings import RunSettings, settings_of
from mixzoo.evaluation.loading import card_evaluation
from mixzoo.evaluation.recheck import attack_record, recheck_row, row_outcomes
from mixzoo.evaluation.report import ADVERSARIAL_FILE
from mixzoo.methods.base import baseline_method
from mixzoo.zoo.pairs import check_device


@dataclass
class VerifiedRow:
    """One model of the report: how many of its reported robust errors the saved points confirm."""

    name: str
    kind: str  # abc | rbc | the mixing method of a mixed row (as in the report)
    alpha: float | None  # the mixtures' mixing weight, as in the report
    n: int
    reported_robust_accuracy: float
    verified_robust_accuracy: float  # (clean-correct here - confirmed broken) / n
    broken_reported: int  # clean-correct and not robust in the report
    points_saved: int
    confirmed: int  # saved points inside the threat model and misclassified now
    outside: list[int] = field(default_factory=list)  # example indices whose point is outside the ball or [0, 1]
    not_misclassified: list[int] = field(default_factory=list)  # point inside, but the model is right there
    missing: list[int] = field(default_factory=list)  # reported broken, no point saved
    unexpected: list[int] = field(default_factory=list)  # point saved for an example not reported broken
    clean_disagrees: list[int] = field(default_factory=list)  # clean prediction differs from the report's
    # among confirmed points: the output margin (true class minus best other, < 0) closest to the boundary, and how
    # many lie within FRAGILE of it (informative only: they count, but another device's rounding might flip them)
    closest_margin: float | None = None
    fragile: int = 0
    # --recheck: example indices attacked again from scratch, those whose robust outcome differs from the report's,
    # and per stand-alone component (its name) those whose own outcome differs from its ``own_outcomes``
    rechecked: list[int] = field(default_factory=list)
    recheck_differs: list[int] = field(default_factory=list)
    own_differs: dict[str, list[int]] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not (self.outside or self.not_misclassified or self.missing or self.unexpected
                    or self.clean_disagrees or self.recheck_differs or self.own_differs)


@dataclass
class Verification:
    """Everything ``mixzoo verify`` prints and writes."""

    report: str
    rows: list[VerifiedRow]
    eps: float
    norm: str
    n: int
    device: str
    seconds: float
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.rows)

    def to_dict(self) -> dict[str, Any]:
        rows = [{**asdict(r), "passed": r.passed} for r in self.rows]
        return {**asdict(self), "rows": rows, "passed": self.passed}


FRAGILE = 1e-4  # a confirmed point this close to the decision boundary may flip under another device's rounding


def _outputs(model: nn.Module, images: torch.Tensor, batch_size: int, device: str) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([model(chunk.to(device)).float().cpu() for chunk in images.split(batch_size)])


def _margins(outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Output of the true class minus the largest other output: negative exactly when the example is misclassified
    (ties aside)."""
    true = outputs.gather(1, labels.view(-1, 1)).squeeze(1)
    other = outputs.scatter(1, labels.view(-1, 1), float("-inf")).amax(dim=1)
    return true - other


def load_points(path: Path) -> dict[str, dict[str, torch.Tensor]]:
    """``adversarial.safetensors`` as ``{kind: {"index", "images"}}``; a missing or damaged file is one line."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not path.is_file():
        raise InputError(f"{path} not found; run `mixzoo bench ... --save-adversarial --out {path.parent}` first")
    try:
        flat = load_file(path)
    except (SafetensorError, OSError) as exc:
        raise InputError(f"{path} is not a readable safetensors file ({exc}); run the bench again") from None
    points: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in flat.items():
        kind, _, what = key.partition(".")
        points.setdefault(kind, {})[what] = tensor
    for kind, pts in points.items():
        if set(pts) != {"index", "images"} or len(pts["index"]) != len(pts["images"]):
            raise InputError(f"{path}: entry {kind!r} needs matching 'index' and 'images' tensors")
    return points


def verify_report(report_dir: str | Path, settings: RunSettings | None = None, *, out: str | Path | None = None,
                  recheck: int = 0, **changes: Any) -> Verification:
    """Check the saved adversarial points of the bench report in ``report_dir`` (see the module docstring).

    Of the :class:`~mixzoo.core.settings.RunSettings` (keyword arguments named after its fields change them) this
    uses ``abc`` / ``rbc`` (replacing the models the card names, as in ``mixzoo bench``), ``data_dir``, ``device``,
    ``batch_size`` (images per forward pass) and ``allow_unsafe``; the threat model and images are the report's.
    ``out`` also writes the result as JSON there. Raises :class:`InputError` when the report, its points or its
    evaluation images are not there, or when the report's parts disagree (the threat model of its settings, its
    rows and its run record).

    ``recheck`` = N > 0 also attacks again, from scratch and without any cache, the first N examples each row calls
    robust and the first N it calls broken (:func:`mixzoo.evaluation.recheck.recheck_row`: within the report's
    batches), with the attack, options, seed, precision and batch size of the report's run record, a card's row
    also with its method's extra attacks under the record's budget and ``-O`` counts (each example's randomness is
    drawn from its index or its batch, so its outcome is the same as in the full run); a row fails when a robust
    outcome differs (:attr:`VerifiedRow.recheck_differs`) or a stand-alone component's (its ``own_outcomes``:
    :attr:`VerifiedRow.own_differs`). This catches outcomes no saved point can refute, such as a cache entry
    edited to call broken examples robust.
    """
    s = settings_of(settings, changes)
    device, batch_size = s.device, s.batch_size
    t0 = time.perf_counter()
    if out is not None:
        check_output(out, what="a mixzoo verify result", ours=json_with("report", "rows", "passed"))
        check_writable(out, what="--out file")
    report_dir = Path(report_dir)
    report_path = report_dir / "report.json"
    report = _load_report(report_path)
    settings, dataset, models = report["settings"], report["dataset"], report["models"]
    points_file = inside(report_dir, settings.get("adversarial_file") or ADVERSARIAL_FILE,
                         f"{report_path}: field 'settings.adversarial_file'", "the report")
    points = load_points(points_file)
    n = int(dataset["n"])
    if batch_size <= 0:
        raise InputError(f"--batch-size must be positive, got {batch_size}")
    if recheck < 0:
        raise InputError(f"--recheck must be 0 or more examples, got {recheck}")
    check_device(device)  # not the attack: checking its points needs no attack, nor the plugin that provided it
    # a trained method's card finds its weight files next to the card file the report's mixed row records
    path = next((m["card_path"] for m in models if m.get("card_path") and m.get("kind") == report["card"].get(
        "method")), None)
    card = MixCard.from_dict(report["card"], source=str(report_path), path=Path(path) if path else None)
    eps, norm = threat_model(report, report_path)
    ce = card_evaluation(card, s.changed(eps=eps, norm=norm, n=n))
    if ce.data.fingerprint != dataset["fingerprint"]:
        raise InputError(f"the evaluation images here (fingerprint {ce.data.fingerprint}) are not the report's "
                         f"({dataset['fingerprint']}); pass --data-dir with the data set the report used")
    images, labels = ce.data.images, ce.data.labels
    check_points(points, images, points_file)
    rows, kept = [], []
    for m in models:
        model = _row_model(m, card, ce, report_path)
        if model is None or m["kind"] not in points:
            raise InputError(f"{report_dir / ADVERSARIAL_FILE} has no points for row {m['name']!r} ({m['kind']})")
        kept.append((model, row_outcomes(m, len(labels))))
        rows.append(_verify_row(m, kept[-1][1], model, points[m["kind"]], images, labels, ce.eps, ce.norm,
                                batch_size, device))
    if recheck:
        again = attack_record(report, report_path, s)
        for row, m, (model, outcomes) in zip(rows, models, kept, strict=True):
            row.rechecked, row.recheck_differs, row.own_differs = recheck_row(
                m, outcomes, model, _row_card(m, report_path), ce, images, labels, recheck, again)
    result = Verification(str(report_dir), rows, float(ce.eps), ce.norm, n, device, time.perf_counter() - t0,
                          notes=list(ce.notes))
    if out is not None:
        atomic_write_text(out, json.dumps(result.to_dict(), indent=2) + "\n")
    return result


def _load_report(report_path: Path) -> dict[str, Any]:
    """``report.json`` of a bench run with saved points, read by the one reader and checked by the report schema
    (every figure against its outcomes, the settings against the run record, the record against its digest:
    :class:`mixzoo.core.schema.ReportFile`); a one-line error when it is missing, not a bench report, its parts
    disagree, or it was written without ``--save-adversarial``."""
    if not report_path.is_file():
        raise InputError(f"{report_path} not found; pass the --out directory of `mixzoo bench`")
    report = read_data(report_path, "json", what="bench report")
    if not isinstance(report, dict) or not isinstance(report.get("settings"), dict) or not isinstance(
            report.get("dataset"), dict) or not isinstance(report.get("card"), dict) or "models" not in report:
        raise InputError(f"{report_path} is not a mixzoo bench report (settings, dataset and card must be objects)")
    validate(ReportFile, report, str(report_path), "pass the report.json `mixzoo bench` wrote, or run the bench"
             " again")
    settings, dataset = report["settings"], report["dataset"]
    if type(dataset.get("n")) is not int or not isinstance(dataset.get("fingerprint"), str):
        raise InputError(f"{report_path}: field 'dataset' names no number of images and fingerprint; pass the"
                         " report.json `mixzoo bench` wrote")
    if "adversarial_file" in settings and not settings["adversarial_file"]:
        raise InputError(f"{report_path} was written without --save-adversarial, so it has no points to check; run "
                         f"`mixzoo bench ... --save-adversarial --out {report_path.parent}`")
    return report


def _row_card(m: dict[str, Any], report_path: Path) -> Any:
    """The card a mixed row records (``None`` for a row without one)."""
    if not m.get("card"):
        return None
    return MixCard.from_dict(m["card"], source=f"{report_path} row {m['name']!r}",
                             path=Path(m["card_path"]) if m.get("card_path") else None)


def _row_model(m: dict[str, Any], card: Any, ce: Any, report_path: Path) -> nn.Module | None:
    """The classifier of report row ``m``: the ABC, the RBC, a mixed row's card rebuilt by its method, or (reports
    before rows recorded cards) the report's card and its matched baseline; ``None`` when none fits."""
    model = {"abc": ce.abc, "rbc": ce.rbc}.get(m["kind"])
    if model is None and m.get("card"):  # a mixed row records its card: rebuilt by the card's method
        row_card = _row_card(m, report_path)
        model = row_card.mixing_method.build(ce.abc, ce.rbc, row_card)
    elif model is None and m["kind"] == card.method:  # reports before rows recorded cards: the report's card
        model = ce.mixed
    elif model is None and m.get("alpha") is not None and (base := baseline_method()) is not None:
        model = base.build(ce.abc, ce.rbc, base.card_at(float(m["alpha"])))  # ... and its matched baseline
    return model


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def threat_model(report: dict[str, Any], path: Path) -> tuple[float, str]:
    """The report's eps and norm, from every part that states them (its settings, each row, its run record);
    a one-line error when one is missing or malformed, or when two parts disagree."""
    stated: list[tuple[str, Any, Any]] = [("settings", report["settings"].get("eps"), report["settings"].get("norm"))]
    models = report["models"]
    if not isinstance(models, list) or not models or not all(isinstance(m, dict) for m in models):
        raise InputError(f"{path} has no rows (models) to verify; pass the --out directory of `mixzoo bench`")
    stated += [(f"row {m.get('name')!r}", m.get("epsilon"), m.get("norm")) for m in models]
    record = report.get("record")
    if isinstance(record, dict) and record:
        stated.append(("record", record.get("eps"), record.get("norm")))
    for where, eps, norm in stated:
        if not _number(eps) or eps < 0 or not isinstance(norm, str):
            raise InputError(f"{path}: {where} gives no threat model (eps {eps!r}, norm {norm!r}); pass an unedited"
                             " report of `mixzoo bench`")
    first = stated[0]
    for where, eps, norm in stated[1:]:
        if (float(eps), norm) != (float(first[1]), first[2]):
            raise InputError(f"{path} disagrees with itself on the threat model: {first[0]} say {first[2]} eps="
                             f"{first[1]:g}, {where} says {norm} eps={eps:g}; the report was edited or mixes runs,"
                             " re-run `mixzoo bench`")
    return float(first[1]), first[2]


def check_points(points: dict[str, dict[str, torch.Tensor]], images: torch.Tensor, path: Path) -> None:
    """Each row's saved points: 1-D integer indices and floating images of the evaluation images' shape."""
    for kind, pts in points.items():
        index, adv = pts["index"], pts["images"]
        if index.ndim != 1 or index.dtype.is_floating_point or index.dtype == torch.bool:
            raise InputError(f"{path}: {kind}.index must be a 1-D tensor of example indices, got {index.dtype}"
                             f" of shape {tuple(index.shape)}; run the bench again with --save-adversarial")
        if not adv.dtype.is_floating_point or tuple(adv.shape[1:]) != tuple(images.shape[1:]):
            raise InputError(f"{path}: {kind}.images has shape {tuple(adv.shape)} ({adv.dtype}) where images of "
                             f"shape (k, {', '.join(map(str, images.shape[1:]))}) are expected; run the bench again"
                             " with --save-adversarial")


def _indices(mask: torch.Tensor) -> list[int]:
    return torch.nonzero(mask).squeeze(1).tolist()


def _verify_row(m: dict[str, Any], outcomes: tuple[torch.Tensor, torch.Tensor], model: nn.Module,
                pts: dict[str, torch.Tensor], images: torch.Tensor, labels: torch.Tensor, eps: float, norm: str,
                batch_size: int, device: str) -> VerifiedRow:
    n = len(labels)
    clean_reported, robust_reported = outcomes
    broken_reported = clean_reported & ~robust_reported
    index = pts["index"].long()
    if len(index) and (index.min() < 0 or index.max() >= n or len(index.unique()) != len(index)):
        raise InputError(f"the points of row {m['name']!r} index examples outside 0..{n - 1} or twice")
    clean_here = _outputs(model, images, batch_size, device).argmax(dim=1) == labels
    adv = pts["images"].to(images.dtype)
    in_ball = within_threat_model(adv, images[index], eps, norm)
    out = _outputs(model, adv, batch_size, device) if len(index) else torch.zeros(0, 1)
    wrong = out.argmax(dim=1) != labels[index]
    confirmed = in_ball & wrong & clean_here[index]
    margins = _margins(out, labels[index])[confirmed] if len(index) else torch.zeros(0)
    saved = torch.zeros(n, dtype=torch.bool)
    saved[index] = True
    return VerifiedRow(
        name=m["name"], kind=m["kind"], alpha=m.get("alpha"), n=n,
        reported_robust_accuracy=int(robust_reported.sum()) / n,  # the report's figure, from its outcomes
        verified_robust_accuracy=(int(clean_here.sum()) - int(confirmed.sum())) / n,
        broken_reported=int(broken_reported.sum()), points_saved=len(index), confirmed=int(confirmed.sum()),
        outside=index[~in_ball].tolist(), not_misclassified=index[in_ball & ~wrong].tolist(),
        missing=_indices(broken_reported & ~saved), unexpected=_indices(saved & ~broken_reported),
        clean_disagrees=_indices(clean_here != clean_reported),
        closest_margin=float(margins.max()) if len(margins) else None,
        fragile=int((margins > -FRAGILE).sum()))


__all__ = ["VerifiedRow", "Verification", "check_points", "load_points", "threat_model", "verify_report"]
