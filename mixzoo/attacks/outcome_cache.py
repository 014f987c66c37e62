"""The cache of attack outcomes (:func:`mixzoo.attacks.runner.evaluate`): where the outcome of an evaluation is
kept (``bench/KEY.json``, each batch's in ``bench/KEY.partial/`` while it is under way, the points that broke its
examples beside it in ``KEY.adv.safetensors``), sealed with a digest on writing and checked on every read, so that
an interrupted run resumes and a finished one is reused only when it is an untouched outcome of the asked examples.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from mixzoo.attacks.result import own_problem
from mixzoo.core.cache import Cache, atomic_save_tensors, atomic_write_text, stale_entry
from mixzoo.core.errors import InputError
from mixzoo.core.reading import read_data
from mixzoo.core.record import sha256_of
from mixzoo.core.request import EvalRequest

KIND = "bench"  # the cache's folder of outcomes
ADV_SUFFIX = ".adv.safetensors"  # next to a cached outcome KEY.json: the points that broke its examples


def outcome_path(cache: Cache, key: str, batch: int | None = None) -> Path:
    """Where the outcome under cache key ``key`` is kept: the whole evaluation's, or batch ``batch``'s while it is
    under way."""
    if batch is None:
        return cache.path(KIND, key).with_suffix(".json")
    return cache.partial_dir(KIND, key) / f"{batch:06d}.json"


def cached_part(request: EvalRequest, key: str, start: int, stop: int,
                batch: int | None = None) -> dict[str, Any] | None:
    """The cached outcome of examples ``start:stop`` under cache key ``key`` (the whole evaluation's, or batch
    ``batch``'s) as :func:`~mixzoo.attacks.runner.evaluate` would read it (with its saved points when ``request``
    keeps them), else ``None``."""
    path = outcome_path(request.cache, key, batch)
    adv = path.with_suffix(ADV_SUFFIX)
    if not request.cache.enabled or not path.exists() or (request.save_adversarial and not adv.exists()):
        return None
    return read_outcome(path, key, start, stop, adv if request.save_adversarial else None)


def write_outcome(cache: Cache, key: str, entry: dict[str, Any], points: dict[str, torch.Tensor] | None,
                  batch: int | None = None) -> None:
    """Keep ``entry``, the outcome under ``key`` (the whole evaluation's, or batch ``batch``'s), sealed
    (:func:`sealed`), with ``points`` (``{"index", "images"}``) when given, written first: an outcome counts as done
    once it is written. The whole evaluation's replaces its batches'. Nothing is written when the cache is off."""
    if not cache.enabled:
        return
    path = outcome_path(cache, key, batch)
    if points is not None:
        atomic_save_tensors(path.with_suffix(ADV_SUFFIX), points)
    atomic_write_text(path, sealed(entry, key))
    if batch is None:
        cache.drop_partial(KIND, key)


def read_outcome(path: Path, key: str, start: int, stop: int,
                 adv_path: Path | None = None) -> dict[str, Any] | None:
    """A cached outcome of examples ``start:stop`` under cache key ``key``, or ``None`` (a miss: the caller attacks
    again) when the file is unreadable, was written for another key, or does not have the shape of an outcome of
    those examples; a file that exists but is refused gets one warning naming it.

    An outcome is also refused when its content does not match the digest written with it (an edit or damage), or
    its parts disagree: an example robust but not clean, or (with ``adv_path``) saved points that are not one per
    broken example. A forged outcome with a recomputed digest is not caught here: ``mixzoo verify --recheck``
    attacks again without the cache.
    """
    try:
        entry = read_data(path, "json", what="cache entry")
        problem = outcome_problem(entry, key, stop - start)
        if problem is None and adv_path is not None:
            points = load_file(adv_path)
            broken = [i + start for i, (c, r) in enumerate(zip(entry["clean_correct"], entry["robust_correct"],
                                                               strict=True)) if c and not r]
            if set(points) != {"index", "images"} or points["index"].tolist() != broken:
                problem = f"its saved points {adv_path.name} are not one per broken example"
            else:
                entry["adversarial"] = points
    except (OSError, SafetensorError) as exc:
        problem = f"it cannot be read ({type(exc).__name__})"
    except InputError as exc:  # too large, not text, not JSON, nested too deep, a key twice
        problem = f"it cannot be read ({str(exc).removeprefix(f'cache entry {path} ').removeprefix(str(path) + ': ')})"
    if problem is None:
        return {k: v for k, v in entry.items() if k not in ("key", "digest")}
    stale_entry(path, problem)
    return None


def outcome_problem(entry: Any, key: str, n: int) -> str | None:
    """Why ``entry`` is not a cached outcome of ``n`` examples under cache key ``key`` (``None`` when it is)."""
    if not isinstance(entry, dict):
        return f"it is a JSON {type(entry).__name__}, not an object"
    if entry.get("key") != key:
        return "it was written for other settings (its key differs)"
    flags = {}
    for field in ("clean_correct", "robust_correct"):
        value = entry.get(field)
        if not isinstance(value, list) or len(value) != n or not all(isinstance(v, bool) for v in value):
            return f"{field} is not {n} true/false values"
        flags[field] = value
    if any(r and not c for c, r in zip(flags["clean_correct"], flags["robust_correct"], strict=True)):
        return "an example is robust but not clean"
    components = entry.get("components")
    if not isinstance(components, list) or not all(
            isinstance(c, dict) and isinstance(c.get("name"), str) and type(c.get("newly_broken")) is int
            and c["newly_broken"] >= 0 and _is_seconds(c.get("seconds")) for c in components):
        return "components is not a list of {name, newly_broken, seconds}"
    if own := [p for c in components if (p := own_problem(c, flags["clean_correct"], flags["robust_correct"]))]:
        return own[0]
    broken = sum(c and not r for c, r in zip(flags["clean_correct"], flags["robust_correct"], strict=True))
    if sum(c["newly_broken"] for c in components) != broken:
        return f"its components broke {sum(c['newly_broken'] for c in components)} examples, its outcomes {broken}"
    if not isinstance(entry.get("warnings"), list) or not all(isinstance(w, str) for w in entry["warnings"]):
        return "warnings is not a list of strings"
    if not _is_seconds(entry.get("seconds")):
        return "seconds is not a number of seconds"
    if entry.get("digest") != outcome_digest(entry, key):
        return "its content does not match its digest (edited or damaged)"
    return None


def outcome_digest(entry: dict[str, Any], key: str) -> str:
    """sha256 of a cached outcome's content (every field but ``digest``) and its cache key: written with the entry
    and checked on every read, so an entry edited or damaged after it was written is a miss."""
    body = {k: v for k, v in entry.items() if k not in ("digest", "cached", "adversarial")}
    return sha256_of({"key": key, "entry": body})


def sealed(entry: dict[str, Any], key: str) -> str:
    """The JSON text of a cached outcome, with its key and the digest :func:`read_outcome` checks."""
    body = {**entry, "key": key}
    return json.dumps({**body, "digest": outcome_digest(body, key)})


def _is_seconds(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value) and value >= 0
