"""The mix card: everything needed to rebuild and audit a mixed classifier, for any mixing method.

One format for every method (schema 2): ``method = "NAME"`` (a :mod:`mixing method <mixzoo.methods>` plugin), the
pair (``[abc]``, ``[rbc]``: names and weight hashes), the threat model and attack record (``[attack]``), the data
(``[data]``), the method's own section (a table named after the method, e.g. ``[mixednuts]`` with s, p, c, alpha;
validated by the method), the files of trained methods (``[weights]``: file name -> sha256, next to the card) and
provenance. A small TOML (or JSON) file, written atomically (temporary file, fsync, rename). TOML has no null:
``None`` values are left out of TOML files and read back as ``None``.

Files of schema 1 (a method's parameters at the top level) still load through :meth:`MixCard.load`: each method
plugin may claim one (:meth:`mixzoo.methods.MixingMethod.upgrade_v1`) and say what to re-run
(:meth:`~mixzoo.methods.MixingMethod.v1_warning`).
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import math
import os
import re
import subprocess
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mixzoo.core.checks import refuse_foreign_file
from mixzoo.core.errors import InputError, MissingFileError
from mixzoo.core.paths import inside, plain_name
from mixzoo.core.reading import copy_of, parse_text

SCHEMA_VERSION = 2
_COMMON = ("schema_version", "method", "dataset", "notes", "abc", "rbc", "data", "attack", "weights", "provenance")
_TABLES = ("abc", "rbc", "data", "attack", "weights", "provenance")


def _method(name: Any, source: str) -> Any:
    from mixzoo.core.errors import UnknownNameError
    from mixzoo.core.plugins import lookup

    if not isinstance(name, str) or not name:
        raise InputError(f"{source}: field 'method' must name a mixing method (see `mixzoo plugins`), got {name!r}")
    try:
        return lookup("method", name)
    except UnknownNameError as exc:
        raise InputError(f"{source}: {exc}") from None


@dataclass
class MixCard:
    """A mixed classifier: its method, its fitted section (``params``), its base models and how it was obtained.

    Plain data: ``method`` names a mixing-method plugin; ``params`` is that method's section (e.g. MixedNUTS:
    ``s``, ``p``, ``c``, ``alpha``, ``beta``, ``clamp``, ``top_k``, ``temperature``, ``alpha_d``, ``objective``,
    ``fit``, ``grid``), validated by the method (one-line errors naming ``SECTION.FIELD``); ``abc`` / ``rbc``: each
    model's ``name`` and ``weight_hash`` (:func:`mixzoo.zoo.pairs.model_hash`); ``dataset``; ``data``: the
    calibration images (:meth:`mixzoo.zoo.pairs.Pair.data_info`); ``attack``: the threat model (``eps``, ``norm``)
    and any attack the fit ran; ``weights``: files of a trained method, by name, with their sha256, stored next to
    the card (``path``); ``provenance`` (:func:`provenance`); ``notes`` for people. Construction validates.
    """

    method: str
    params: dict[str, Any]
    abc: dict[str, Any] = field(default_factory=dict)
    rbc: dict[str, Any] = field(default_factory=dict)
    dataset: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    attack: dict[str, Any] = field(default_factory=dict)
    weights: dict[str, str] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION
    path: Path | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        self.params = dict(self.params) if isinstance(self.params, dict) else self.params
        self.notes = list(self.notes) if isinstance(self.notes, list | tuple) else self.notes
        _validate(self, "mix card")

    @property
    def mixing_method(self) -> Any:
        """The :class:`~mixzoo.methods.MixingMethod` plugin object this card names."""
        return _method(self.method, "mix card")

    # ------------------------------------------------------------------------------------------ dict / files
    def to_dict(self) -> dict[str, Any]:
        """Plain Python values (lists, dicts, numbers, strings, None): the common fields, then the method's
        section under the method's name."""
        out = {k: plain_values(getattr(self, k)) for k in _COMMON}
        out[self.method] = plain_values(self.params)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "mix card", path: Path | None = None,
                  *, stacklevel: int = 2) -> MixCard:
        """Build and validate a card; errors name ``source`` (e.g. the file) and the field; warnings point
        ``stacklevel`` frames up (the caller's line)."""
        if not isinstance(data, dict):
            raise InputError(f"{source}: a mix card must be a table of fields, got {type(data).__name__}")
        version = data.get("schema_version")
        if version == 1:
            raise InputError(f"{source}: a schema-1 card; read it from its file with MixCard.load, which upgrades it,"
                             " or re-create it with `mixzoo mix`")
        if version != SCHEMA_VERSION:
            raise InputError(f"{source}: schema_version {version!r} is not supported (this mixzoo reads 1 and"
                             f" {SCHEMA_VERSION}); re-create the card with `mixzoo mix`")
        if "method" not in data:
            raise InputError(f"{source}: missing field 'method'; write the card with `mixzoo mix` or add it")
        method = data["method"]
        _method(method, source)
        if not isinstance(data.get(method), dict):
            raise InputError(f"{source}: missing table [{method}] (the method's section); write the card with"
                             " `mixzoo mix`")
        unknown = sorted(set(data) - set(_COMMON) - {method})
        if unknown:
            warnings.warn(f"{source}: ignoring unknown fields {', '.join(unknown)}", stacklevel=stacklevel)
        card = object.__new__(cls)  # validated below with ``source`` in the messages
        card.method, card.params, card.path = method, dict(data[method]), path
        for name in _COMMON[2:]:
            default: Any = [] if name == "notes" else {} if name in _TABLES else None
            setattr(card, name, data.get(name, default))
        card.schema_version = SCHEMA_VERSION
        _validate(card, source)
        return card

    def save(self, path: str | Path) -> Path:
        """Write the card atomically as TOML (``.toml``) or JSON (``.json``); returns the path. In a TOML card the
        method section's large arrays (more than :data:`INLINE_NUMBERS` numbers, e.g. MixedNUTS's 8x8x8 search
        grid) go to the sidecar ``STEM.arrays.json`` beside it, referenced by its sha256 under ``[arrays]``, so that
        the card stays short enough to read and review; :meth:`load` puts them back."""
        from mixzoo.core.cache import atomic_write_text

        path = Path(path)
        data = self.to_dict()
        if path.suffix == ".toml":
            import tomli_w

            data, arrays = _split_arrays(data, self.method)
            if arrays:
                sidecar = check_sidecar(path)
                sidecar_text = json.dumps({"format": ARRAYS_FORMAT, "arrays": arrays}, indent=1) + "\n"
                atomic_write_text(sidecar, sidecar_text)
                data["arrays"] = {"file": sidecar.name, "sha256": _text_sha256(sidecar_text),
                                  "keys": sorted(arrays)}
            text = _compact_toml(tomli_w.dumps(_drop_none(data)))
        elif path.suffix == ".json":
            text = json.dumps(data, indent=2, allow_nan=True) + "\n"
        else:
            raise InputError(f"card path {path} must end in .toml or .json")
        return atomic_write_text(path, text)

    def save_as(self, path: str | Path) -> Path:
        """Write the card to ``path`` with copies of its weight files (each checked against its sha256), renamed to
        the new card's stem (``card.x.safetensors`` -> ``NAME.x.safetensors``), so that several trained cards can
        share a folder, e.g. a plugin's published cards; parameters naming a file follow the rename. Returns the
        new card's path; nothing is written when a weight file is missing or altered."""
        import shutil

        from mixzoo.core.cache import check_writable

        path = check_writable(Path(path), what="card")
        if path.suffix not in (".toml", ".json"):
            raise InputError(f"card path {path} must end in .toml or .json")
        if path.suffix == ".toml":
            check_sidecar(path)  # before any weight file is copied
        old_stem = self.path.stem if self.path is not None else None
        sources = {name: self.weight_file(name) for name in self.weights}  # checked before anything is written
        renamed = {name: (f"{path.stem}{name[len(old_stem):]}" if old_stem and name.startswith(f"{old_stem}.")
                          else name) for name in sources}
        path.parent.mkdir(parents=True, exist_ok=True)
        for name, src in sources.items():
            dst = path.with_name(renamed[name])
            tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
            shutil.copyfile(src, tmp)
            os.replace(tmp, dst)
        copy = MixCard.from_dict(self.to_dict(), source=str(path))
        copy.weights = {renamed[k]: v for k, v in self.weights.items()}
        copy.params = {k: renamed.get(v, v) if isinstance(v, str) else v for k, v in copy.params.items()}
        return copy.save(path)

    @staticmethod
    def check_path(path: str | Path) -> Path:
        """Refuse, before any work, a card path :meth:`save` could not write (suffix, directory, permissions)."""
        from mixzoo.core.cache import check_writable

        path = Path(path)
        if path.suffix not in (".toml", ".json"):
            raise InputError(f"card path {path} must end in .toml or .json")
        check_writable(path, what="card")
        refuse_foreign_file(path)  # never replace a file that is not a card (e.g. --out pyproject.toml)
        if path.suffix == ".toml":
            check_sidecar(path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> MixCard:
        """Read and validate a TOML or JSON card, or a published card by name (hook ``mixzoo_cards``); a bad file
        is a one-line :class:`InputError` naming it."""
        path = _published(path)
        if path.suffix not in (".toml", ".json"):
            raise InputError(f"card path {path} must end in .toml or .json (or name a published card: see"
                             " `mixzoo plugins`)")
        if path.is_dir():
            raise InputError(f"mix card {path} is a directory; pass the card file `mixzoo mix --out` wrote")
        if not path.is_file():
            raise MissingFileError(f"mix card {path} does not exist; create it with `mixzoo mix --out {path}`")
        from mixzoo.core.reading import CARD_BYTES, read_data
        from mixzoo.core.schema import CardFile, validate

        data = read_data(path, path.suffix[1:], limit=CARD_BYTES, what="mix card")
        if isinstance(data, dict) and data.get("schema_version") == 1:
            data = upgrade_v1(data, str(path))
        if isinstance(data, dict) and data.get("schema_version") == SCHEMA_VERSION:
            validate(CardFile, data, str(path), "write the card with `mixzoo mix`")
        if isinstance(data, dict) and "arrays" in data:
            data = _join_arrays(data, path)
        return cls.from_dict(data, source=str(path), path=path, stacklevel=3)

    def weight_file(self, name: str) -> Path:
        """A trained method's file ``name`` (next to the card), checked against the sha256 the card records."""
        import hashlib

        if name not in self.weights:
            raise InputError(f"the mix card lists no file {name!r} under [weights]; re-create it with `mixzoo mix`")
        if self.path is None:
            raise InputError(f"the mix card was not loaded from a file, so its weight file {name!r} cannot be found;"
                             " load it with MixCard.load(path)")
        file = inside(self.path.parent, name, f"{self.path}: field 'weights' entry")
        if not file.is_file():
            raise MissingFileError(f"{file} (listed in {self.path}) does not exist; keep it next to the card")
        digest = hashlib.sha256(file.read_bytes()).hexdigest()
        if digest != self.weights[name]:
            raise InputError(f"{file} has sha256 {digest[:12]}... but {self.path} records"
                             f" {self.weights[name][:12]}...; the file does not belong to this card: restore the"
                             " file written with the card, or fit the card again with `mixzoo mix`")
        return file

    def summary(self) -> str:
        """One line: the method and its parameters."""
        return self.mixing_method.summary_line(self)


def upgrade_v1(data: dict[str, Any], source: str) -> dict[str, Any]:
    """A schema-1 card (a method's parameters at the top level) as a schema-2 table: the first method plugin that
    claims it (:meth:`mixzoo.methods.MixingMethod.upgrade_v1`) gives its section, and its
    :meth:`~mixzoo.methods.MixingMethod.v1_warning` is issued as a warning."""
    method, params = _claim_v1(data, source)
    note = _method(method, source).v1_warning(data)
    if note:
        warnings.warn(f"{source}: {note}", stacklevel=3)  # the caller of MixCard.load
    common = {k: data[k] for k in _COMMON if k in data and k not in ("schema_version", "method")}
    return {**common, "schema_version": SCHEMA_VERSION, "method": method, method: params}


def _claim_v1(data: dict[str, Any], source: str) -> tuple[str, dict[str, Any]]:
    """The (method, section) of a schema-1 card (or keyword form): the first method plugin that claims it."""
    from mixzoo.core.plugins import mixing_methods

    for name, method in sorted(mixing_methods().items()):
        params = method.upgrade_v1(data, source)
        if params is not None:
            return name, params
    raise InputError(f"{source}: a schema-1 card that no installed mixing method reads; re-create it with"
                     " `mixzoo mix`")


def _published(path: str | Path) -> Path:
    """A card path, the file of a published card name (``mixzoo_cards`` hook) or of a reference a plugin resolves
    (``mixzoo_resolve_card`` hook, e.g. ``hf-hub:ORG/NAME``), given as a string or as the ``Path`` a CLI argument
    typed as a path makes of it (a name has no .toml / .json suffix, so no card file is shadowed)."""
    from mixzoo.core.plugins import published_cards

    cards = published_cards()
    if str(path) in cards:
        return Path(cards[str(path)])
    if ":" in str(path) and not Path(path).exists():  # a reference a plugin resolves, e.g. hf-hub:ORG/NAME
        from mixzoo.core.plugins import first_result

        found = first_result("mixzoo_resolve_card", f"find mix card {str(path)!r}", name=str(path))
        if found is not None:
            return Path(found)
    return Path(path)


# ------------------------------------------------------------------------------------------------ helpers
def _validate(card: MixCard, source: str) -> None:
    for name in _TABLES:
        if not isinstance(getattr(card, name), dict):
            raise InputError(f"{source}: field {name!r} must be a table, got {type(getattr(card, name)).__name__}")
    if card.dataset is not None and not isinstance(card.dataset, str):
        raise InputError(f"{source}: field 'dataset' must be a string, got {card.dataset!r}")
    if not isinstance(card.notes, list) or not all(isinstance(n, str) for n in card.notes):
        raise InputError(f"{source}: field 'notes' must be a list of strings")
    for name, digest in card.weights.items():
        plain_name(name, f"{source}: field 'weights' entry")
        if not (isinstance(digest, str) and len(digest) == 64):
            raise field_error(source, f"weights.{name}", "a sha256 hex digest", digest)
    if not isinstance(card.params, dict):
        raise InputError(f"{source}: the method's section [{card.method}] must be a table")
    card.params = _method(card.method, source).validate(dict(card.params), source)
    _validate_records(card, source)


def field_error(source: str, name: str, want: str, got: Any) -> InputError:
    """The one-line error of a card field ``name`` (``TABLE.FIELD``) that is not ``want``, naming ``source``; what
    :meth:`~mixzoo.methods.MixingMethod.check_card` raises for the tables a method writes."""
    text = repr(got)
    text = text if len(text) <= 80 else text[:77] + "..."
    return InputError(f"{source}: field {name!r} must be {want}, got {text}; write the card with `mixzoo mix`")


def is_int(v: Any, low: int | None = None) -> bool:
    """``v`` is an int (not a bool) that a 64-bit integer holds (every count, seed and size mixzoo stores in a
    tensor or passes to torch), at least ``low`` when given."""
    return (isinstance(v, int) and not isinstance(v, bool) and -(2 ** 63) <= v <= 2 ** 63 - 1
            and (low is None or v >= low))


def _validate_records(card: MixCard, source: str) -> None:
    """The nested tables other commands read (the models, the data record) are typed here, and the tables the
    method writes by the method (:meth:`~mixzoo.methods.MixingMethod.check_card`, e.g. MixedNUTS's attack record),
    so that a hand-edited card fails on loading, not after an evaluation."""
    for role in ("abc", "rbc"):
        for key in ("name", "weight_hash"):
            value = getattr(card, role).get(key)
            if value is not None and not (isinstance(value, str) and value):
                raise field_error(source, f"{role}.{key}", "a non-empty string", value)
    _method(card.method, source).check_card(card, source)
    data = plain_values(card.data)  # an in-memory card may hold tensors or tuples
    for key in ("n", "n_clean", "n_attacked"):
        if data.get(key) is not None and not is_int(data[key], 0):
            raise field_error(source, f"data.{key}", "an integer >= 0", data[key])


ARRAYS_SUFFIX = ".arrays.json"
ARRAYS_FORMAT = "mixzoo card arrays 1"
INLINE_NUMBERS = 4  # an array of the method's section with more numbers than this goes to the sidecar


def check_sidecar(path: Path) -> Path:
    """The arrays sidecar ``STEM.arrays.json`` of the TOML card ``path``, refused (one line, before anything is
    written) when what is there is not a sidecar mixzoo wrote: another file, a directory, a FIFO, a link."""
    from mixzoo.core.paths import check_output, json_with

    return check_output(path.with_name(f"{path.stem}{ARRAYS_SUFFIX}"), what="a mix card's arrays file",
                        ours=json_with("format", "arrays"))


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
    import hashlib

    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _join_arrays(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """``data`` (a TOML card) with the arrays of its ``[arrays]`` sidecar put back; the sidecar must be beside the
    card and match the sha256 the card records (one-line errors naming the file)."""
    ref = data.get("arrays")
    method = data.get("method")
    _method(method, str(path))  # an unknown method is refused as it is without a sidecar
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
    import hashlib

    from mixzoo.core.reading import CARD_BYTES, read_text

    text = read_text(file, limit=CARD_BYTES, what="card arrays file")  # its size checked before reading
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
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
    import re

    def join(m: re.Match[str]) -> str:
        items = [line.strip().rstrip(",") for line in m.group(2).splitlines()]
        one = f"{m.group(1)}[{', '.join(items)}]"
        return one if len(one) <= width else m.group(0)

    compact = re.sub(r"(?m)^([^\n=]+= )\[\n((?: {4}[^\[\]\n]*,\n)+)\]", join, text)
    same = parse_text(compact, "toml", "the compact card") == parse_text(text, "toml", "the card")
    return compact if same else text


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


def _drop_none(v: Any) -> Any:
    """TOML has no null: drop ``None`` entries of tables; ``None`` inside arrays becomes nan."""
    if isinstance(v, dict):
        return {k: _drop_none(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [math.nan if x is None else _drop_none(x) for x in v]
    return v


@functools.cache
def git_commit() -> str | None:
    """The commit of the mixzoo source tree, if it is a git checkout (read-only ``git rev-parse``)."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent, capture_output=True,
                             text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def provenance(**extra: Any) -> dict[str, Any]:
    """The provenance table of a new card: mixzoo and torch versions, git commit, UTC creation time, ``extra``
    (e.g. MixedNUTS records its layer norm's version, so that a later change is detected when a card loads)."""
    from mixzoo.core import __version__

    out: dict[str, Any] = {"mixzoo_version": __version__, "torch_version": torch.__version__,
                           "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")}
    commit = git_commit()
    if commit:
        out["git_commit"] = commit
    out.update(extra)
    return out


__all__ = ["ARRAYS_SUFFIX", "SCHEMA_VERSION", "MixCard", "field_error", "git_commit", "is_int", "plain_values",
           "provenance", "upgrade_v1"]
