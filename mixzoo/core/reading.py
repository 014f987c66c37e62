"""The one reader of every file mixzoo reads that a user or another tool can touch: mix cards and their arrays
sidecars, bench reports (``report.json``), cache entries, registry files (``$MIXZOO_REGISTRY``), Hub files,
``failed-plugins.json``.

Every such file is untrusted input, read through :func:`read_data` (or :func:`parse_text` for text already in
hand), which checks, in this order and each as one line naming the file:

* the path is a regular file no larger than ``limit`` bytes (:data:`MAX_BYTES`, :data:`CARD_BYTES`), checked on its
  size before any byte is read;
* it is UTF-8 text;
* its brackets nest no deeper than :data:`MAX_DEPTH`, counted on the text before it is parsed;
* it parses (TOML or JSON) and no table or object names a key twice (JSON would keep the last value silently).

No other module of mixzoo calls ``json.load(s)`` or ``tomllib.load(s)`` (``tests/core/test_reading.py`` checks).
"""

from __future__ import annotations

import json
import os
import re
import stat
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mixzoo.core.errors import InputError

MAX_DEPTH = 64  # no mixzoo file nests deeper than about 8 levels
MAX_BYTES = 64 << 20  # a report of 10,000 images is about 1 MB; a cache entry of 50,000 about 300 kB
CARD_BYTES = 4 << 20  # a card and its arrays sidecar are a few kB (a MixedNUTS grid: 512 numbers)

# what the nesting count skips: JSON strings; TOML strings (basic, literal, multi-line) and comments
_JSON_SKIP = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_TOML_SKIP = re.compile(r'"""(?:[^\\]|\\.)*?"""|\'\'\'.*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_PAIR = re.compile(r"\[\]|\{\}")


def depth_error(source: str) -> InputError:
    return InputError(f"{source}: nested deeper than {MAX_DEPTH} levels, which no mixzoo file is; pass the file"
                      " mixzoo wrote")


def shown(value: Any) -> str:
    """``repr(value)`` for an error message, cut to 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_depth(value: Any, source: str, limit: int = MAX_DEPTH) -> None:
    """A one-line :class:`InputError` when ``value`` (parsed TOML / JSON) nests lists or tables deeper than
    ``limit``; iterative, so any depth is measured without recursion."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth >= limit:
                raise depth_error(source)
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item)
                         if isinstance(v, dict | list))


def check_text_depth(text: str, kind: str, source: str, limit: int = MAX_DEPTH) -> None:
    """A one-line :class:`InputError` when the brackets of ``text`` (outside strings and comments) nest deeper
    than ``limit``, measured before parsing: each pass removes the innermost pairs, so at most ``limit`` passes."""
    brackets = _NOT_BRACKET.sub("", (_JSON_SKIP if kind == "json" else _TOML_SKIP).sub("", text))
    if kind == "toml":  # a TOML document is a table without brackets: one level the text does not show
        limit -= 1
    for _ in range(limit):
        fewer = _PAIR.sub("", brackets)
        if fewer == brackets:  # balanced and gone, or unbalanced (which the parser then names)
            return
        brackets = fewer
    if brackets:
        raise depth_error(source)


class _Duplicate(ValueError):
    pass


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Duplicate(key)
        out[key] = value
    return out


def parse_text(text: str, kind: str, source: str) -> Any:
    """TOML (``kind="toml"``) or JSON text as Python values: nesting bounded (:data:`MAX_DEPTH`) before parsing,
    a key named twice in one table or object refused; a file that is not valid, nested too deep or names a key
    twice is a one-line :class:`InputError` naming ``source``."""
    check_text_depth(text, kind, source)
    try:
        data = tomllib.loads(text) if kind == "toml" else json.loads(text, object_pairs_hook=_unique)
    except _Duplicate as exc:
        raise InputError(f"{source}: field {exc.args[0]!r} appears twice in one object; a file mixzoo wrote names"
                         " each field once, pass that file") from None
    except RecursionError:
        raise depth_error(source) from None
    except (tomllib.TOMLDecodeError, ValueError) as exc:
        raise InputError(f"{source}: not valid {kind.upper()} ({str(exc).splitlines()[0][:200]})") from None
    if kind == "toml":  # dotted keys and table headers nest tables without brackets
        check_depth(data, source)
    return data


def read_text(path: str | os.PathLike[str] | Any, *, limit: int = MAX_BYTES, what: str = "file") -> str:
    """The UTF-8 text of ``path`` (a path, or a package resource with ``read_bytes``), refused in one line naming
    it when it is not a regular file or is larger than ``limit`` bytes (checked before reading)."""
    if not isinstance(path, str | os.PathLike):  # a package resource (importlib.resources): read, then measured
        blob = path.read_bytes()
    else:
        path = Path(path)
        try:
            info = path.stat()
        except FileNotFoundError:
            raise InputError(f"{what} {path} does not exist") from None
        if not stat.S_ISREG(info.st_mode):
            raise InputError(f"{what} {path} is not a regular file; pass the file mixzoo wrote")
        if info.st_size > limit:
            raise InputError(f"{what} {path} is {info.st_size:,} bytes, more than the {limit:,} any mixzoo file of"
                             " its kind takes; pass the file mixzoo wrote")
        with open(path, "rb") as fh:
            blob = fh.read(limit + 1)
    if len(blob) > limit:
        raise InputError(f"{what} {path} is more than the {limit:,} bytes any mixzoo file of its kind takes; pass the"
                         " file mixzoo wrote")
    try:
        return blob.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{what} {path} is not a text file (not UTF-8); pass the file mixzoo wrote") from None


def read_data(path: str | os.PathLike[str] | Any, kind: str | None = None, *, limit: int = MAX_BYTES,
              what: str = "file") -> Any:
    """``path`` read (:func:`read_text`) and parsed (:func:`parse_text`); ``kind`` is ``"toml"`` or ``"json"``
    (default: ``"toml"`` for a ``.toml`` name, else ``"json"``)."""
    kind = kind or ("toml" if str(getattr(path, "name", path)).endswith(".toml") else "json")
    return parse_text(read_text(path, limit=limit, what=what), kind, str(path))


def json_value(text: str, parse_int: Callable[[str], Any] | None = None) -> Any:
    """A short JSON value a user typed (a command-line value, an option string mixzoo wrote), as ``json.loads``
    reads it (``ValueError`` / ``RecursionError`` when it is not JSON; integers through ``parse_int``)."""
    return json.loads(text, parse_int=parse_int)


def copy_of(value: Any) -> Any:
    """A deep copy of ``value`` as plain JSON values (any other value as its ``str``)."""
    return json.loads(json.dumps(value, default=str))


__all__ = ["CARD_BYTES", "MAX_BYTES", "MAX_DEPTH", "check_depth", "check_text_depth", "copy_of", "depth_error",
           "json_value", "parse_text", "read_data", "read_text"]
