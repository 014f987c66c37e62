"""The mix card: everything needed to rebuild and audit a mixed classifier, for any mixing method.

One format for every method (schema 2): ``method = "NAME"`` (a :mod:`mixing method <mixzoo.methods>` plugin), the
pair (``[abc]``, ``[rbc]``: names and weight hashes), the threat model and attack record (``[attack]``), the data
(``[data]``), the method's own section (a table named after the method, e.g. ``[mixednuts]`` with s, p, c, alpha;
validated by the method), the files of trained methods (``[weights]``: file name -> sha256, next to the card) and
provenance. A small TOML (or JSON) file, written atomically; TOML's form and its arrays sidecar are
:mod:`mixzoo.core.card_sidecar`, the fields and their checks :mod:`mixzoo.core.card_fields`.

Files of schema 1 (a method's parameters at the top level) still load through :meth:`MixCard.load`: each method
plugin may claim one (:meth:`mixzoo.methods.MixingMethod.upgrade_v1`) and say what to re-run
(:meth:`~mixzoo.methods.MixingMethod.v1_warning`).
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import os
import subprocess
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from mixzoo.core.card_fields import (
    COMMON_FIELDS,
    SCHEMA_VERSION,
    TABLE_FIELDS,
    field_error,
    is_int,
    named_method,
    plain_values,
)
from mixzoo.core.card_sidecar import ARRAYS_SUFFIX, check_sidecar, join_arrays, toml_text
from mixzoo.core.checks import refuse_foreign_file
from mixzoo.core.errors import InputError, MissingFileError
from mixzoo.core.paths import inside, plain_name


@dataclass
class MixCard:
    """A mixed classifier: its method, its fitted section (``params``, validated by the method, one-line errors
    naming ``SECTION.FIELD``), its base models (``abc`` / ``rbc``: ``name`` and ``weight_hash``,
    :func:`mixzoo.zoo.pairs.model_hash`) and how it was obtained (``data``: :meth:`mixzoo.zoo.pairs.Pair.data_info`;
    ``attack``, ``weights``, ``provenance``: module docstring). Construction validates.
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
        return named_method(self.method, "mix card")

    # ------------------------------------------------------------------------------------------ dict / files
    def to_dict(self) -> dict[str, Any]:
        """Plain Python values (lists, dicts, numbers, strings, None): the common fields, then the method's
        section under the method's name."""
        out = {k: plain_values(getattr(self, k)) for k in COMMON_FIELDS}
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
        named_method(method, source)
        if not isinstance(data.get(method), dict):
            raise InputError(f"{source}: missing table [{method}] (the method's section); write the card with"
                             " `mixzoo mix`")
        unknown = sorted(set(data) - set(COMMON_FIELDS) - {method})
        if unknown:
            warnings.warn(f"{source}: ignoring unknown fields {', '.join(unknown)}", stacklevel=stacklevel)
        card = object.__new__(cls)  # validated below with ``source`` in the messages
        card.method, card.params, card.path = method, dict(data[method]), path
        for name in COMMON_FIELDS[2:]:
            default: Any = [] if name == "notes" else {} if name in TABLE_FIELDS else None
            setattr(card, name, data.get(name, default))
        card.schema_version = SCHEMA_VERSION
        _validate(card, source)
        return card

    def save(self, path: str | Path) -> Path:
        """Write the card atomically as TOML (``.toml``) or JSON (``.json``); returns the path. A TOML card's large
        arrays go to its sidecar (:func:`~mixzoo.core.card_sidecar.toml_text`); :meth:`load` puts them back."""
        from mixzoo.core.cache import atomic_write_text

        path = _card_path(path)
        if path.suffix == ".toml":
            text = toml_text(self.to_dict(), self.method, path)
        else:
            text = json.dumps(self.to_dict(), indent=2, allow_nan=True) + "\n"
        return atomic_write_text(path, text)

    def save_as(self, path: str | Path) -> Path:
        """Write the card to ``path`` with copies of its weight files (each checked against its sha256) renamed to
        the new stem (``card.x.safetensors`` -> ``NAME.x.safetensors``; parameters naming a file follow), so that
        several trained cards share a folder. Returns the new path; nothing is written when a weight file is missing
        or altered."""
        import shutil

        from mixzoo.core.cache import check_writable

        path = _card_path(check_writable(Path(path), what="card"))
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

        path = _card_path(path)
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
            data = _upgrade_v1(data, str(path))
        if isinstance(data, dict) and data.get("schema_version") == SCHEMA_VERSION:
            validate(CardFile, data, str(path), "write the card with `mixzoo mix`")
        if isinstance(data, dict) and "arrays" in data:
            named_method(data.get("method"), str(path))  # an unknown method is refused as it is without a sidecar
            data = join_arrays(data, path)
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


def _card_path(path: str | Path) -> Path:
    """``path`` as a ``Path``, refused unless it ends in .toml or .json (the two forms :meth:`MixCard.save` writes)."""
    path = Path(path)
    if path.suffix not in (".toml", ".json"):
        raise InputError(f"card path {path} must end in .toml or .json")
    return path


def _published(path: str | Path) -> Path:
    """A card path, or the file of a published card name (``mixzoo_cards``) or of a reference a plugin resolves
    (``mixzoo_resolve_card``, e.g. ``hf-hub:ORG/NAME``), as a string or a ``Path`` (a name has no .toml / .json
    suffix, so no card file is shadowed)."""
    from mixzoo.core.plugins import table

    cards = table("card")
    if str(path) in cards:
        return Path(cards[str(path)])
    if ":" in str(path) and not Path(path).exists():  # a reference a plugin resolves, e.g. hf-hub:ORG/NAME
        from mixzoo.core.plugins import first_result

        found = first_result("mixzoo_resolve_card", f"find mix card {str(path)!r}", name=str(path))
        if found is not None:
            return Path(found)
    return Path(path)


def _upgrade_v1(data: dict[str, Any], source: str) -> dict[str, Any]:
    """A schema-1 card as a schema-2 table: the section of the first method plugin (by name) that claims it, its
    ``v1_warning`` issued as a warning."""
    from mixzoo.core.plugins import table

    claims = ((name, plugin.upgrade_v1(data, source)) for name, plugin in sorted(table("method").items()))
    method, params = next(((name, params) for name, params in claims if params is not None), (None, None))
    if method is None:
        raise InputError(f"{source}: a schema-1 card that no installed mixing method reads; re-create it with"
                         " `mixzoo mix`")
    note = named_method(method, source).v1_warning(data)
    if note:
        warnings.warn(f"{source}: {note}", stacklevel=3)  # the caller of MixCard.load
    common = {k: data[k] for k in COMMON_FIELDS if k in data and k not in ("schema_version", "method")}
    return {**common, "schema_version": SCHEMA_VERSION, "method": method, method: params}


# ------------------------------------------------------------------------------------------------ helpers
def _validate(card: MixCard, source: str) -> None:
    for name in TABLE_FIELDS:
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
    card.params = named_method(card.method, source).validate(dict(card.params), source)
    _validate_records(card, source)


def _validate_records(card: MixCard, source: str) -> None:
    """The models and the data record typed here, the tables the method writes by the method
    (:meth:`~mixzoo.methods.MixingMethod.check_card`): a hand-edited card fails on loading, not after an evaluation."""
    for role in ("abc", "rbc"):
        for key in ("name", "weight_hash"):
            value = getattr(card, role).get(key)
            if value is not None and not (isinstance(value, str) and value):
                raise field_error(source, f"{role}.{key}", "a non-empty string", value)
    named_method(card.method, source).check_card(card, source)
    data = plain_values(card.data)  # an in-memory card may hold tensors or tuples
    for key in ("n", "n_clean", "n_attacked"):
        if data.get(key) is not None and not is_int(data[key], 0):
            raise field_error(source, f"data.{key}", "an integer >= 0", data[key])


def git_output(*args: str) -> str | None:
    """The stripped output of the read-only ``git ARGS`` in the mixzoo source tree; None when it is not a git
    checkout (or git is missing or fails)."""
    try:
        out = subprocess.run(["git", *args], cwd=Path(__file__).resolve().parent, capture_output=True, text=True,
                             timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


@functools.cache
def git_commit() -> str | None:
    """The commit of the mixzoo source tree, if it is a git checkout (read-only ``git rev-parse``)."""
    return git_output("rev-parse", "HEAD") or None


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


__all__ = ["ARRAYS_SUFFIX", "SCHEMA_VERSION", "MixCard", "check_sidecar", "field_error", "git_commit", "is_int",
           "plain_values", "provenance"]
