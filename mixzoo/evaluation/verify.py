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
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mixzoo.core.errors import InputError
from mixzoo.core.settings import RunSettings, settings_of


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

    @property
    def passed(self) -> bool:
        return not (self.outside or self.not_misclassified or self.missing or self.unexpected
                    or self.clean_disagrees)


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


def _outcomes(text: str, n: int, what: str, name: str) -> torch.Tensor:
    if len(text) != n or set(text) - {"0", "1"}:
        raise InputError(f"report row {name!r} has no per-image {what} outcomes for {n} images; re-run "
                         "`mixzoo bench --save-adversarial` with this version")
    return torch.tensor([c == "1" for c in text])


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


def threat_model_of(report: dict[str, Any], path: Path) -> tuple[float, str]:
    """The (eps, norm) every part of a bench report states: each row's ``epsilon`` / ``norm`` and ``n``, and the
    settings; parts that disagree (an edited report) make it unusable, so nothing is checked against one of them."""
    settings, models, n = report["settings"], report["models"], report["dataset"].get("n")
    if not isinstance(models, list) or not models or not all(isinstance(m, dict) for m in models):
        raise InputError(f"{path}: 'models' is not a list of rows; pass the --out directory of `mixzoo bench`")
    stated = {("settings", "eps"): settings.get("eps"), ("settings", "norm"): settings.get("norm")}
    for m in models:
        stated[(f"row {m.get('name')!r}", "eps")] = m.get("epsilon", settings.get("eps"))
        stated[(f"row {m.get('name')!r}", "norm")] = m.get("norm", settings.get("norm"))
        if "n" in m and m["n"] != n:
            raise InputError(f"{path}: row {m.get('name')!r} says n = {m['n']!r}, the data set n = {n!r}; the report"
                             " was edited or mixes runs: run the bench again")
    for what in ("eps", "norm"):
        values = {where: v for (where, f), v in stated.items() if f == what}
        if len({json.dumps(v) for v in values.values()}) > 1:
            shown = ", ".join(f"{where} {v!r}" for where, v in values.items())
            raise InputError(f"{path}: its parts disagree on {what} ({shown}); the report was edited or mixes runs:"
                             " run the bench again")
    eps, norm = stated[("settings", "eps")], stated[("settings", "norm")]
    if type(eps) not in (int, float) or not 0 <= eps < float("inf") or not isinstance(norm, str):
        raise InputError(f"{path}: eps {eps!r} / norm {norm!r} is not a threat model; run the bench again")
    return float(eps), norm


def verify_report(report_dir: str | Path, settings: RunSettings | None = None, *, out: str | Path | None = None,
                  **changes: Any) -> Verification:
    """Check the saved adversarial points of the bench report in ``report_dir`` (see the module docstring).

    Of the :class:`~mixzoo.core.settings.RunSettings` (keyword arguments named after its fields change them) this
    uses ``abc`` / ``rbc`` (replacing the models the card names, as in ``mixzoo bench``), ``data_dir``, ``device``,
    ``batch_size`` (images per forward pass) and ``allow_unsafe``; the threat model and images are the report's.
    ``out`` also writes the result as JSON there. Raises :class:`InputError` when the report, its points or its
    evaluation images are not there.
    """
    from mixzoo.core.card import MixCard
    from mixzoo.evaluation.bench import ADVERSARIAL_FILE, baseline_method, card_evaluation
    from mixzoo.zoo.pairs import check_device

    s = settings_of(settings, changes)
    device, batch_size = s.device, s.batch_size
    t0 = time.perf_counter()
    if out is not None:
        from mixzoo.core.cache import check_writable

        check_writable(out, what="--out file")
    report_dir = Path(report_dir)
    report_path = report_dir / "report.json"
    if not report_path.is_file():
        raise InputError(f"{report_path} not found; pass the --out directory of `mixzoo bench`")
    try:
        report = json.loads(report_path.read_text())
        settings, dataset, models = report["settings"], report["dataset"], report["models"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise InputError(f"{report_path} is not a mixzoo bench report ({exc})") from None
    if "adversarial_file" in settings and not settings["adversarial_file"]:
        raise InputError(f"{report_path} was written without --save-adversarial, so it has no points to check; run "
                         f"`mixzoo bench ... --save-adversarial --out {report_dir}`")
    points = load_points(report_dir / (settings.get("adversarial_file") or ADVERSARIAL_FILE))
    n = int(dataset["n"])
    threat = threat_model_of(report, report_path)
    if batch_size <= 0:
        raise InputError(f"--batch-size must be positive, got {batch_size}")
    check_device(device)  # not the attack: checking its points needs no attack, nor the plugin that provided it
    # a trained method's card finds its weight files next to the card file the report's mixed row records
    path = next((m["card_path"] for m in models if m.get("card_path") and m.get("kind") == report["card"].get(
        "method")), None)
    card = MixCard.from_dict(report["card"], source=str(report_path), path=Path(path) if path else None)
    ce = card_evaluation(card, s.changed(eps=threat[0], norm=threat[1], n=n))
    if ce.data.fingerprint != dataset["fingerprint"]:
        raise InputError(f"the evaluation images here (fingerprint {ce.data.fingerprint}) are not the report's "
                         f"({dataset['fingerprint']}); pass --data-dir with the data set the report used")
    images, labels = ce.data.images, ce.data.labels
    rows = []
    for m in models:
        kind = m["kind"]
        model = {"abc": ce.abc, "rbc": ce.rbc}.get(kind)
        if model is None and m.get("card"):  # a mixed row records its card: rebuilt by the card's method
            row_card = MixCard.from_dict(m["card"], source=f"{report_path} row {m['name']!r}",
                                         path=Path(m["card_path"]) if m.get("card_path") else None)
            model = row_card.mixing_method.build(ce.abc, ce.rbc, row_card)
        elif model is None and kind == card.method:  # reports before rows recorded cards: the report's card
            model = ce.mixed
        elif model is None and m.get("alpha") is not None and (base := baseline_method()) is not None:
            model = base.build(ce.abc, ce.rbc, base.card_at(float(m["alpha"])))  # ... and its matched baseline
        if model is None or kind not in points:
            raise InputError(f"{report_dir / ADVERSARIAL_FILE} has no points for row {m['name']!r} ({kind})")
        rows.append(_verify_row(m, model, points[kind], images, labels, ce.eps, ce.norm, batch_size, device))
    result = Verification(str(report_dir), rows, float(ce.eps), ce.norm, n, device, time.perf_counter() - t0,
                          notes=list(ce.notes))
    if out is not None:
        from mixzoo.core.cache import atomic_write_text

        atomic_write_text(out, json.dumps(result.to_dict(), indent=2) + "\n")
    return result


def _indices(mask: torch.Tensor) -> list[int]:
    return torch.nonzero(mask).squeeze(1).tolist()


def _verify_row(m: dict[str, Any], model: nn.Module, pts: dict[str, torch.Tensor], images: torch.Tensor,
                labels: torch.Tensor, eps: float, norm: str, batch_size: int, device: str) -> VerifiedRow:
    from mixzoo.attacks.evaluation import within_threat_model

    n = len(labels)
    clean_reported = _outcomes(m.get("clean_outcomes", ""), n, "clean", m["name"])
    robust_reported = _outcomes(m.get("robust_outcomes", ""), n, "robust", m["name"])
    broken_reported = clean_reported & ~robust_reported
    index = pts["index"].long()
    if pts["index"].ndim != 1 or pts["images"].shape[1:] != images.shape[1:]:
        raise InputError(f"the points of row {m['name']!r} have shape {tuple(pts['images'].shape)}, the images"
                         f" {tuple(images.shape[1:])} each; the adversarial file does not belong to this report")
    if len(index) and (index.min() < 0 or index.max() >= n or len(index.unique()) != len(index)):
        raise InputError(f"the points of row {m['name']!r} index examples outside 0..{n - 1} or twice")
    clean_here = _outputs(model, images, batch_size, device).argmax(dim=1) == labels
    adv = pts["images"].to(images.dtype)
    inside = within_threat_model(adv, images[index], eps, norm)
    out = _outputs(model, adv, batch_size, device) if len(index) else torch.zeros(0, 1)
    wrong = out.argmax(dim=1) != labels[index]
    confirmed = inside & wrong & clean_here[index]
    margins = _margins(out, labels[index])[confirmed] if len(index) else torch.zeros(0)
    saved = torch.zeros(n, dtype=torch.bool)
    saved[index] = True
    return VerifiedRow(
        name=m["name"], kind=m["kind"], alpha=m.get("alpha"), n=n, reported_robust_accuracy=float(m["robust_accuracy"]),
        verified_robust_accuracy=(int(clean_here.sum()) - int(confirmed.sum())) / n,
        broken_reported=int(broken_reported.sum()), points_saved=len(index), confirmed=int(confirmed.sum()),
        outside=index[~inside].tolist(), not_misclassified=index[inside & ~wrong].tolist(),
        missing=_indices(broken_reported & ~saved), unexpected=_indices(saved & ~broken_reported),
        clean_disagrees=_indices(clean_here != clean_reported),
        closest_margin=float(margins.max()) if len(margins) else None,
        fragile=int((margins > -FRAGILE).sum()))


__all__ = ["VerifiedRow", "Verification", "load_points", "verify_report"]
