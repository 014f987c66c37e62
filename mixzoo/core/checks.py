"""Small checks of user input that several commands share (output files, 64-bit integers, attack radii, row
names, NaN logits), each a one-line error, warning or text."""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from mixzoo.core.errors import InputError, NaNLogitsError
from mixzoo.core.reading import json_value

T = TypeVar("T")

_CARD_KEYS = ("schema_version", "method")


def _is_card(path: Path) -> bool:
    """Whether ``path`` parses as a mix card: a table with ``method`` / ``schema_version``, or ``abc`` and ``rbc``."""
    from mixzoo.core.errors import MixzooError
    from mixzoo.core.reading import CARD_BYTES, read_data

    try:
        data = read_data(path, limit=CARD_BYTES)
    except (OSError, MixzooError):
        return False
    return isinstance(data, dict) and (any(k in data for k in _CARD_KEYS) or
                                       (isinstance(data.get("abc"), dict) and isinstance(data.get("rbc"), dict)))


def refuse_foreign_file(path: str | Path, option: str = "--out") -> None:
    """Refuse to overwrite anything that is not a regular file, or a non-empty file that is not a mix card (a
    project's ``pyproject.toml``, a JSON file of results): a one-line :class:`InputError`
    (:func:`mixzoo.core.paths.check_output`)."""
    from mixzoo.core.paths import check_output

    check_output(path, option=option, what="a mix card", ours=_is_card)


INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1


def int64(value: int, what: str) -> int:
    """``value`` if it fits a 64-bit integer (what every tensor, seed and count in mixzoo holds), else a one-line
    :class:`InputError` naming ``what`` (e.g. ``"-O n_iter"``)."""
    if not INT64_MIN <= value <= INT64_MAX:
        digits = len(str(abs(value)))
        raise InputError(f"{what}: {str(value)[:24]}{'...' if digits > 24 else ''} ({digits} digits) is beyond a"
                         f" 64-bit integer; pass a number between {INT64_MIN} and {INT64_MAX}")
    return value


def option_value(text: str, what: str) -> Any:
    """A command-line value as JSON where it parses (numbers, true/false, null), else ``None`` for the caller's own
    reading (comma-separated lists, text); an integer beyond 64 bits is a one-line :class:`InputError`."""
    try:
        return json_value(text, parse_int=lambda digits: int64(int(digits), what))
    except InputError:
        raise
    except (ValueError, RecursionError):
        return NOT_JSON


NOT_JSON: Any = object()  # what option_value returns for text that is not JSON


def check_int_arguments(kwargs: dict[str, Any]) -> None:
    """Every integer among a command's parsed arguments (lists included) fits 64 bits; else a one-line
    :class:`InputError` naming the option (``--n``)."""
    for key, value in kwargs.items():
        for v in value if isinstance(value, list | tuple) else (value,):
            if isinstance(v, int) and not isinstance(v, bool):
                int64(v, f"--{key.replace('_', '-')}")


def reach_note(eps: float, norm: str, input_size: Sequence[int]) -> str | None:
    """A one-line note, also issued as a warning, when radius ``eps`` reaches every image of [0, 1]^d from every
    example (L-inf: eps >= 1; L2: eps >= sqrt(d), the cube's diagonal), where every non-constant classifier has
    0 % robust accuracy; else ``None``."""
    d = math.prod(int(v) for v in input_size)
    if norm == "Linf":
        reach, what = 1.0, "1 (the whole [0, 1] range)"
    elif norm == "L2":
        reach, what = math.sqrt(d), f"{math.sqrt(d):.4g} (the diagonal of the [0, 1] image cube, sqrt({d}))"
    else:
        return None
    if eps < reach:
        return None
    note = (f"eps {eps:g} ({norm}) is at least {what}: every image lies in every example's ball, so every"
            " non-constant model has 0 % robust accuracy; use the threat model's eps (e.g. 0.1 L-inf)")
    warnings.warn(note, stacklevel=2)
    return note


def distinct_row_names(rows: Sequence[Any], paths: Sequence[Path | None]) -> None:
    """Give bench rows that share a ``name`` (two cards with the same file stem) distinct names in place: the
    stem's parent folders are added until the names differ, else a number (``MixedNUTS (run1/card)``)."""
    names = [r.name for r in rows]
    for name in {n for n in names if names.count(n) > 1}:
        idx = [i for i, n in enumerate(names) if n == name]
        found = None
        for depth in range(2, 6):
            tails = ["/".join(Path(paths[i]).with_suffix("").parts[-depth:]) if paths[i] else None for i in idx]
            if None not in tails and len(set(tails)) == len(tails):
                found = tails
                break
        for k, i in enumerate(idx):
            stem = Path(paths[i]).stem if paths[i] else ""
            if found is not None and stem and f"({stem})" in name:
                rows[i].name = name.replace(f"({stem})", f"({found[k]})")
            else:
                rows[i].name = f"{name} #{k + 1}"


def listing(items: Iterable[str]) -> str:
    """``["a", "b", "c"]`` -> ``"a, b and c"``; ``["a"]`` -> ``"a"``; empty -> ``""``."""
    items = [str(i) for i in items if str(i)]
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}" if items else ""


def naming_model(label: str, fn: Callable[..., T]) -> Callable[..., T]:
    """``fn`` whose NaN-logits error (:class:`~mixzoo.core.errors.NaNLogitsError`) names the model ``label``."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> T:
        try:
            return fn(*args, **kwargs)
        except NaNLogitsError as exc:
            if exc.model is not None:
                raise
            raise NaNLogitsError(exc.count, exc.where, model=label) from None

    return call
