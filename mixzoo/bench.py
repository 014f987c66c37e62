"""Evaluating mix cards: clean and robust accuracy of the ABC, the RBC and one row per card, any method.

Every row is attacked with the same attack (from the attack hook) on the same evaluation images, disjoint from the
calibration images; each card's row also with the extra attacks its method declares, worst case per example.
With one card, the baseline method (linear, the "Mixed" classifier of Bai et al.) gets the constant alpha that
matches the card's robust accuracy as closely as its alpha grid allows (paper 000 Fig. 5 / Fig. 8 comparison).
Each model's evaluation is saved per batch and resumes after an interruption; finished evaluations are reused
when nothing they depend on changed.
"""

from __future__ import annotations

import json
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

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

BENCH_CODE_VERSION = "bench-3"  # 2: warnings merged across batches; 3: adaptive-strong exact/bypass runs at --seed
ADV_SUFFIX = ".adv.safetensors"  # next to a cached outcome KEY.json: the points that broke its examples
ADVERSARIAL_FILE = "adversarial.safetensors"


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
    # the hardware of its batches (mixzoo.machine.machine_summary; " + "-joined when a resumed run changed machine,
    # "unknown" for outcomes cached before it was recorded); a cached row keeps the machine that computed it
    machine: str = ""
    cached: bool = False  # True when the row was read from the cache rather than attacked in this run
    clean_ci: list[float] = field(default_factory=list)  # 95 % Wilson interval (mixzoo.stats)
    robust_ci: list[float] = field(default_factory=list)
    # per evaluation image, in order: "1" correct, "0" not; kept so any two rows can be compared example by example
    clean_outcomes: str = ""
    robust_outcomes: str = ""
    # the mixing method and card of a mixed row (None for the base models): enough to rebuild its classifier
    method: str | None = None
    card: dict[str, Any] | None = None
    card_path: str | None = None


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
    # versions, git commit, machine and finish time of this run (mixzoo.machine.run_record)
    run: dict[str, Any] = field(default_factory=dict)
    cards: list[Any] = field(default_factory=list)

    def row(self, kind: str) -> ModelResult:
        return next(m for m in self.models if m.kind == kind)

    def mixed_rows(self) -> list[ModelResult]:
        """The rows of mixed classifiers (cards and the matched baseline), in table order."""
        return [m for m in self.models if m.kind not in ("abc", "rbc")]

    def comparisons(self) -> list[dict[str, Any]]:
        """Each card's row against the RBC, the matched baseline and every later card, then the baseline against
        the RBC; clean and robust, paired example by example on the same images
        (:func:`mixzoo.stats.paired_difference`: difference of accuracies, 95 % interval)."""
        from mixzoo.stats import paired_difference

        rbc = [m for m in self.models if m.kind == "rbc"]
        cards = [m for m in self.mixed_rows() if m.card is None or m.name not in self._baseline_names()]
        baselines = [m for m in self.mixed_rows() if m.name in self._baseline_names()]
        pairs = [(a, b) for i, a in enumerate(cards) for b in [*rbc, *baselines, *cards[i + 1:]]]
        pairs += [(a, b) for a in baselines for b in rbc]
        out = []
        for a, b in pairs:
            entry: dict[str, Any] = {"a": a.name, "b": b.name, "b_kind": b.kind}
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
            "models": [asdict(m) for m in self.models],
            "card": self.card.to_dict() if hasattr(self.card, "to_dict") else self.card,
            "cards": [c.to_dict() if hasattr(c, "to_dict") else c for c in self.cards],
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


def card_key_parts(card: Any, abc: nn.Module, rbc: nn.Module, data: Any) -> dict[str, Any]:
    """Cache key of a card's evaluation rows: the data, both models' weights and what the card's method says its
    classifier depends on (:meth:`mixzoo.methods.MixingMethod.key_parts`)."""
    return {"data": data.fingerprint, "abc": model_key(abc), "rbc": model_key(rbc),
            **card.mixing_method.key_parts(card)}


def mixed_key_parts(card: Any, abc: nn.Module, rbc: nn.Module, data: Any) -> dict[str, Any]:
    """Cache key of a mix card's evaluation rows (:func:`card_key_parts`; kept for scripts that use the name)."""
    return card_key_parts(card, abc, rbc, data)


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
            alpha: float | None = None, card: Any = None) -> ModelResult:
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
        method=None if card is None else card.method,
        card=None if card is None else card.to_dict(),
        card_path=None if card is None or card.path is None else str(card.path),
    )


BENCH_MATCH_ATTACK = "adaptive-apgd"  # what matches the baseline's alpha: cheaper than the main attack
BENCH_MATCH_OPTIONS: dict[str, Any] = {"n_iter": 25, "n_target_classes": 3}


def linear_alpha_grid(step: float = 0.01) -> list[float]:
    """Candidate constant mixing weights of the linear baseline, 1/2 ... 1 (paper footnote 1: alpha >= 1/2)."""
    from mixzoo.methods.linear import alpha_grid

    return alpha_grid(step)


def _bisect(robust: Any, n: int, target: float) -> int:
    """Index in ``0 .. n-1`` whose ``robust(i)`` is closest to ``target``, for ``robust`` growing with ``i``
    (about log2(n) calls; ties go to the larger index, the more robust)."""
    lo, hi = 0, n - 1
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
    return min({lo, hi}, key=lambda i: (abs(robust(i) - target), -i))


def match_linear_alpha(abc: nn.Module, rbc: nn.Module, images: torch.Tensor, labels: torch.Tensor,
                       target: float, *, attack: str, eps: float, norm: str, seed: int, batch_size: int,
                       cache: Cache, key_parts: dict[str, Any], attack_options: dict[str, Any] | None,
                       grid: list[float] | None = None, progress: bool = True) -> tuple[float, list[dict]]:
    """Bisection over the baseline method's alpha grid for the mixture whose robust accuracy is closest to
    ``target``.

    Robust accuracy of the linear mixture grows with alpha (more weight on the RBC), so a bisection over the grid
    needs about log2(51) = 6 evaluations; every evaluation tried is returned so the choice can be audited.
    """
    method = baseline_method()
    if method is None:
        raise InputError("no installed mixing method is marked as the bench's baseline; pass baseline=False")
    grid = grid or method.baseline_grid()
    tried: dict[int, float] = {}

    def robust(i: int) -> float:
        if i not in tried:
            c = method.card_at(grid[i])
            ev = evaluate(method.build(abc, rbc, c), images, labels, attack=attack, eps=eps, norm=norm, seed=seed,
                          batch_size=batch_size, cache=cache, key_parts={**key_parts, **method.key_parts(c)},
                          label=f"{method.name} alpha={grid[i]}", attack_options=attack_options, progress=progress)
            tried[i] = sum(ev["robust_correct"]) / len(ev["robust_correct"])
        return tried[i]

    best = _bisect(robust, len(grid), target)
    return grid[best], [{"alpha": grid[i], "robust_accuracy": r} for i, r in sorted(tried.items())]


def match_baseline(method: Any, template: Any, abc: nn.Module, rbc: nn.Module, data: Any, target: float, *,
                   attack: str, eps: float, norm: str, seed: int, batch_size: int, cache: Cache,
                   attack_options: dict[str, Any] | None, n: int | None = None,
                   progress: bool = True) -> tuple[Any, list[dict]]:
    """The card of the baseline method (``baseline = True``) whose robust accuracy under ``attack`` on the first
    ``n`` images of ``data`` is closest to ``target`` (:func:`match_linear_alpha`), for the pair of ``template``."""
    images, labels = data.images[:n], data.labels[:n]
    alpha, tried = match_linear_alpha(abc, rbc, images, labels, target, attack=attack, eps=eps, norm=norm, seed=seed,
                                      batch_size=batch_size, cache=cache, attack_options=attack_options,
                                      key_parts={"data": data.fingerprint, "abc": model_key(abc),
                                                 "rbc": model_key(rbc), "match_n": len(labels)},
                                      progress=progress)
    return method.card_at(alpha, template), tried


def baseline_method() -> Any | None:
    """The plugin method marked ``baseline`` (the bench's matched row), if exactly one is."""
    from mixzoo.plugins import mixing_methods

    found = [m for _, m in sorted(mixing_methods().items()) if getattr(m, "baseline", False)]
    return found[0] if len(found) == 1 else None


def matched_linear_alpha(ce: CardEvaluation, *, match_n: int, attack: str, eps: float, norm: str, seed: int,
                         batch_size: int, cache: Cache, attack_options: dict[str, Any] | None, progress: bool = True
                         ) -> tuple[float, list[dict], float]:
    """The linear baseline's alpha for a card: the card's robust accuracy under ``attack`` on the first
    ``match_n`` evaluation images, then :func:`match_linear_alpha` against it. Returns the alpha, every alpha tried
    and the target. ``mixzoo bench`` and ``mixzoo sanity`` share it, and so share its cached evaluations."""
    images, labels = ce.data.images[:match_n], ce.data.labels[:match_n]
    common = dict(attack=attack, eps=eps, norm=norm, seed=seed, batch_size=batch_size, cache=cache,
                  attack_options=attack_options, progress=progress)
    ev = evaluate(ce.mixed, images, labels, key_parts={**card_key_parts(ce.card, ce.abc, ce.rbc, ce.data),
                                                       "match_n": match_n},
                  label=f"{ce.card.mixing_method.title} (matching attack)", **common)
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
    """A :class:`~mixzoo.card.MixCard` from a card, a card file or a published card's name."""
    from mixzoo.card import MixCard

    return card if isinstance(card, MixCard) else MixCard.load(card)


def card_evaluation(card: Any, *, abc: str | nn.Module | None = None, rbc: str | nn.Module | None = None,
                    eps: float | None = None, norm: str | None = None, n: int = 1000, data_dir: str | None = None,
                    device: str = "cpu", allow_unsafe: bool = False) -> CardEvaluation:
    """Load what evaluating ``card`` needs: the ABC and RBC (:func:`~mixzoo.pipeline.card_models`), the card's
    mixed classifier (its method's ``build``), eps and norm (given, else the card's attack, else the RBC's threat
    model) and the first ``n`` evaluation images, refusing models that cannot classify them."""
    from mixzoo.data import load_dataset
    from mixzoo.mixing import weight_mismatches

    card = load_card(card)
    abc_m, rbc_m = card_models(card, abc, rbc, device=device, allow_unsafe=allow_unsafe)
    notes = weight_mismatches(card, abc_m, rbc_m)
    for note in notes:
        warnings.warn(note, stacklevel=3)
    mixed = card.mixing_method.build(abc_m, rbc_m, card)
    attack = card.attack or {}
    eps, norm = _default_attack_setting(rbc_m, attack.get("eps") if eps is None else eps,
                                        attack.get("norm") if norm is None else norm)
    data = load_dataset(card_dataset(card, rbc_m), "evaluation", n=n, root=data_dir)
    top_k = card.params.get("top_k")
    if top_k is not None and top_k > data.num_classes:
        raise InputError(f"the card's top_k ({top_k}) exceeds the {data.num_classes} classes of {data.name!r};"
                         " it was calibrated for another task")
    check_model_fits(abc_m, data, "ABC")
    check_model_fits(rbc_m, data, "RBC")
    return CardEvaluation(card, abc_m, rbc_m, mixed, data, eps, norm, notes)


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
    merged = {**ev, "robust_correct": robust, "seconds": ev["seconds"] + extra["seconds"],
              "components": [*ev["components"], {"name": name, "newly_broken": broken, "seconds": extra["seconds"]}],
              "warnings": [*ev["warnings"], *(f"{name}: {w}" for w in extra["warnings"])],
              "cached": bool(ev.get("cached")) and bool(extra.get("cached"))}
    if "adversarial" in ev:
        pts = extra["adversarial"]
        index = subset[pts["index"]] if len(pts["index"]) else pts["index"]
        merged["adversarial"] = {"index": torch.cat([ev["adversarial"]["index"], index]).long(),
                                 "images": torch.cat([ev["adversarial"]["images"], pts["images"]])}
    return merged


def evaluate_card(card: Any, abc: nn.Module, rbc: nn.Module, data: Any, *, label: str,
                  extra_attacks: bool = True, **common: Any) -> dict[str, Any]:
    """A card's classifier under the shared attack, then under each extra attack its method declares
    (:meth:`~mixzoo.methods.MixingMethod.extra_attacks`) on the examples still robust, merged per example."""
    method = card.mixing_method
    key = card_key_parts(card, abc, rbc, data)
    ev = evaluate(method.build(abc, rbc, card), data.images, data.labels, key_parts=key, label=label, **common)
    if not extra_attacks:
        return ev
    for extra in method.extra_attacks(card):
        subset = torch.tensor([i for i, ok in enumerate(ev["robust_correct"]) if ok], dtype=torch.long)
        if not len(subset):
            break
        options = {**common, "attack": extra.attack, "attack_options": dict(extra.options)}
        sub = evaluate(method.build(abc, rbc, card, gradient=extra.gradient), data.images[subset],
                       data.labels[subset], key_parts={**key, "extra": extra.name, "gradient": extra.gradient,
                                                       "subset": content_key({"rows": subset.tolist()})},
                       label=f"{label}: {extra.name}", **options)
        ev = worst_case(ev, sub, subset, extra.name)
    return ev


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
    baseline: bool = True,
    extra_attacks: bool = True,
    plots: bool = True,
    save_adversarial: bool = False,
    data_dir: str | None = None,
    cache_dir: str | Path | None = None,
    use_cache: bool = True,
    device: str = "cpu",
    allow_unsafe: bool = False,
    progress: bool = True,
) -> Report:
    """Clean and robust accuracy of the ABC, the RBC and one row per mix card on the evaluation split.

    ``card`` is a :class:`~mixzoo.card.MixCard`, a card file, a published card's name, or a list of them (cards
    of one pair, any methods); without a card the pair (default: the built-in Fashion-MNIST pair) is fitted first
    with the default method. Every row is attacked with ``attack`` on the same images; each card's row also with
    the extra attacks its method declares (on the examples still robust; ``extra_attacks=False`` skips them), and
    reports the worst case per example. Writes ``report.json``, ``report.md`` and plots to ``out`` when given.

    With one card whose method is not the baseline method (``baseline = True``: linear), a matched baseline row
    is added (``baseline``): its alpha is found by bisection with ``match_attack`` (``match_options``, cheaper than
    the main attack) on the first ``match_n`` images against the card's robust accuracy under that same attack,
    then evaluated like the other rows. The card's method may add a trade-off curve (``curve_attack`` /
    ``curve_options`` on ``curve_n`` images) and figures.

    ``save_adversarial`` keeps, for each row, the point that broke each broken example and writes them to
    ``adversarial.safetensors`` next to the report, so anyone can check the robust errors without attacking
    (:func:`mixzoo.verify.verify_report`, ``mixzoo verify``).
    """
    curve_options = {"n_iter": 25, "n_target_classes": 3} if curve_options is None else curve_options
    match_options = dict(BENCH_MATCH_OPTIONS) if match_options is None else match_options
    from mixzoo.data import shortfall_note

    check_run_settings(n, batch_size, device, attack, attack_options, out)
    if curve and curve_n <= 0:
        raise InputError(f"--curve-n must be positive, got {curve_n} (or pass --no-curve)")
    t0 = time.perf_counter()
    if card is None:
        from mixzoo.methods import fit

        card = fit(None, abc, rbc, cache_dir=cache_dir, use_cache=use_cache, device=device, data_dir=data_dir,
                   allow_unsafe=allow_unsafe, progress=progress, eps=eps, norm=norm, seed=seed).card
    cards = [load_card(c) for c in (card if isinstance(card, list | tuple) else [card])]
    if not cards:
        raise InputError("no mix card to bench; pass one or more cards (files or published names)")
    if abc is None and rbc is None:
        _same_pair(cards)
    ce = card_evaluation(cards[0], abc=abc, rbc=rbc, eps=eps, norm=norm, n=n, data_dir=data_dir, device=device,
                         allow_unsafe=allow_unsafe)
    abc_m, rbc_m, data, eps, norm = ce.abc, ce.rbc, ce.data, ce.eps, ce.norm
    notes = list(ce.notes)  # the report must say so, not only the terminal
    from mixzoo.mixing import weight_mismatches

    for other in cards[1:]:
        notes += weight_mismatches(other, abc_m, rbc_m)
    cache = Cache(cache_dir, enabled=use_cache)
    images, labels = data.images, data.labels
    base = {"data": data.fingerprint}
    common = dict(attack=attack, eps=eps, norm=norm, seed=seed, batch_size=batch_size, cache=cache,
                  attack_options=attack_options, progress=progress)
    # rows are labelled with the models actually evaluated (an --abc/--rbc override, not the card's names)
    abc_name, rbc_name = _evaluated_name(abc_m, cards[0].abc, "ABC"), _evaluated_name(rbc_m, cards[0].rbc, "RBC")
    points: dict[str, dict[str, torch.Tensor]] = {}

    def row(name: str, kind: str, ev: dict[str, Any], alpha: float | None = None, c: Any = None) -> ModelResult:
        if save_adversarial:
            points[kind] = ev["adversarial"]
        return _result(name, kind, ev, attack, eps, norm, alpha=alpha, card=c)

    rows = []
    main = dict(common, save_adversarial=save_adversarial)
    ev = evaluate(abc_m, images, labels, key_parts={**base, "model": model_key(abc_m)}, label=abc_name, **main)
    rows.append(row(abc_name, "abc", ev))
    ev = evaluate(rbc_m, images, labels, key_parts={**base, "model": model_key(rbc_m)}, label=rbc_name, **main)
    rows.append(row(rbc_name, "rbc", ev))
    card_rows, kinds = [], {"abc", "rbc"}
    for c in cards:
        method = c.mixing_method
        kind = method.name if method.name not in kinds else f"{method.name}-{len(kinds) - 1}"
        kinds.add(kind)
        title = method.title or method.name
        label = title if len(cards) == 1 else f"{title} ({c.path.stem if c.path else kind})"
        ev = evaluate_card(c, abc_m, rbc_m, data, label=label, extra_attacks=extra_attacks, **main)
        card_rows.append(row(label, kind, ev, alpha=c.params.get("alpha"), c=c))
    settings: dict[str, Any] = {"attack": attack, "eps": eps, "norm": norm, "seed": seed, "batch_size": batch_size,
                                "attack_options": attack_options or {}, "extra_attacks": extra_attacks,
                                "device": device, "adversarial_file": ADVERSARIAL_FILE if save_adversarial else None,
                                "seconds": None}
    lin = baseline_method()
    if baseline and len(cards) == 1 and lin is not None and cards[0].method != lin.name and lin.name not in kinds:
        alpha_lin, tried, target = matched_linear_alpha(
            ce, match_n=match_n, **dict(common, attack=match_attack, attack_options=match_options))
        lin_card = lin.card_at(alpha_lin, cards[0])
        ev = evaluate_card(lin_card, abc_m, rbc_m, data, label=f"{lin.title} alpha={alpha_lin}",
                           extra_attacks=extra_attacks, **main)
        rows.append(row(f"{lin.title} (alpha={alpha_lin:.2f})", lin.name, ev, alpha=alpha_lin, c=lin_card))
        settings.update(linear_alpha_search=tried, linear_alpha_match={
            "attack": match_attack, "options": match_options, "n": min(match_n, len(labels)),
            "card": card_rows[0].name, "target_robust_accuracy": target})
    rows += card_rows

    report = Report(
        models=rows, card=cards[0], cards=cards,
        dataset={"name": data.name, "split": "evaluation", "n": len(labels), "fingerprint": data.fingerprint,
                 "source": getattr(data, "source", ""), "calibration": cards[0].data},
        settings=settings, adversarial=points,
    )
    report.notes = notes + [note for note in [shortfall_note(data, n, "--n")] if note is not None]
    make_curve = getattr(cards[0].mixing_method, "tradeoff_curve", None)
    if curve and make_curve is not None:
        report.curve = make_curve(cards[0], abc_m, rbc_m, data, cache=cache, attack=curve_attack, n=curve_n,
                                  eps=eps, norm=norm, seed=seed, batch_size=batch_size,
                                  attack_options=curve_options, data_dir=data_dir, device=device,
                                  progress=progress)
    report.settings["seconds"] = time.perf_counter() - t0
    report.run = run_record(device)
    if out is not None:
        from mixzoo.report import write_report

        write_report(report, Path(out), rbc=rbc_m, plots=plots, cache=cache, data_dir=data_dir, device=device)
    return report


def _evaluated_name(model: nn.Module, recorded: dict[str, Any], role: str) -> str:
    """The name of the model a row evaluated: its registry name, else what the card recorded."""
    spec = getattr(model, "spec", None)
    return spec.name if spec is not None else recorded.get("name", role)


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
    return m.name if alpha is None or "alpha" in m.name else f"{m.name}, α {alpha:.3f}"


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
