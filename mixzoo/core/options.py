"""One option system: :class:`OptionSpec` (type, default, range or choices, help), :func:`fill_options` (checks a raw
mapping and fills the defaults) and the one ``KEY=VALUE`` parser, :func:`parse_pairs` with :func:`parse_value`.

How ``KEY=VALUE`` words read (the same for ``mixzoo mix -O``, method ``--KEY VALUE`` words and ``mixzoo share``):

- the key is the text before the first ``=``, stripped, dashes read as underscores; a key that is not an identifier,
  or a word without ``=``, is refused;
- the value is the text after it: JSON where it parses (numbers, ``true``/``false``, ``null``, a quoted string,
  a ``[...]`` list); else text with a comma is a list of its stripped, non-empty items (``"a, b"`` -> ``["a", "b"]``);
  else the text itself, stripped. Quote it as JSON to keep a comma in one string: ``KEY='"a, b"'``;
- an empty value (``KEY=`` or blanks) is the empty string;
- a key given twice is refused (one line naming it), never silently overwritten.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from mixzoo.core.checks import INT64_MAX, INT64_MIN, NOT_JSON, option_value
from mixzoo.core.errors import InputError

__all__ = ["OptionSpec", "did_you_mean", "fill_options", "names", "numbers", "parse_pairs", "parse_value",
           "specs_from_defaults"]

_TYPE_NAMES = {int: "an integer", float: "a finite number", bool: "true or false", str: "a string", list: "a list"}
_REQUIRED = object()


@dataclass(frozen=True)
class OptionSpec:
    """One option: ``help``; ``type`` (``int``, ``float``, ``bool``, ``str``, ``list``, a converter function raising
    ``ValueError`` with the reason, or ``None`` for any value); ``default`` (filled by :func:`fill_options` when the
    key is absent; ``None`` leaves the key absent); ``low``/``high`` (inclusive bounds of numbers) or ``choices``;
    ``default_note``: what the owner does when the key is absent, for a default that is not one value (it depends on
    other options, e.g. ``"0.985 when neither alpha nor target_robust is given"``): shown by ``--show-options``,
    never filled."""

    help: str
    type: type | Callable[[Any], Any] | None = None
    default: Any = None
    metavar: str | None = None
    low: float | None = None
    high: float | None = None
    choices: tuple[Any, ...] | None = None
    default_note: str | None = None

    @property
    def type_name(self) -> str:
        """``metavar`` if given, else the type's name (``value`` for a private converter function)."""
        if self.metavar:
            return self.metavar
        if self.type is None:
            return "any"
        name = {int: "int", float: "float", bool: "bool", str: "text", list: "list"}.get(
            self.type, getattr(self.type, "__name__", "value"))
        return "value" if name.startswith("_") else name

    @property
    def default_text(self) -> str:
        """The default as ``mixzoo mix --show-options`` prints it (empty when none)."""
        if isinstance(self.default, list | tuple):
            return ",".join(map(str, self.default))
        return (self.default_note or "") if self.default is None else str(self.default)

    @property
    def range_text(self) -> str:
        """The allowed values as ``mixzoo mix --show-options`` prints them (empty when any value of the type)."""
        if self.choices is not None:
            return " | ".join(map(str, self.choices))
        low, high = _number_text(self.low), _number_text(self.high)
        if self.low is not None and self.high is not None:
            return f"[{low}, {high}]"
        if self.low is not None:
            return f">= {low}"
        return f"<= {high}" if self.high is not None else ""

    @property
    def bound_text(self) -> str:
        """The allowed numbers in words, as error messages say them (``at least 1``, ``in [0, 1]``)."""
        low, high = _number_text(self.low), _number_text(self.high)
        if self.low is not None and self.high is not None:  # a count's cap: its lower bound is what people meet
            return f"at least {low} and at most {high}" if self.type is int else f"in [{low}, {high}]"
        return f"at least {low}" if self.low is not None else f"at most {high}"

    def convert(self, key: str, value: Any, owner: str, flag: str | None = None) -> Any:
        """``value`` as this option's type, in range; a one-line :class:`InputError` naming the option (as the
        user spells it: ``flag``, by default ``--KEY``), what it must be and its help."""
        if self.type is None or value is None:
            return value
        flag = f"option {key} ({flag or '--' + key.replace('_', '-')}) of {owner}"
        try:
            out = _convert(self.type, value)
        except (TypeError, ValueError, OverflowError) as exc:
            if self.type in _TYPE_NAMES:
                what = f"{_TYPE_NAMES[self.type]} (64-bit)" if "64-bit" in str(exc) else _TYPE_NAMES[self.type]
                raise InputError(f"{flag} must be {what}, got {value!r}; {key}: {self.help}") from None
            raise InputError(f"{flag}: {exc}" if str(exc) else f"{flag} is not valid, got {value!r}") from None
        if self.choices is not None and out not in self.choices:
            raise InputError(f"{flag} must be one of {self.range_text}, got {value!r}")
        if isinstance(out, int | float) and not isinstance(out, bool) and (
                (self.low is not None and out < self.low) or (self.high is not None and out > self.high)):
            raise InputError(f"{flag} must be {self.bound_text}, got {value!r}; {key}: {self.help}")
        return out


def _number_text(x: float | None) -> str:
    """A bound as people read it: whole numbers in full (``100000``), others as ``:g`` gives them."""
    if x is None:
        return ""
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def _convert(t: Any, value: Any) -> Any:
    if t is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise ValueError("not a boolean")
    if t is int:
        if isinstance(value, bool):
            raise ValueError("a boolean")
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        out = int(value) if isinstance(value, int | str) else _fail()
        if not INT64_MIN <= out <= INT64_MAX:
            raise ValueError("outside the 64-bit integer range")
        return out
    if t is float:
        if isinstance(value, bool):
            raise ValueError("a boolean")
        out = float(value) if isinstance(value, int | float | str) else _fail()
        if not math.isfinite(out):
            raise ValueError("not finite")
        return out
    if t is str:
        return value if isinstance(value, str) else _fail()
    if t is list:
        if isinstance(value, list | tuple):
            return list(value)
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        return [value]
    return t(value)


def _fail() -> Any:
    raise TypeError("wrong type")


def fill_options(specs: Mapping[str, OptionSpec], raw: Mapping[str, Any], owner: str) -> dict[str, Any]:
    """``raw`` checked against ``specs`` (unknown keys refused, values converted and range-checked) with every
    absent option that has a default filled in; one-line :class:`InputError` naming the option and the fix."""
    unknown = sorted(set(raw) - set(specs))
    if unknown:
        known = ", ".join(sorted(specs)) or "none"
        raise InputError(f"{owner} takes no option {unknown[0]!r}{did_you_mean(unknown[0], specs)} (its options:"
                         f" {known}); see `mixzoo plugins`")
    out = {k: specs[k].convert(k, v, owner) for k, v in raw.items()}
    for key, spec in specs.items():
        if key not in out and spec.default is not None:
            out[key] = spec.default
    return out


def did_you_mean(key: str, known: Iterable[str]) -> str:
    """``"; did you mean KEY?"`` for the closest known name, or the empty string when none is close."""
    import difflib

    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


def names(value: Any) -> list[str]:
    """An option type: a list of non-empty names; one name (or a comma list ``"a, b"``) is read as a list."""
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",")]
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"must be a list of names (e.g. apgd-ce,apgd-t), got {value!r}")
    return list(value)


def numbers(value: Any) -> list[int | float]:
    """An option type: a non-empty list of finite numbers (a sweep); one number is a list of one, and text
    ``"0, 0.1"`` is read item by item."""
    items = value if isinstance(value, list | tuple) else [value]
    if isinstance(value, str):
        items = [parse_value(v, "number") for v in value.split(",")]
    ok = bool(items) and all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
                             for v in items)
    if not ok:
        raise ValueError(f"must be a comma-separated list of numbers (e.g. 0,0.1), got {value!r}")
    return list(items)


def specs_from_defaults(defaults: Mapping[str, Any], types: Mapping[str, Any] | None = None,
                        known: Mapping[str, OptionSpec] | None = None) -> dict[str, OptionSpec]:
    """Option specs for a ``{name: default}`` table: ``known``'s spec with this default, else the type from
    ``types`` or the default's (a list of numbers: :func:`numbers`; a list: :func:`names`; ``None``: any value)."""
    types, known = dict(types or {}), dict(known or {})
    out: dict[str, OptionSpec] = {}
    for key, default in defaults.items():
        kind = types.get(key)
        if key in known and kind in (None, known[key].type):
            out[key] = dataclasses.replace(known[key], default=default)
            continue
        if kind is None and default is not None:
            kind = type(default)
        if kind in (list, tuple):
            is_numbers = isinstance(default, list | tuple) and default and not isinstance(default[0], str)
            kind = numbers if is_numbers else names
        out[key] = OptionSpec("", kind, default)
    return out


def env_int(name: str, default: int, low: int, high: int, fix: str) -> int:
    """The integer environment variable ``name`` (``default`` when unset or empty), in ``[low, high]``: text that
    is not a whole number, or one out of range, is a one-line :class:`InputError` naming the variable, its range
    and ``fix``."""
    import os
    import re

    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    text = raw.strip()
    value = int(text) if re.fullmatch(r"[+-]?[0-9]{1,30}", text) else None
    if value is None or not low <= value <= high:
        shown = raw if len(raw) <= 30 else raw[:27] + "..."
        raise InputError(f"{name}={shown!r} is not a whole number in [{low}, {high}]; {fix}")
    return value


MAX_WORLD_SIZE = 1 << 20  # processes of one job; more than any torchrun job holds
_LAUNCH_FIX = "launch with torchrun (which sets it), or unset it for one process"


def world_size_env() -> tuple[int, int]:
    """``(WORLD_SIZE, LOCAL_RANK)`` as torchrun sets them (1 and 0 when unset), checked before any work:
    ``WORLD_SIZE`` in ``[1, MAX_WORLD_SIZE]``, with several processes ``RANK`` and ``LOCAL_RANK`` in
    ``[0, WORLD_SIZE - 1]``; else a one-line :class:`InputError` naming the variable."""
    size = env_int("WORLD_SIZE", 1, 1, MAX_WORLD_SIZE, _LAUNCH_FIX)
    if size == 1:
        return 1, 0
    env_int("RANK", 0, 0, size - 1, _LAUNCH_FIX)
    return size, env_int("LOCAL_RANK", 0, 0, size - 1, _LAUNCH_FIX)


def parse_value(text: str, what: str = "option value") -> Any:
    """A command-line value, as the module docstring says: JSON where it parses, a comma list of stripped non-empty
    items, else the stripped text; an integer beyond 64 bits is a one-line :class:`InputError` naming ``what``."""
    value = option_value(text, what)
    if value is NOT_JSON:
        return [v.strip() for v in text.split(",") if v.strip()] if "," in text else text.strip()
    return value


def parse_pairs(words: Iterable[str], flag: str = "-O") -> dict[str, Any]:
    """``KEY=VALUE`` words as a mapping, values read by :func:`parse_value`; a word without ``=``, an empty key or a
    key given twice is a one-line :class:`InputError` naming the ``flag``."""
    out: dict[str, Any] = {}
    for word in words:
        key, sep, text = word.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key.isidentifier():
            raise InputError(f"{flag} {word!r} is not KEY=VALUE; write e.g. {flag} n_iter=100")
        if key in out:
            raise InputError(f"{flag} {key} is given twice; give each option once")
        out[key] = parse_value(text, f"{flag} {key}") if text.strip() else ""
    return out
