"""A TOML mix card's text and its arrays sidecar (:mod:`mixzoo.core.card`).

TOML has no null: ``None`` values are left out and read back as ``None``. The method section's large arrays (more
than :data:`INLINE_NUMBERS` numbers, e.g. MixedNUTS's 8x8x8 search grid) go to the sidecar ``STEM.arrays.json``
beside the card, referenced by its sha256 under ``[arrays]``, so that the card stays short enough to read and
review; short arrays of plain values stand on one line.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path
from typing import Any

from mixzoo.core.card_fields import field_error
from mixzoo.core.errors import InputError, MissingFileError
from mixzoo.core.paths import inside
from mixzoo.core.reading import copy_of, parse_text

ARRAYS_SUFFIX = ".arrays.json"
ARRAYS_FORMAT = "mixzoo card arrays 1"
INLINE_NUMBERS = 4  # an array of the method's section with more numbers than this goes to the sidecar


def check_sidecar(path: Path) -> Path:
    """The arrays sidecar ``STEM.arrays.json`` of the TOML card ``path``, refused (one line, before anything is
    written) when what is there is not a sidecar mixzoo wrote: another file, a directory, a FIFO, a link."""
    from mixzoo.core.paths import check_output, json_with

    return check_output(path.with_name(f"{path.stem}{ARRAYS_SUFFIX}"), what="a mix card's arrays file",
                        ours=json_with("format", "arrays"))


def toml_text(data: dict[str, Any], method: str, path: Path) -> str:
    """The TOML text of the card table ``data`` (:meth:`~mixzoo.core.card.MixCard.to_dict`, method ``method``) to
    be written at ``path``; the large arrays of its method section are written first, atomically, to the sidecar
    :func:`check_sidecar` names and referenced under ``[arrays]`` (file, sha256, keys)."""
    import tomli_w

    from mixzoo.core.cache import atomic_write_text

    data, arrays = _split_arrays(data, method)
    if arrays:
        sidecar = check_sidecar(path)
        sidecar_text = json.dumps({"format": ARRAYS_FORMAT, "arrays": arrays}, indent=1) + "\n"
        atomic_write_text(sidecar, sidecar_text)
        data["arrays"] = {"file": sidecar.name, "sha256": _text_sha256(sidecar_text), "keys": sorted(arrays)}
    return _compact_toml(tomli_w.dumps(_drop_none(data)))


def _count_numbers(v: Any) -> int:
    if isinstance(v, list | dict):
        return sum(_count_numbers(x) for x in (v.values() if isinstance(v, dict) else v))
    return int(isinstance(v, int | float) and not isinstance(v, bool))


def _split_arrays(data: dict[str, Any], method: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``data`` without the large arrays of its method section, and those arrays by dotted key
    (``mixednuts.grid.objectives``)."""
    arrays: dict[str, Any] = {}

    def walk(table: dict[str, Any], prefix: str) -> dict[str, Any]:
        kept = {}
        for key, value in table.items():
            if isinstance(value, dict):
                kept[key] = walk(value, f"{prefix}.{key}")
            elif isinstance(value, list) and _count_numbers(value) > INLINE_NUMBERS:
                arrays[f"{prefix}.{key}"] = value
            else:
                kept[key] = value
        return kept

    out = dict(data)
    out[method] = walk(data[method], method)
    return out, arrays


def _text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def join_arrays(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """``data`` (a TOML card naming its method) with the arrays of its ``[arrays]`` sidecar put back; the sidecar
    must be beside the card and match the sha256 the card records (one-line errors naming the file)."""
    ref = data.get("arrays")
    method = data.get("method")
    if not (isinstance(ref, dict) and isinstance(ref.get("file"), str) and isinstance(ref.get("sha256"), str)):
        raise InputError(f"{path}: field 'arrays' must be a table with file and sha256; write the card with"
                         " `mixzoo mix`")
    if not re.fullmatch(r"[0-9a-f]{64}", ref["sha256"]):
        raise field_error(str(path), "arrays.sha256", "a sha256 hex digest", ref["sha256"])
    if not ref["file"].isprintable() or not ref["file"].strip():
        raise InputError(f"{path}: arrays.file {ref['file']!r} must be a file name beside the card")
    file = inside(path.parent, ref["file"], f"{path}: field 'arrays.file'")  # a link out of the folder is refused
    if not file.is_file():
        raise MissingFileError(f"{file} (the large arrays of {path}) does not exist; keep it next to the card")
    from mixzoo.core.reading import CARD_BYTES, read_text

    text = read_text(file, limit=CARD_BYTES, what="card arrays file")  # its size checked before reading
    digest = _text_sha256(text)
    if digest != ref["sha256"]:
        raise InputError(f"{file} has sha256 {digest[:12]}... but {path} records {ref['sha256'][:12]}...; restore"
                         " the file written with the card, or write the card again")
    side = parse_text(text, "json", str(file))
    arrays = side.get("arrays") if isinstance(side, dict) else None
    if not isinstance(arrays, dict):
        raise InputError(f"{file}: not a mixzoo card arrays file (no table 'arrays')")
    out = {k: v for k, v in data.items() if k != "arrays"}
    out[method] = copy_of(out.get(method, {}))  # a copy the arrays are put into
    for key, value in arrays.items():
        parts = key.split(".")
        if parts[0] != method or len(parts) < 2:
            raise InputError(f"{file}: array {key!r} is not in the card's section {method!r}")
        table = out
        for part in parts[:-1]:
            table = table.setdefault(part, {})
            if not isinstance(table, dict):
                raise InputError(f"{file}: array {key!r} does not fit the card's tables")
        table[parts[-1]] = value
    return out


def _compact_toml(text: str, width: int = 100) -> str:
    """tomli_w's TOML with each short array of plain values on one line (``x = [1.0, 2.5]``), so that a card reads
    as a page; unchanged where that would not parse back to the same values."""

    def join(m: re.Match[str]) -> str:
        items = [line.strip().rstrip(",") for line in m.group(2).splitlines()]
        one = f"{m.group(1)}[{', '.join(items)}]"
        return one if len(one) <= width else m.group(0)

    compact = re.sub(r"(?m)^([^\n=]+= )\[\n((?: {4}[^\[\]\n]*,\n)+)\]", join, text)
    same = parse_text(compact, "toml", "the compact card") == parse_text(text, "toml", "the card")
    return compact if same else text


def _drop_none(v: Any) -> Any:
    """TOML has no null: drop ``None`` entries of tables; ``None`` inside arrays becomes nan."""
    if isinstance(v, dict):
        return {k: _drop_none(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [math.nan if x is None else _drop_none(x) for x in v]
    return v


__all__ = ["ARRAYS_FORMAT", "ARRAYS_SUFFIX", "INLINE_NUMBERS", "check_sidecar", "join_arrays", "toml_text"]
