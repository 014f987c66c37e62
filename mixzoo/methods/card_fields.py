"""Checks of the fields of a method's card section (:meth:`mixzoo.methods.base.MixingMethod.validate`): a number, one
of a few names, a flag. Each fills the default of a missing field and raises a one-line
:class:`~mixzoo.core.errors.InputError` naming ``SECTION.FIELD`` and the card."""

from __future__ import annotations

import math
from typing import Any

from mixzoo.core.errors import InputError


def number(params: dict[str, Any], key: str, source: str, section: str, *, low: float | None = None,
           high: float | None = None, positive: bool = False, default: Any = ..., allow_none: bool = False) -> None:
    """Check ``params[key]`` is a finite real number (bounds inclusive), converting it to float in place; a
    missing key takes ``default`` (required when no default is given)."""
    if key not in params or (params[key] is None and allow_none):
        if key in params or default is not ...:
            params[key] = None if key in params else default
            return
        raise InputError(f"{source}: missing field '{section}.{key}'; write the card with `mixzoo mix`")
    v = params[key]
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise InputError(f"{source}: field '{section}.{key}' must be a finite number, got {v!r}")
    if (positive and v <= 0) or (low is not None and v < low) or (high is not None and v > high):
        bounds = "positive" if positive else f"in [{low if low is not None else '-inf'}, " \
                                             f"{high if high is not None else 'inf'}]"
        raise InputError(f"{source}: field '{section}.{key}' must be {bounds}, got {v!r}")
    params[key] = float(v)


def choice(params: dict[str, Any], key: str, options: tuple[str, ...], source: str, section: str,
           default: str) -> None:
    """``params[key]`` (``default`` when missing) is one of ``options``."""
    value = params.setdefault(key, default)
    if value not in options:
        raise InputError(f"{source}: field '{section}.{key}' must be one of {', '.join(options)}, got {value!r}")


def flag(params: dict[str, Any], key: str, source: str, section: str) -> None:
    """``params[key]`` (false when missing) is true or false; the strings "true" and "false" count."""
    value = params.setdefault(key, False)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        value = params[key] = value.lower() == "true"
    if not isinstance(value, bool):
        raise InputError(f"{source}: field '{section}.{key}' must be true or false, got {value!r}")
