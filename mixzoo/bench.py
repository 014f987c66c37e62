"""Evaluating a mix card: clean and robust accuracy of the ABC, the RBC, the linear baseline and MixedNUTS.

All four are attacked with the same attack (from the attack hook) on the same evaluation images, disjoint from the
calibration images. The linear "Mixed" baseline of Bai et al. gets the constant alpha that matches MixedNUTS's robust
accuracy as closely as the alpha grid allows (paper Fig. 5 / Fig. 8 comparison). Each model's evaluation is saved
per batch and resumes after an interruption; finished evaluations are reused when nothing they depend on changed.
"""

from __future__ import annotations

import json
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import nn

from mixzoo.cache import Cache, atomic_save_tensors, atomic_write_text, check_writable, content_key
from mixzoo.errors import InputError
from mixzoo.machine import machine_summary, run_record
from mixzoo.pipeline import (
    _default_attack_setting,
    card_dataset,
    card_models,
    check_device,
    check_model_fits,
    model_device,
    model_key,
)
from mixzoo.progress import console, progress_bar

if TYPE_CHECKING:
    from rich.console import Console

# 2: warnings merged across batches; 3: adaptive-strong exact/bypass runs at --seed; 4: the mixtures' layer norm is
# the authors' (unbiased variance + 1e-8, mixzoo.transforms.LAYER_NORM_VERSION "ln-2")
BENCH_CODE_VERSION = "bench-4"
ADV_SUFFIX = ".adv.safetensors"  # next to a cached outcome KEY.json: the points that broke its examples
ADVERSARIAL_FILE = "adversarial.safetensors"


@dataclass
class ModelResult:
    """One row of the bench table (fractions, not percents)."""

    name: str
    kind: str  # abc | rbc | linear | mixednuts
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
    # the hardware of its batches (mixzoo.machine.machine_summary; " + "-joined when a resumed run changed machine,
    # "unknown" for outcomes cached before it was recorded); a cached row keeps the machine that computed it
    machine: str = ""
    cached: bool = False  # True when the row was read from the cache rather than attacked in this run
    clean_ci: list[float] = field(default_factory=list)  # 95 % Wilson interval (mixzoo.stats)
    robust_ci: list[float] = field(default_factory=list)
    # per evaluation image, in order: "1" correct, "0" not; kept so any two rows can be compared example by example
    clean_outcomes: str = ""
    robust_outcomes: str = ""


@dataclass
class Report:
    """Everything ``mixzoo bench`` prints and writes."""

    models: list[ModelResult]
    card: Any
    dataset: dict[str, Any]
    settings: dict[str, Any]
    curve: dict[str, Any] | None = None
    calibration: dict[str, Any] | None = None
    out: Path | None = None
    files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # kind -> {"index", "images"}: the attack's point for every example it broke (``save_adversarial``)
    adversarial: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)
    # versions, git commit, machine and finish time of this run (mixzoo.machine.run_record)
    run: dict[str, Any] = field(default_factory=dict)

    def row(self, kind: str) -> ModelResult:
        return next(m for m in self.models if m.kind == kind)

    def comparisons(self) -> list[dict[str, Any]]:
        """MixedNUTS against the RBC and against the linear baseline, clean and robust, paired example by example
        on the same images (:func:`mixzoo.stats.paired_difference`: difference of accuracies, 95 % interval)."""
        from mixzoo.stats import paired_difference

        out = []
        nuts = self.row("mixednuts")
        for other in (m for m in self.models if m.kind in ("rbc", "linear")):
            entry: dict[str, Any] = {"a": nuts.name, "b": other.name, "b_kind": other.kind}
            for what in ("clean", "robust"):
                a, b = getattr(nuts, f"{what}_outcomes"), getattr(other, f"{what}_outcomes")
                if a and b and len(a) == len(b):
                    entry[what] = paired_difference([c == "1" for c in a], [c == "1" for c in b]).to_dict()
            out.append(entry)
        return out

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {
            "models": [asdict(m) for m in self.models],
            "card": self.card.to_dict() if hasattr(self.card, "to_dict") else self.card,
            "dataset": self.dataset,
            "settings": self.settings,
            "curve": self.curve,
            "calibration": self.calibration,
            "comparisons": self.comparisons(),
            "notes": self.notes,
            "run": self.run,
        }


def evaluate(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, *, attack: str, eps: float, norm: str,
             seed: int, batch_size: int, cache: Cache, key_parts: dict[str, Any], label: str,
             attack_options: dict[str, Any] | None = None, save_adversarial: bool = False,
             progress: bool = True) -> dict[str, Any]:
    """Attack ``model`` batch by batch, saving each batch's outcome so an interrupted run resumes.

    Returns a dict with per-example ``clean_correct`` / ``robust_correct`` lists, per-component broken counts,
    warnings and seconds. The attack object comes from the attack hook (``mixzoo.plugins.lookup``).
    ``save_adversarial`` adds ``adversarial``: ``{"index", "images"}`` tensors, the point the attack found for each
    example it broke (kept next to the cached outcome; a cached outcome without them is attacked again).
    """
    from mixzoo.plugins import lookup

    attack_cls = lookup("attack", attack)
    options = dict(attack_options or {})
    key = content_key({**key_parts, "attack": attack, "eps": eps, "norm": norm, "seed": seed,
                       "batch_size": batch_size, "options": options, "code": BENCH_CODE_VERSION})
    final = cache.root / "bench" / f"{key}.json"
    final_adv = final.with_suffix(ADV_SUFFIX)
    if cache.enabled and final.exists() and (not save_adversarial or final_adv.exists()):
        try:
            hit = {**json.loads(final.read_text()), "cached": True}
            if save_adversarial:
                hit["adversarial"] = load_file(final_adv)
            return hit
        except (json.JSONDecodeError, SafetensorError):
            final.unlink()
            final_adv.unlink(missing_ok=True)
    n = len(labels)
    batches: list[dict[str, Any]] = []
    points: list[dict[str, torch.Tensor]] = []
    with progress_bar(progress) as bar:
        task = bar.add_task(f"{attack} on {label}", total=n)
        for index, start in enumerate(range(0, n, batch_size)):
            stop = min(n, start + batch_size)
            part_path = cache.root / "bench" / f"{key}.partial" / f"{index:06d}.json"
            part_adv = part_path.with_suffix(ADV_SUFFIX)
            part = None
            if cache.enabled and part_path.exists() and (not save_adversarial or part_adv.exists()):
                try:
                    part = json.loads(part_path.read_text())
                    if save_adversarial:
                        points.append(load_file(part_adv))
                except (json.JSONDecodeError, SafetensorError):
                    part = None
            if part is None:
                runner = attack_cls(eps=eps, norm=norm, seed=seed + index, **options)
                device = model_device(model)
                res = runner.run(model, images[start:stop].to(device), labels[start:stop].to(device),
                                 progress=False)
                part = {
                    "clean_correct": res.clean_correct.bool().tolist(),
                    "robust_correct": res.robust_correct.bool().tolist(),
                    "components": [{"name": c.name, "newly_broken": int(c.newly_broken), "seconds": c.seconds}
                                   for c in res.components],
                    "warnings": list(res.warnings),
                    "seconds": res.seconds,
                    "device": device.type,
                    "machine": machine_summary(device),
                }
                if save_adversarial:
                    broken = torch.nonzero(res.clean_correct.bool() & ~res.robust_correct.bool()).squeeze(1)
                    found = res.adv_images[broken.to(res.adv_images.device)].cpu()
                    points.append({"index": broken + start, "images": found})
                if cache.enabled:
                    if save_adversarial:  # the points first: a batch counts as done once its outcome is written
                        atomic_save_tensors(part_adv, points[-1])
                    atomic_write_text(part_path, json.dumps(part))
            batches.append(part)
            bar.advance(task, stop - start)
    merged: dict[str, Any] = {
        "clean_correct": [v for b in batches for v in b["clean_correct"]],
        "robust_correct": [v for b in batches for v in b["robust_correct"]],
        "seconds": sum(b["seconds"] for b in batches),
        "device": "+".join(sorted({b.get("device", "unknown") for b in batches})),
        "machine": " + ".join(dict.fromkeys(b.get("machine", "unknown") for b in batches)),  # in batch order
        "components": [],
    }
    names = [c["name"] for c in batches[0]["components"]]
    for name in names:
        merged["components"].append({
            "name": name,
            "newly_broken": sum(c["newly_broken"] for b in batches for c in b["components"] if c["name"] == name),
            "seconds": sum(c["seconds"] for b in batches for c in b["components"] if c["name"] == name),
        })
    merged["warnings"] = merge_warnings([b["warnings"] for b in batches], merged["components"])
    adversarial = None
    if save_adversarial:
        adversarial = {"index": torch.cat([p["index"] for p in points]).long(),
                       "images": torch.cat([p["images"] for p in points])}
    if cache.enabled:
        if adversarial is not None:
            atomic_save_tensors(final_adv, adversarial)
        atomic_write_text(final, json.dumps(merged))
        import shutil

        shutil.rmtree(final.with_suffix(".partial"), ignore_errors=True)
    return merged if adversarial is None else {**merged, "adversarial": adversarial}


def mixed_key_parts(card: Any, abc: nn.Module, rbc: nn.Module, data: Any) -> dict[str, Any]:
    """Cache key of MixedNUTS's evaluation rows: the data, both models' weights and the card's mixing parameters."""
    return {"data": data.fingerprint, "abc": model_key(abc), "rbc": model_key(rbc),
            "card": {k: getattr(card, k) for k in ("s", "p", "c", "alpha", "clamp", "top_k", "temperature",
                                                   "alpha_d")}}


def linear_key_parts(abc: nn.Module, rbc: nn.Module, data: Any, alpha: float) -> dict[str, Any]:
    """Cache key of the linear baseline's evaluation row at ``alpha``."""
    return {"data": data.fingerprint, "abc": model_key(abc), "rbc": model_key(rbc), "linear_alpha": alpha}


def merge_warnings(per_batch: list[list[str]], components: list[dict[str, Any]]) -> list[str]:
    """One list of warnings for a whole evaluation from the per-batch lists.

    The Square gradient-masking warning is recomputed from the summed component counts (per batch it would read
    "Square broke 1 ..." several times); any other warning seen in several batches says in how many.
    """
    from collections import Counter

    from mixzoo.attacks.evaluation import SQUARE_MASKING, square_masking_note

    counts = Counter(w for ws in per_batch for w in ws if not w.startswith(SQUARE_MASKING))
    out = [w if k == 1 else f"{w} (in {k} of {len(per_batch)} batches)" for w, k in sorted(counts.items())]
    square = sum(c["newly_broken"] for c in components if c["name"] == "square")
    if square and len(components) > 1:
        out.insert(0, square_masking_note(square))
    return out


def _result(name: str, kind: str, ev: dict[str, Any], attack: str, eps: float, norm: str,
            alpha: float | None = None) -> ModelResult:
    from mixzoo.stats import wilson_interval

    n = len(ev["clean_correct"])
    clean, robust = sum(ev["clean_correct"]), sum(ev["robust_correct"])
    return ModelResult(
        name=name, kind=kind, clean_accuracy=clean / n, robust_accuracy=robust / n, attack=attack, epsilon=eps,
        norm=norm, n=n, seconds=ev["seconds"], alpha=alpha, components=ev["components"], warnings=ev["warnings"],
        device=ev.get("device", "unknown"), machine=ev.get("machine", "unknown"), cached=bool(ev.get("cached", False)),
        clean_ci=list(wilson_interval(clean, n)), robust_ci=list(wilson_interval(robust, n)),
        clean_outcomes="".join("1" if v else "0" for v in ev["clean_correct"]),
        robust_outcomes="".join("1" if v else "0" for v in ev["robust_correct"]),
    )


BENCH_MATCH_ATTACK = "adaptive-apgd"  # what matches the linear baseline's alpha: cheaper than the main attack
BENCH_MATCH_OPTIONS: dict[str, Any] = {"n_iter": 25, "n_target_classes": 3}


def linear_alpha_grid(step: float = 0.01) -> list[float]:
    """Candidate constant mixing weights of the linear baseline, 1/2 ... 1 (paper footnote 1: alpha >= 1/2)."""
    return [round(float(a), 6) for a in np.arange(0.5, 1.0 + step / 2, step)]


def match_linear_alpha(abc: nn.Module, rbc: nn.Module, images: torch.Tensor, labels: torch.Tensor,
                       target: float, *, attack: str, eps: float, norm: str, seed: int, batch_size: int,
                       cache: Cache, key_parts: dict[str, Any], attack_options: dict[str, Any] | None,
                       grid: list[float] | None = None, progress: bool = True) -> tuple[float, list[dict]]:
    """Bisection over the alpha grid for the linear mixture whose robust accuracy is closest to ``target``.

    Robust accuracy of the linear mixture grows with alpha (more weight on the RBC), so a bisection over the grid
    needs about log2(51) = 6 evaluations; every evaluation tried is returned so the choice can be audited.
    """
    from mixzoo.mixing import MixedClassifier

    grid = grid or linear_alpha_grid()
    tried: dict[int, float] = {}

    def robust(i: int) -> float:
        if i not in tried:
            ev = evaluate(MixedClassifier.linear(abc, rbc, alpha=grid[i]), images, labels, attack=attack, eps=eps,
                          norm=norm, seed=seed, batch_size=batch_size, cache=cache,
                          key_parts={**key_parts, "linear_alpha": grid[i]}, label=f"linear alpha={grid[i]}",
                          attack_options=attack_options, progress=progress)
            tried[i] = sum(ev["robust_correct"]) / len(ev["robust_correct"])
        return tried[i]

    lo, hi = 0, len(grid) - 1
    if robust(hi) <= target:
        lo = hi
    elif robust(lo) >= target:
        hi = lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if robust(mid) < target:
            lo = mid
        else:
            hi = mid
    best = min({lo, hi}, key=lambda i: (abs(robust(i) - target), -i))
    return grid[best], [{"alpha": grid[i], "robust_accuracy": r} for i, r in sorted(tried.items())]


def matched_linear_alpha(ce: CardEvaluation, *, match_n: int, attack: str, eps: float, norm: str, seed: int,
                         batch_size: int, cache: Cache, attack_options: dict[str, Any] | None, progress: bool = True
                         ) -> tuple[float, list[dict], float]:
    """The linear baseline's alpha for a card: MixedNUTS's robust accuracy under ``attack`` on the first
    ``match_n`` evaluation images, then :func:`match_linear_alpha` against it. Returns the alpha, every alpha tried
    and the target. ``mixzoo bench`` and ``mixzoo sanity`` share it, and so share its cached evaluations."""
    images, labels = ce.data.images[:match_n], ce.data.labels[:match_n]
    common = dict(attack=attack, eps=eps, norm=norm, seed=seed, batch_size=batch_size, cache=cache,
                  attack_options=attack_options, progress=progress)
    ev = evaluate(ce.mixed, images, labels, key_parts={**mixed_key_parts(ce.card, ce.abc, ce.rbc, ce.data),
                                                       "match_n": match_n},
                  label="MixedNUTS (matching attack)", **common)
    target = sum(ev["robust_correct"]) / len(ev["robust_correct"])
    key = {"data": ce.data.fingerprint, "abc": model_key(ce.abc), "rbc": model_key(ce.rbc), "match_n": match_n}
    alpha, tried = match_linear_alpha(ce.abc, ce.rbc, images, labels, target, key_parts=key, **common)
    return alpha, tried, target


def check_run_settings(n: int, batch_size: int, device: str, attack: str,
                       attack_options: dict[str, Any] | None = None, out: str | Path | None = None) -> None:
    """One-line errors for settings every card evaluation shares, before anything is loaded or attacked."""
    from mixzoo.plugins import lookup

    if out is not None:
        check_writable(out, directory=True, what="--out directory")
    if n <= 0:
        raise InputError(f"--n must be positive, got {n}")
    if batch_size <= 0:
        raise InputError(f"--batch-size must be positive, got {batch_size}")
    check_device(device)
    # an unknown name or option fails now, not after calibrating and attacking three models
    attack_cls = lookup("attack", attack)
    check_options = getattr(attack_cls, "check_options", None)  # a plugin's attack need not subclass Attack
    if attack_options and check_options is not None:
        check_options(dict(attack_options))


@dataclass
class CardEvaluation:
    """A mix card ready to evaluate: its models, MixedNUTS, the attack radius and the evaluation images."""

    card: Any
    abc: nn.Module
    rbc: nn.Module
    mixed: nn.Module
    data: Any
    eps: float
    norm: str
    notes: list[str]  # weight-hash mismatches against the card (also issued as warnings)


def card_evaluation(card: Any, *, abc: str | nn.Module | None = None, rbc: str | nn.Module | None = None,
                    eps: float | None = None, norm: str | None = None, n: int = 1000, data_dir: str | None = None,
                    device: str = "cpu", allow_unsafe: bool = False) -> CardEvaluation:
    """Load what evaluating ``card`` needs: the ABC and RBC (:func:`~mixzoo.pipeline.card_models`), MixedNUTS, eps
    and norm (given, else the card's attack, else the RBC's threat model) and the first ``n`` evaluation images,
    refusing models that cannot classify them."""
    from mixzoo.card import MixCard
    from mixzoo.data import load_dataset
    from mixzoo.mixing import MixedClassifier, weight_mismatches

    if not isinstance(card, MixCard):
        card = MixCard.load(card)
    abc_m, rbc_m = card_models(card, abc, rbc, device=device, allow_unsafe=allow_unsafe)
    notes = weight_mismatches(card, abc_m, rbc_m)
    for note in notes:
        warnings.warn(note, stacklevel=3)
    mixed = MixedClassifier.from_card(card, abc_m, rbc_m, warn=False)
    attack = card.attack or {}
    eps, norm = _default_attack_setting(rbc_m, attack.get("eps") if eps is None else eps,
                                        attack.get("norm") if norm is None else norm)
    data = load_dataset(card_dataset(card, rbc_m), "evaluation", n=n, root=data_dir)
    if card.top_k is not None and card.top_k > data.num_classes:
        raise InputError(f"the card's top_k ({card.top_k}) exceeds the {data.num_classes} classes of {data.name!r};"
                         " it was calibrated for another task")
    check_model_fits(abc_m, data, "ABC")
    check_model_fits(rbc_m, data, "RBC")
    return CardEvaluation(card, abc_m, rbc_m, mixed, data, eps, norm, notes)


def bench(
    card: Any = None,
    *,
    abc: str | nn.Module | None = None,
    rbc: str | nn.Module | None = None,
    attack: str = "adaptive",
    n: int = 1000,
    out: str | Path | None = None,
    eps: float | None = None,
    norm: str | None = None,
    seed: int = 0,
    batch_size: int = 250,
    attack_options: dict[str, Any] | None = None,
    curve: bool = True,
    curve_n: int = 300,
    curve_attack: str = "adaptive-apgd",
    curve_options: dict[str, Any] | None = None,
    match_attack: str = BENCH_MATCH_ATTACK,
    match_n: int = 500,
    match_options: dict[str, Any] | None = None,
    plots: bool = True,
    save_adversarial: bool = False,
    data_dir: str | None = None,
    cache_dir: str | Path | None = None,
    use_cache: bool = True,
    device: str = "cpu",
    allow_unsafe: bool = False,
    progress: bool = True,
) -> Report:
    """Clean and robust accuracy of ABC, RBC, linear baseline and MixedNUTS on the evaluation split.

    ``card`` is a :class:`~mixzoo.card.MixCard` or a path to one; without a card the pair (default: the built-in
    Fashion-MNIST pair) is calibrated first with :func:`mixzoo.pipeline.mix`. Writes ``report.json``,
    ``report.md`` and plots to ``out`` when given.

    The linear baseline's alpha is found by bisection with ``match_attack`` (default: transfer-based APGD-CE + APGD-T,
    ``match_options``, cheaper than the main attack) on the first ``match_n`` images, against MixedNUTS's robust
    accuracy under that same attack on those images; the chosen alpha is then evaluated with the main attack like
    the other rows. The trade-off curve uses ``curve_attack`` / ``curve_options`` on ``curve_n`` images.

    ``save_adversarial`` keeps, for each of the four rows, the point that broke each broken example and writes them
    to ``adversarial.safetensors`` next to the report, so anyone can check the robust errors without attacking
    (:func:`mixzoo.verify.verify_report`, ``mixzoo verify``).
    """
    curve_options = {"n_iter": 25, "n_target_classes": 3} if curve_options is None else curve_options
    match_options = dict(BENCH_MATCH_OPTIONS) if match_options is None else match_options
    from mixzoo.data import shortfall_note
    from mixzoo.mixing import MixedClassifier
    from mixzoo.pipeline import mix

    check_run_settings(n, batch_size, device, attack, attack_options, out)
    if curve and curve_n <= 0:
        raise InputError(f"--curve-n must be positive, got {curve_n} (or pass --no-curve)")
    t0 = time.perf_counter()
    if card is None:
        res = mix(abc, rbc, cache_dir=cache_dir, use_cache=use_cache, device=device, data_dir=data_dir,
                  allow_unsafe=allow_unsafe, progress=progress, eps=eps, norm=norm, seed=seed)
        card = res.card
    ce = card_evaluation(card, abc=abc, rbc=rbc, eps=eps, norm=norm, n=n, data_dir=data_dir, device=device,
                         allow_unsafe=allow_unsafe)
    card, abc_m, rbc_m, mixed, data, eps, norm = ce.card, ce.abc, ce.rbc, ce.mixed, ce.data, ce.eps, ce.norm
    notes = list(ce.notes)  # the report must say so, not only the terminal
    dataset_name = data.name
    cache = Cache(cache_dir, enabled=use_cache)
    images, labels = data.images, data.labels
    base = {"data": data.fingerprint}
    common = dict(attack=attack, eps=eps, norm=norm, seed=seed, batch_size=batch_size, cache=cache,
                  attack_options=attack_options, progress=progress)
    abc_name, rbc_name = card.abc.get("name", "ABC"), card.rbc.get("name", "RBC")
    points: dict[str, dict[str, torch.Tensor]] = {}

    def row(name: str, kind: str, ev: dict[str, Any], alpha: float | None = None) -> ModelResult:
        if save_adversarial:
            points[kind] = ev["adversarial"]
        return _result(name, kind, ev, attack, eps, norm, alpha=alpha)

    rows = []
    main = dict(common, save_adversarial=save_adversarial)
    ev = evaluate(abc_m, images, labels, key_parts={**base, "model": model_key(abc_m)}, label=abc_name, **main)
    rows.append(row(abc_name, "abc", ev))
    ev = evaluate(rbc_m, images, labels, key_parts={**base, "model": model_key(rbc_m)}, label=rbc_name, **main)
    rows.append(row(rbc_name, "rbc", ev))
    mixed_key = mixed_key_parts(card, abc_m, rbc_m, data)
    ev = evaluate(mixed, images, labels, key_parts=mixed_key, label="MixedNUTS", **main)
    nuts = row("MixedNUTS", "mixednuts", ev, alpha=card.alpha)
    alpha_lin, tried, target = matched_linear_alpha(
        ce, match_n=match_n, **dict(common, attack=match_attack, attack_options=match_options))
    ev = evaluate(MixedClassifier.linear(abc_m, rbc_m, alpha=alpha_lin), images, labels,
                  key_parts=linear_key_parts(abc_m, rbc_m, data, alpha_lin), label=f"linear alpha={alpha_lin}",
                  **main)
    rows.append(row(f"Linear mix (alpha={alpha_lin:.2f})", "linear", ev, alpha=alpha_lin))
    rows.append(nuts)

    report = Report(
        models=rows, card=card,
        dataset={"name": dataset_name, "split": "evaluation", "n": len(labels), "fingerprint": data.fingerprint,
                 "source": getattr(data, "source", ""),
                 "calibration": card.data},
        settings={"attack": attack, "eps": eps, "norm": norm, "seed": seed, "batch_size": batch_size,
                  "attack_options": attack_options or {}, "linear_alpha_search": tried,
                  "linear_alpha_match": {"attack": match_attack, "options": match_options,
                                         "n": min(match_n, len(labels)),
                                         "mixednuts_robust_accuracy": target},
                  "device": device, "adversarial_file": ADVERSARIAL_FILE if save_adversarial else None,
                  "seconds": None},
        adversarial=points,
    )
    report.notes = notes + [note for note in [shortfall_note(data, n, "--n")] if note is not None]
    if curve:
        from mixzoo.report import tradeoff_curve

        report.curve = tradeoff_curve(card, abc_m, rbc_m, data, cache=cache, attack=curve_attack, n=curve_n,
                                      eps=eps, norm=norm, seed=seed, batch_size=batch_size,
                                      attack_options=curve_options, data_dir=data_dir, device=device,
                                      progress=progress)
    report.settings["seconds"] = time.perf_counter() - t0
    report.run = run_record(device)
    if out is not None:
        from mixzoo.report import write_report

        write_report(report, Path(out), rbc=rbc_m, plots=plots, cache=cache, data_dir=data_dir, device=device)
    return report


def seconds_cell(m: ModelResult) -> str:
    """Attack seconds, saying where they were spent and whether this run read them from the cache."""
    where = m.device or "?"
    return f"{m.seconds:.0f} ({where}, cached)" if m.cached else f"{m.seconds:.0f} ({where})"


def ci_cell(value: float, ci: list[float], digits: int = 2) -> str:
    """``87.00 (84.8-89.0)``: a percentage with its 95 % interval, when the row has one."""
    return f"{100 * value:.{digits}f}" + (f" ({100 * ci[0]:.1f}-{100 * ci[1]:.1f})" if ci else "")


def comparison_lines(report: Report) -> list[str]:
    """One sentence per paired comparison of :meth:`Report.comparisons`."""
    lines = []
    for c in report.comparisons():
        parts = []
        for what in ("clean", "robust"):
            d = c.get(what)
            if d:
                parts.append(f"{what} {100 * d['difference']:+.2f} points (95% CI {100 * d['low']:+.2f} to "
                             f"{100 * d['high']:+.2f}; right only for {c['a']}: {d['a_only']}, only for the "
                             f"other: {d['b_only']})")
        if parts:
            lines.append(f"{c['a']} - {c['b']} ({c['b_kind']}), paired on the same {report.dataset['n']} images: "
                         + "; ".join(parts))
    return lines


def display_name(m: Any) -> str:
    """The row's name for an 80-column terminal: the base models prefixed with their role, the mixtures with
    their alpha (the kind and alpha columns of report.md, folded in)."""
    if m.kind in ("abc", "rbc"):
        return f"{m.kind.upper()} {m.name}"
    alpha = getattr(m, "alpha", None)
    if m.kind == "linear" and alpha is not None:
        return f"linear mix, α {alpha:.2f}"
    if m.kind == "mixednuts" and alpha is not None:
        return f"{m.name}, α {alpha:.3f}"
    return m.name


def terminal_seconds_cell(m: ModelResult, device: str) -> str:
    """Attack seconds; the device only when it is not the run's, and whether the row came from the cache."""
    tags = [t for t in (m.device if m.device and m.device != device else "", "cached" if m.cached else "") if t]
    return f"{m.seconds:.0f}" + (f" ({', '.join(tags)})" if tags else "")


def print_report(report: Report, *, to: Console | None = None) -> None:
    """The bench table in the terminal (or on the console ``to``), fitting 80 columns (report.md has the wide
    form)."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    to = to or console
    settings = report.settings
    device = settings.get("device", "")
    table = Table(title=f"{report.dataset['name']} evaluation, n={report.dataset['n']}: {settings['attack']} "
                        f"{settings['norm']} eps={settings['eps']:.4g} ({device})",
                  box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("model", "clean % (95% CI)", "robust % (95% CI)", "attack s"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for m in report.models:
        table.add_row(display_name(m), ci_cell(m.clean_accuracy, m.clean_ci, digits=1),
                      ci_cell(m.robust_accuracy, m.robust_ci, digits=1), terminal_seconds_cell(m, device))
    to.print(table)
    for line in comparison_lines(report):
        to.print(line, highlight=False)
    for m in report.models:
        for w in m.warnings:
            to.print(f"[yellow]warning ({escape(m.name)}): {escape(w)}")
    for note in report.notes:
        to.print(f"[yellow]note:[/yellow] {escape(note)}", highlight=False)
