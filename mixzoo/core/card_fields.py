"""The mix card's fields (:mod:`mixzoo.core.card`): the schema version, the common fields every method's card has,
the mixing method a card names, the plain values a field holds and the one-line error of a field that is wrong.

Shared by the card itself, its TOML sidecar (:mod:`mixzoo.core.card_sidecar`) and the methods that check their own
tables (:func:`field_error`, :func:`is_int`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from mixzoo.core.errors import InputError
from mixzoo.core.reading import shown

SCHEMA_VERSION = 2
COMMON_FIELDS = ("schema_version", "method", "dataset", "notes", "abc", "rbc", "data", "attack", "weights",
                 "provenance")
TABLE_FIELDS = ("abc", "rbc", "data", "attack", "weights", "provenance")


def named_method(name: Any, source: str) -> Any:
    """The :class:`~mixzoo.methods.MixingMethod` plugin a card's ``method`` field names; a one-line
    :class:`InputError` naming ``source`` when it is not a string or no installed plugin has that name."""
    from mixzoo.core.errors import UnknownNameError
    from mixzoo.core.plugins import lookup

    if not isinstance(name, str) or not name:
        raise InputError(f"{source}: field 'method' must name a mixing method (see `mixzoo plugins`), got {name!r}")
    try:
        return lookup("method", name)
    except UnknownNameError as exc:
        raise InputError(f"{source}: {exc}") from None


def field_error(source: str, name: str, want: str, got: Any) -> InputError:
    """The one-line error of a card field ``name`` (``TABLE.FIELD``) that is not ``want``, naming ``source``; what
    :meth:`~mixzoo.methods.MixingMethod.check_card` raises for the tables a method writes."""
    return InputError(f"{source}: field {name!r} must be {want}, got {shown(got)}; write the card with `mixzoo mix`")


def is_int(v: Any, low: int | None = None) -> bool:
    """``v`` is an int (not a bool) that a 64-bit integer holds (every count, seed and size mixzoo stores in a
    tensor or passes to torch), at least ``low`` when given."""
    return (isinstance(v, int) and not isinstance(v, bool) and -(2 ** 63) <= v <= 2 ** 63 - 1
            and (low is None or v >= low))


def plain_values(v: Any) -> Any:
    """Tensors, numpy values, paths and tuples to plain JSON/TOML values."""
    if isinstance(v, torch.Tensor):
        return v.detach().cpu().tolist()
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, Path):
        return str(v)
    if isinstance(v, dict):
        return {str(k): plain_values(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [plain_values(x) for x in v]
    return v


__all__ = ["COMMON_FIELDS", "SCHEMA_VERSION", "TABLE_FIELDS", "field_error", "is_int", "named_method",
           "plain_values"]
