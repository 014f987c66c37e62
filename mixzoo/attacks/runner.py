"""Running an attack plugin over a data set, batch by batch, with every batch's outcome cached
(:mod:`mixzoo.attacks.outcome_cache`) so an interrupted run resumes and a finished one is reused when nothing it
depends on changed. Shared by the bench, the eps sweep, the methods that fit against an attack (the linear
baseline's alpha matching) and MixedNUTS's trade-off curve.
"""

from __future__ import annotations

import contextvars
import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from mixzoo.attacks.outcome_cache import cached_part, write_outcome
from mixzoo.attacks.precision import resolve_precision
from mixzoo.attacks.result import Outcome, merge_own, outcome_text
from mixzoo.core.cache import content_key
from mixzoo.core.checks import naming_model
from mixzoo.core.distributed import check_shards, gather, world
from mixzoo.core.errors import InputError
from mixzoo.core.machine import machine_summary
from mixzoo.core.progress import progress_bar
from mixzoo.core.request import EvalRequest
from mixzoo.zoo.pairs import model_device

# Part of every cached outcome's key: it changes whenever the bench would compute other outcomes for the same
# models, data and attack (components, layer norm, how random numbers are drawn), so older outcomes are not reused.
BENCH_CODE_VERSION = "bench-6"
BF16_COUNTS = ("found_bf16", "confirmed_float32", "rerun_float32")  # a bf16 component's record has these


_CACHE_ONLY: contextvars.ContextVar[bool] = contextvars.ContextVar("mixzoo_cache_only", default=False)


class NotCached(Exception):  # noqa: N818 - a plan's control flow, not an error a user sees
    """What :func:`evaluate` raises inside :func:`cache_only` when the cache does not hold the finished evaluation."""


@contextmanager
def cache_only() -> Iterator[None]:
    """Within it :func:`evaluate` returns finished evaluations from the cache and raises :class:`NotCached` instead
    of attacking (nothing is attacked or written): a plan replays a composite evaluation (the matched baseline's
    search) to learn whether the cache holds all of it, and its result when it does."""
    token = _CACHE_ONLY.set(True)
    try:
        yield
    finally:
        _CACHE_ONLY.reset(token)


def evaluate(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, request: EvalRequest) -> Outcome:
    """Attack ``model`` batch by batch as ``request`` (:class:`~mixzoo.core.request.EvalRequest`) asks, each batch's
    outcome cached so an interrupted run resumes; returns an :class:`~mixzoo.attacks.result.Outcome`.

    The attack comes from the attack hook by the request's record (attack, options, eps, norm, seed, batch size,
    per-example seeds, precision). ``request.save_adversarial`` adds ``adversarial`` (``{"index", "images"}``: the
    point found for each broken example, kept beside the cached outcome; one cached without them is attacked
    again). ``request.example_index``: the images' indices in their data set (default ``0 .. n-1``).

    Per-example seeds (the record's default): the components that support it
    (:attr:`mixzoo.attacks.base.Component.per_example`: our APGD-CE / APGD-T, Square, FAB-T with its single restart)
    draw their randomness per example (:mod:`mixzoo.core.rng`), so an example's outcome is the same for any batch
    size and number of processes; the others (pyautoattack's APGD in ``autoattack``, ``autoattack-standard``, PGD)
    follow their batch's stream and say so in the warnings. Without them batch ``k`` is attacked with seed
    ``seed + k``.

    Precision ``bf16`` runs under bfloat16 autocast with float32 confirmation of every break
    (:meth:`mixzoo.attacks.base.Attack.run`), is part of the cache key and adds ``found_bf16`` and
    ``confirmed_float32`` to each component's record; an attack whose ``run()`` takes no ``precision`` is refused.
    """
    request, key, legacy = plan_evaluation(request, images.device)
    n, record = len(labels), request.record
    hit = _whole_hit(request, key, n)
    if hit is not None:
        return Outcome.of(hit)
    if _CACHE_ONLY.get():
        raise NotCached(f"{record.attack} on {request.label or 'a model'}: not in the cache")
    parts, found = _run_batches(model, images, labels, request, key)
    n_batches = -(-n // record.batch_size)
    merged = merge_outcomes([parts[i] for i in range(n_batches)], record.precision)
    if legacy:
        merged["warnings"].append(f"attack {record.attack!r} cannot draw its randomness per example (its run() takes"
                                  " no index): batch k was attacked with seed + k, so results depend on the batch"
                                  " size")
    adversarial = None
    if request.save_adversarial:
        points = [found[i] for i in range(n_batches)]
        adversarial = {"index": torch.cat([p["index"] for p in points]).long(),
                       "images": torch.cat([p["images"] for p in points])}
    write_outcome(request.cache, key, merged, adversarial)
    return Outcome.of({**merged, "adversarial": adversarial})


def plan_evaluation(request: EvalRequest, device: torch.device | str) -> tuple[EvalRequest, str, bool]:
    """``request`` resolved against its attack plugin: the request whose record has the concrete precision and the
    per-example seeds the attack draws with, its cache key, and whether per-example seeds were asked for but the
    attack's ``run()`` takes no index (batch seeds, said in the warnings); a one-line error for a precision the
    attack cannot run in."""
    from mixzoo.core.plugins import lookup

    record = request.record
    attack_cls = lookup("attack", record.attack)
    params = inspect.signature(attack_cls.run).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    precision = resolve_precision(record.precision, device)  # "auto": the concrete policy, cached and recorded
    if precision != "float32" and "precision" not in params and not takes_any:
        raise InputError(f"attack {record.attack!r} cannot run in {precision} (its run() takes no precision); use"
                         " --precision float32")
    legacy = record.per_example_seeds and "index" not in params and not takes_any
    per_example_seeds = record.per_example_seeds and not legacy
    key = content_key({**request.key_parts, "attack": record.attack, "eps": record.eps, "norm": record.norm,
                       "seed": record.seed, "batch_size": record.batch_size, "options": record.options(),
                       "code": BENCH_CODE_VERSION,
                       **({"per_example_seeds": True} if per_example_seeds else {}),
                       **({"precision": precision} if precision != "float32" else {}),
                       **({"attack_code": attack_cls.code_version} if getattr(attack_cls, "code_version", None)
                          else {})})
    return request.replace(precision=precision, per_example_seeds=per_example_seeds), key, legacy


def cached_outcome(request: EvalRequest, n: int, device: torch.device | str = "cpu") -> Outcome | None:
    """The whole outcome :func:`evaluate` would return for the first ``n`` examples under ``request`` without
    attacking (its cache holds the finished evaluation), else ``None``; reads the cache, writes nothing."""
    request, key, _ = plan_evaluation(request, device)
    hit = cached_part(request, key, 0, n)
    return None if hit is None else Outcome.of({**hit, "cached": True})


def cached_examples(request: EvalRequest, n: int, device: torch.device | str = "cpu") -> int:
    """How many of the first ``n`` examples :func:`evaluate` would read from the cache under ``request`` rather than
    attack: all of them when the finished evaluation is cached, else those of the batches an interrupted run
    saved (the same cache key and the same files :func:`evaluate` reads; nothing is written). A plan counts only
    the others (:func:`mixzoo.evaluation.plan.plan_bench`)."""
    if not request.cache.enabled or n <= 0:
        return 0
    request, key, _ = plan_evaluation(request, device)
    if cached_part(request, key, 0, n) is not None:
        return n
    size = request.record.batch_size
    return sum(min(n, start + size) - start for index, start in enumerate(range(0, n, size))
               if cached_part(request, key, start, min(n, start + size), index) is not None)


def _whole_hit(request: EvalRequest, key: str, n: int) -> dict[str, Any] | None:
    """The whole evaluation from the cache, when every torchrun rank has it (the attack is collective: every rank
    must take the same path; e.g. a shared cache directory), else ``None``."""
    hit = cached_part(request, key, 0, n)
    if world().size > 1 and not all(gather(hit is not None)):
        return None
    return None if hit is None else {**hit, "cached": True}


def _run_batches(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, request: EvalRequest, key: str
                 ) -> tuple[dict[int, dict[str, Any]], dict[int, dict[str, torch.Tensor]]]:
    """Every batch's outcome (and, with ``save_adversarial``, its points), from the cache or attacked; under
    torchrun batch k is attacked by rank k mod size and every rank gets every batch's outcome."""
    w, n, size, what = world(), len(labels), request.record.batch_size, f"{request.record.attack} on {request.label}"
    parts: dict[int, dict[str, Any]] = {}
    found: dict[int, dict[str, torch.Tensor]] = {}
    with progress_bar(request.progress and w.main) as bar:
        task = bar.add_task(what, total=n)
        for index, start in enumerate(range(0, n, size)):
            stop = min(n, start + size)
            part, points = _batch(model, images, labels, request, key, index, start, stop)
            if part is not None:
                parts[index] = part
                if request.save_adversarial:
                    found[index] = points
                bar.advance(task, stop - start)
        if w.size > 1:  # every rank gets every batch's outcome (the same merged result everywhere)
            for other_parts, other_found in gather((parts, found)):
                parts.update(other_parts)
                found.update(other_found)
            bar.update(task, completed=n)
    check_shards(parts, n, size, what)
    return parts, found


def _batch(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, request: EvalRequest, key: str,
           index: int, start: int, stop: int) -> tuple[dict[str, Any] | None, Any]:
    """Batch ``index`` (images ``start:stop``): its cached outcome, else attacked when this rank owns it (and
    cached), else ``(None, None)``."""
    part = cached_part(request, key, start, stop, index)
    if part is not None:
        return part, part.pop("adversarial", None)
    if not world().owns(index):  # under torchrun: batch k is attacked by rank k mod size
        return None, None
    attack_batch = naming_model(request.label, _attack_batch)  # a NaN-logits error names the model
    part, points = attack_batch(model, images, labels, start, stop, index, request)
    write_outcome(request.cache, key, part, points if request.save_adversarial else None, index)
    return part, points


def merge_outcomes(batches: list[dict[str, Any]], precision: str) -> dict[str, Any]:
    """One outcome of the whole evaluation from its batches' outcomes, in batch order."""
    merged: dict[str, Any] = {
        "clean_correct": [v for b in batches for v in b["clean_correct"]],
        "robust_correct": [v for b in batches for v in b["robust_correct"]],
        "seconds": sum(b["seconds"] for b in batches),
        "device": "+".join(sorted({b.get("device", "unknown") for b in batches})),
        "machine": " + ".join(dict.fromkeys(b.get("machine", "unknown") for b in batches)),  # in batch order
        "components": [],
        "precision": precision,
    }
    names = [c["name"] for c in batches[0]["components"]]
    for name in names:
        parts = [c for b in batches for c in b["components"] if c["name"] == name]
        merged["components"].append({
            "name": name,
            "newly_broken": sum(c["newly_broken"] for c in parts),
            "seconds": sum(c["seconds"] for c in parts),
            # a clean-scope component's stand-alone outcomes and its own breaks counted from them
            **merge_own(batches, name),
            # bf16 runs: candidates bfloat16 saw as broken, those the float32 output confirmed, and the breaks of
            # the float32 re-run on the dropped ones
            **({k: sum(c.get(k, 0) for c in parts) for k in BF16_COUNTS}
               if all("found_bf16" in c for c in parts) else {}),
        })
    merged["warnings"] = merge_warnings([b["warnings"] for b in batches], merged["components"])
    return merged


def _attack_batch(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, start: int, stop: int,
                  batch_index: int, request: EvalRequest) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """Attack images ``start:stop`` (batch number ``batch_index``): its outcome record and, with
    ``save_adversarial``, the points that broke its examples (indices into ``images``)."""
    from mixzoo.core.plugins import lookup

    record, example_index = request.record, request.example_index
    per_example_seeds, precision = record.per_example_seeds, record.precision
    runner = lookup("attack", record.attack)(eps=record.eps, norm=record.norm, seed=record.seed if per_example_seeds
                                             else record.seed + batch_index, **record.options())
    device = model_device(model)
    extra = {"index": torch.arange(start, stop) if example_index is None
             else example_index[start:stop].long().cpu()} if per_example_seeds else {}
    if precision != "float32":
        extra["precision"] = precision
    res = runner.run(model, images[start:stop].to(device), labels[start:stop].to(device), progress=False, **extra)
    part = {
        "clean_correct": res.clean_correct.bool().tolist(),
        "robust_correct": res.robust_correct.bool().tolist(),
        "components": [{"name": c.name, "newly_broken": int(c.newly_broken), "seconds": c.seconds,
                        **({} if c.own_correct is None else {"own_outcomes": outcome_text(c.own_correct)}),
                        **({} if c.own_broken is None or c.own_correct is not None else
                           {"own_broken": int(c.own_broken)}),
                        **({} if getattr(c, "found_bf16", None) is None else
                           {"found_bf16": int(c.found_bf16), "confirmed_float32": int(c.confirmed_float32),
                            "rerun_float32": int(c.rerun_float32 or 0)})}
                       for c in res.components],
        "warnings": list(res.warnings),
        "seconds": res.seconds,
        "device": device.type,
        "machine": machine_summary(device),
    }
    points: dict[str, torch.Tensor] = {}
    if request.save_adversarial:
        broken = torch.nonzero(res.clean_correct.bool() & ~res.robust_correct.bool()).squeeze(1)
        points = {"index": broken + start, "images": res.adv_images[broken.to(res.adv_images.device)].cpu()}
    return part, points


def merge_warnings(per_batch: list[list[str]], components: list[dict[str, Any]]) -> list[str]:
    """One list of warnings for a whole evaluation from the per-batch lists.

    The Square gradient-masking warning is recomputed from the summed component counts (per batch it would read
    "Square broke 1 ..." several times); any other warning seen in several batches says in how many.
    """
    from collections import Counter

    from mixzoo.attacks.base import SQUARE_MASKING, square_masking_note

    counts = Counter(w for ws in per_batch for w in ws if not w.startswith(SQUARE_MASKING))
    out = [w if k == 1 else f"{w} (in {k} of {len(per_batch)} batches)" for w, k in sorted(counts.items())]
    square = sum(c["newly_broken"] for c in components if c["name"] == "square")
    if square and len(components) > 1:
        out.insert(0, square_masking_note(square))
    return out

