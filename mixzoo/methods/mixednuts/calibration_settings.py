"""The settings of Algorithm 1 (:func:`mixzoo.methods.mixednuts.calibrate.calibrate`) and their checks."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

import torch

from mixzoo.core.errors import InputError
from mixzoo.methods.mixednuts.calibration_problem import DEFAULT_CHUNK, check_search
from mixzoo.methods.mixednuts.grid import Grid
from mixzoo.methods.mixednuts.transforms import check_top_k, get_clamp


def check_settings(*, beta: float, clamp: str, objective: str, optimizer: str, grid: Grid | None,
                   top_k: int | None = None, search: str = "mixzoo") -> None:
    """One-line :class:`InputError` for a bad Algorithm 1 setting; callers run it before any expensive attack."""
    from mixzoo.core.plugins import lookup

    if not isinstance(beta, int | float) or not 0.0 <= beta <= 1.0:
        raise InputError(f"beta must lie in [0, 1], got {beta}")
    check_search(search, optimizer)
    check_top_k(top_k)
    if objective not in ("standard", "relaxed"):
        raise InputError(f"objective must be 'standard' or 'relaxed', got {objective!r}")
    if grid is not None and not isinstance(grid, Grid):
        raise InputError(f"grid must be a mixzoo.methods.mixednuts.calibrate.Grid, got {type(grid).__name__}")
    if not isinstance(clamp, str):
        raise InputError(f"clamp must be a clamp name (it is recorded in the card), got {type(clamp).__name__}")
    get_clamp(clamp)  # unknown names fail here with suggestions
    lookup("optimizer", optimizer)


@dataclass(frozen=True)
class CalibrationSettings:
    """The knobs of :func:`calibrate` (its docstring says what each does)."""

    beta: float = 0.985
    clamp: str = "gelu"
    top_k: int | None = None
    grid: Grid | None = None
    objective: str = "standard"
    optimizer: str = "grid"
    linear: bool = False
    max_argmax_change: float | None = 0.005
    chunk_size: int = DEFAULT_CHUNK
    dtype: torch.dtype = torch.float32
    progress: bool = False
    search: str = "mixzoo"
    more_images: bool = True


@dataclass(frozen=True)
class CardRecords:
    """What :func:`calibrate` records in the card besides the fit: the models (``{name, weight_hash}`` dicts or the
    models themselves), the dataset, and the data and attack records."""

    abc: Any = None
    rbc: Any = None
    dataset: str | None = None
    data_info: dict[str, Any] | None = None
    attack_info: dict[str, Any] | None = None


def with_changes(function: str, changes: dict[str, Any], *parts: Any) -> tuple[Any, ...]:
    """Copies of the dataclasses ``parts`` with the keywords of ``changes`` named after their fields; the TypeError
    of a call to ``function()`` for a keyword that names none."""
    names = [{f.name for f in fields(part)} for part in parts]
    for key in changes:
        if not any(key in n for n in names):
            raise TypeError(f"{function}() got an unexpected keyword argument {key!r}")
    return tuple(replace(part, **{k: v for k, v in changes.items() if k in n})
                 for part, n in zip(parts, names, strict=True))
