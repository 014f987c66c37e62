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

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from mixzoo.core.errors import InputError

__all__ = ["OptionSpec", "fill_options", "parse_pairs", "parse_value"]

INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1
_TYPE_NAMES = {int: "an integer", float: "a finite number", bool: "true or false", str: "a string", list: "a list"}
_REQUIRED = object()


@dataclass(frozen=True)
class OptionSpec:
    """One option: ``help``; ``type`` (``int``, ``float``, ``bool``, ``str``, ``list``, a converter function raising
    ``ValueError`` with the reason, or ``None`` for any value); ``default`` (filled by :func:`fill_options` when the
    key is absent; ``None`` leaves the key absent); ``low``/``high`` (inclusive bounds of numbers) or ``choices``."""

    help: str
    type: type | Callable[[Any], Any] | None = None
    default: Any = None
    metavar: str | None = None
    low: float | None = None
    high: float | None = None
    choices: tuple[Any, ...] | None = None

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
        return "" if self.default is None else str(self.default)

    @property
    def range_text(self) -> str:
        """The allowed values as ``mixzoo mix --show-options`` prints them (empty when any value of the type)."""
        if self.choices is not None:
            return " | ".join(map(str, self.choices))
        if self.low is not None and self.high is not None:
            return f"[{self.low:g}, {self.high:g}]"
        if self.low is not None:
            return f">= {self.low:g}"
        return f"<= {self.high:g}" if self.high is not None else ""

    def convert(self, key: str, value: Any, owner: str) -> Any:
        """``value`` as this option's type, in range; a one-line :class:`InputError` naming the option, what it
        must be and its help."""
        if self.type is None or value is None:
            return value
        flag = f"option {key} (--{key.replace('_', '-')}) of {owner}"
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
            raise InputError(f"{flag} must be {self.range_text}, got {value!r}; {key}: {self.help}")
        return out


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
        raise InputError(f"{owner} takes no option {unknown[0]!r} (its options: {known}); see `mixzoo plugins`")
    out = {k: specs[k].convert(k, v, owner) for k, v in raw.items()}
    for key, spec in specs.items():
        if key not in out and spec.default is not None:
            out[key] = spec.default
    return out


def parse_value(text: str, what: str = "option value") -> Any:
    """A command-line value, as the module docstring says: JSON where it parses, a comma list of stripped non-empty
    items, else the stripped text; an integer beyond 64 bits is a one-line :class:`InputError` naming ``what``."""
    from mixzoo.core.checks import NOT_JSON, option_value

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
