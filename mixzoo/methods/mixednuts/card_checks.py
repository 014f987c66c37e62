"""The parts of a MixedNUTS card that only MixedNUTS reads, checked when the card loads (one-line errors naming
``SECTION.FIELD``): the search grid Algorithm 1 writes (Bai et al. 2024a, Alg. 1: ``s_values``, ``p_values``,
``c_values`` and the ``objectives`` / ``alphas`` over them) and the MMAA record ``[attack]`` with the calibration
data's size ``[data].n``, which ``mixzoo check``, bench and sanity use to re-run the calibration attack."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from mixzoo.core.card import field_error, plain_value

MMAA_KEYS = {"eps": "a positive number", "norm": "'Linf' or 'L2'", "n_iter": "a positive integer",
             "n_target_classes": "an integer >= 0", "n_restarts": "a positive integer", "seed": "an integer"}


def _is_int(v: Any, low: int | None = None) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and (low is None or v >= low)


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


def check_mmaa_record(card: Any, source: str) -> None:
    """The MMAA record ``mixzoo mix`` writes into ``[attack]`` (and the calibration size ``[data].n``), typed so
    that a hand-edited card fails on loading, not after an evaluation; cards without an MMAA record pass."""
    att, data = plain_value(card.attack), plain_value(card.data)  # an in-memory card may hold tensors or tuples
    if att.get("name") != "mmaa":
        return
    for key, want in MMAA_KEYS.items():
        v = att.get(key)
        ok = {"eps": isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v > 0,
              "norm": v in ("Linf", "L2"), "n_iter": _is_int(v, 1), "n_target_classes": _is_int(v, 0),
              "n_restarts": _is_int(v, 1), "seed": _is_int(v)}[key]
        if not ok:
            raise field_error(source, f"attack.{key}", want, v)
    for key in ("batch_size", "top_k"):
        if att.get(key) is not None and not _is_int(att[key], 1):
            raise field_error(source, f"attack.{key}", "a positive integer", att[key])
    if not _is_int(data.get("n"), 1):
        raise field_error(source, "data.n", "the number of calibration images", data.get("n"))


__all__ = ["MMAA_KEYS", "check_mmaa_record", "validate_grid"]
