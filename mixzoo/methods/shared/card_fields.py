"""Checks of a method's card section fields besides numbers (:func:`mixzoo.methods.base.number`): one of a few names,
and a flag; each fills the default and raises a one-line :class:`~mixzoo.core.errors.InputError` naming
``SECTION.FIELD`` and the card."""

from __future__ import annotations

from typing import Any

from mixzoo.core.errors import InputError


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
