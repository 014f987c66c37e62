"""The tables a MixedNUTS fit writes besides its section, checked when a card is made or loaded: the MMAA record
(``[attack]`` with ``name = "mmaa"`` and ``data.n``, which check, bench and sanity re-run) and Algorithm 1's search
grid (``[mixednuts.grid]``). One-line errors naming ``TABLE.FIELD`` (:func:`mixzoo.core.card.field_error`)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from mixzoo.core.card import field_error, is_int, plain_values

if TYPE_CHECKING:
    from mixzoo.core.card import MixCard

MMAA_KEYS = {"eps": "a positive number", "norm": "'Linf' or 'L2'", "n_iter": "a positive integer",
             "n_target_classes": "an integer >= 0", "n_restarts": "a positive integer", "seed": "an integer"}


def _mmaa_field_ok(key: str, v: Any) -> bool:
    if key == "eps":
        return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v > 0
    if key == "norm":
        return v in ("Linf", "L2")
    return is_int(v, {"n_iter": 1, "n_target_classes": 0, "n_restarts": 1, "seed": None}[key])


def check_mmaa_record(card: MixCard, source: str) -> None:
    """The MMAA record ``mixzoo mix`` writes (``attack.name = "mmaa"``): its threat model, its settings and the
    number of calibration images ``data.n``; a card with another attack record (or none) passes."""
    att, data = plain_values(card.attack), plain_values(card.data)  # an in-memory card may hold tensors or tuples
    if att.get("name") != "mmaa":
        return
    for key, want in MMAA_KEYS.items():
        if not _mmaa_field_ok(key, att.get(key)):
            raise field_error(source, f"attack.{key}", want, att.get(key))
    for key in ("batch_size", "top_k"):
        if att.get(key) is not None and not is_int(att[key], 1):
            raise field_error(source, f"attack.{key}", "a positive integer", att[key])
    if not is_int(data.get("n"), 1):
        raise field_error(source, "data.n", "the number of calibration images", data.get("n"))


def validate_grid(grid: dict[str, Any], source: str, section: str = "grid") -> None:
    """A search grid record (``s_values``, ``p_values``, ``c_values``, ``objectives`` / ``alphas`` as nested
    [s][p][c] lists), as Algorithm 1 writes it."""
    if not grid:
        return
    axes = ("s_values", "p_values", "c_values")
    lengths = []
    for key in axes:
        v = grid.get(key)
        if not (isinstance(v, list) and v and all(isinstance(x, int | float) for x in v)):
            raise field_error(source, f"{section}.{key}", "a non-empty list of numbers", v)
        lengths.append(len(v))
    for key in ("objectives", "alphas"):
        if key not in grid and key == "alphas":
            continue
        try:
            shape = list(np.shape(np.asarray(grid.get(key), dtype=float)))
        except (TypeError, ValueError):
            shape = None
        if shape != lengths:
            raise field_error(source, f"{section}.{key}", f"a {'x'.join(map(str, lengths))} nested list of numbers",
                              "another shape" if shape is not None else grid.get(key))


__all__ = ["MMAA_KEYS", "check_mmaa_record", "validate_grid"]
