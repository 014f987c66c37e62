"""The mix card: everything needed to rebuild and audit a MixedNUTS classifier (paper Eq. 5 parameters + provenance).

A card is a small TOML (or JSON) file. The top-level fields ``s``, ``p``, ``c``, ``alpha``, ``beta`` and ``clamp``
are what :class:`mixzoo.mixing.MixedClassifier` needs; the tables record which models (names and weight hashes),
which data, which attack and which grid produced them, and the Algorithm 1 objective over the grid (Fig. 9).
Writes are atomic (temporary file in the same directory, fsync, rename). TOML has no null: ``None`` values are
left out of TOML files and read back as ``None``.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import math
import subprocess
import tomllib
import warnings
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mixzoo.errors import InputError, MissingFileError

SCHEMA_VERSION = 1
METHODS = ("mmaa", "linear", "transfer", "square", "both", "guess")
REQUIRED = ("schema_version", "s", "p", "c", "alpha", "clamp")
_ORDER = ("schema_version", "s", "p", "c", "alpha", "beta", "clamp", "top_k", "temperature", "alpha_d", "objective",
          "method", "dataset", "notes", "abc", "rbc", "data", "attack", "grid", "provenance")


@dataclass
class MixCard:
    """Parameters of a mixed classifier and how they were obtained.

    ``method``: ``"mmaa"`` (Algorithm 1 on MMAA margins), ``"linear"`` (alpha of the linear baseline of Bai et al.:
    no LN/clamp/power, ABC at T = 1), ``"transfer"``/``"square"``/``"both"``/``"guess"`` (black-box options of
    App. D.5, :mod:`mixzoo.transfer`).
    ``alpha_d`` is the auxiliary mixing weight of Eq. 8 (Algorithm 1 with a linear clamp, s = p = 1, c = 0).
    ``grid`` holds ``s_values``, ``p_values``, ``c_values`` and ``objectives``/``alphas`` as nested lists [s][p][c].
    """

    s: float
    p: float
    c: float
    alpha: float
    beta: float | None = None
    clamp: str = "gelu"
    top_k: int | None = None
    temperature: float = 0.0
    alpha_d: float | None = None
    objective: float | None = None
    method: str = "mmaa"
    abc: dict[str, Any] = field(default_factory=dict)
    rbc: dict[str, Any] = field(default_factory=dict)
    dataset: str | None = None
    grid: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    attack: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        _validate(self, "mix card")

    @property
    def transform(self) -> bool:
        """Whether the RBC goes through M(s, p, c) (False for the linear baseline)."""
        return self.method != "linear"

    # ------------------------------------------------------------------------------------------ dict / files
    def to_dict(self) -> dict[str, Any]:
        """Plain Python values (lists, dicts, numbers, strings, None), top-level fields first."""
        raw = {f.name: getattr(self, f.name) for f in fields(self)}
        return {k: _plain(raw[k]) for k in _ORDER}

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "mix card") -> MixCard:
        """Build and validate a card; errors name ``source`` (e.g. the file) and the field."""
        if not isinstance(data, dict):
            raise InputError(f"{source}: a mix card must be a table of fields, got {type(data).__name__}")
        for name in REQUIRED:
            if name not in data:
                raise InputError(f"{source}: missing field {name!r}; write the card with `mixzoo mix` or add it")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            warnings.warn(f"{source}: ignoring unknown fields {', '.join(unknown)}", stacklevel=2)
        kwargs = {k: v for k, v in data.items() if k in known}
        card = cls.__new__(cls)  # validated below with ``source`` in the messages
        for f in fields(cls):
            if f.name in kwargs:
                setattr(card, f.name, kwargs[f.name])
            else:
                setattr(card, f.name, f.default_factory() if f.default_factory is not MISSING else f.default)
        _validate(card, source)
        return card

    def save(self, path: str | Path) -> Path:
        """Write the card atomically as TOML (``.toml``) or JSON (``.json``); returns the path."""
        from mixzoo.cache import atomic_write_text

        path = Path(path)
        data = self.to_dict()
        if path.suffix == ".toml":
            import tomli_w

            text = tomli_w.dumps(_drop_none(data))
        elif path.suffix == ".json":
            text = json.dumps(data, indent=2, allow_nan=True) + "\n"
        else:
            raise InputError(f"card path {path} must end in .toml or .json")
        return atomic_write_text(path, text)

    @staticmethod
    def check_path(path: str | Path) -> Path:
        """Refuse, before any work, a card path :meth:`save` could not write (suffix, directory, permissions)."""
        from mixzoo.cache import check_writable

        path = Path(path)
        if path.suffix not in (".toml", ".json"):
            raise InputError(f"card path {path} must end in .toml or .json")
        return check_writable(path, what="card")

    @classmethod
    def load(cls, path: str | Path) -> MixCard:
        """Read and validate a TOML or JSON card; a bad file is a one-line :class:`InputError` naming it."""
        path = Path(path)
        if path.suffix not in (".toml", ".json"):
            raise InputError(f"card path {path} must end in .toml or .json")
        if path.is_dir():
            raise InputError(f"mix card {path} is a directory; pass the card file `mixzoo mix --out` wrote")
        if not path.is_file():
            raise MissingFileError(f"mix card {path} does not exist; create it with `mixzoo mix --out {path}`")
        try:
            text = path.read_text(encoding="utf-8")
            data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
        except UnicodeDecodeError:
            raise InputError(f"{path}: not a text file (not UTF-8); pass the card `mixzoo mix --out` wrote") from None
        except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
            kind = "TOML" if path.suffix == ".toml" else "JSON"
            raise InputError(f"{path}: not valid {kind} ({str(exc).splitlines()[0]})") from None
        card = cls.from_dict(data, source=str(path))
        warn_if_old_layer_norm(card, str(path))
        return card

    def summary(self) -> str:
        """One line: the parameters."""
        return (f"s={self.s:.4g} p={self.p:.4g} c={self.c:.4g} alpha={self.alpha:.4g} clamp={self.clamp}"
                f" beta={self.beta} method={self.method}")


# ------------------------------------------------------------------------------------------------ helpers
def warn_if_old_layer_norm(card: MixCard, source: str) -> bool:
    """Warn (one line) when ``card`` was made by a mixzoo whose layer norm differed from the authors' (population
    variance, before ``provenance.layer_norm`` was recorded): its s, p, c and alpha were fitted for another LN
    (Sec. 4.2, App. D.7). Cards without a mixzoo provenance (hand-written) are not checked. Returns whether it
    warned."""
    from mixzoo.transforms import LAYER_NORM_VERSION

    recorded = card.provenance.get("layer_norm")
    if "mixzoo_version" not in card.provenance or recorded == LAYER_NORM_VERSION:
        return False
    warnings.warn(f"{source}: made with an older layer norm ({recorded or 'ln-1'}: population variance; now"
                  f" {LAYER_NORM_VERSION}: the authors' unbiased variance + 1e-8), so its s, p, c and alpha do not"
                  " fit this mixzoo; run `mixzoo mix` again", stacklevel=3)
    return True


def _number(card: MixCard, name: str, source: str, *, allow_none: bool = False) -> None:
    v = getattr(card, name)
    if v is None and allow_none:
        return
    if isinstance(v, bool) or not isinstance(v, int | float | np.integer | np.floating) or not math.isfinite(v):
        raise InputError(f"{source}: field {name!r} must be a finite number, got {v!r}")
    setattr(card, name, float(v))


def _validate(card: MixCard, source: str) -> None:
    if card.schema_version != SCHEMA_VERSION:
        raise InputError(f"{source}: schema_version {card.schema_version!r} is not supported (this mixzoo reads"
                         f" {SCHEMA_VERSION}); re-create the card with this mixzoo version")
    for name in ("s", "p", "c", "alpha", "temperature"):
        _number(card, name, source)
    for name in ("beta", "alpha_d", "objective"):
        _number(card, name, source, allow_none=True)
    if card.s <= 0 or card.p <= 0:
        raise InputError(f"{source}: fields 's' and 'p' must be positive, got s={card.s}, p={card.p}")
    if not 0.5 <= card.alpha <= 1.0:
        raise InputError(f"{source}: field 'alpha' must lie in [0.5, 1] (paper Eq. 1), got {card.alpha}")
    if card.beta is not None and not 0.0 <= card.beta <= 1.0:
        raise InputError(f"{source}: field 'beta' must lie in [0, 1], got {card.beta}")
    if card.alpha_d is not None and not 0.0 <= card.alpha_d <= 1.0:
        raise InputError(f"{source}: field 'alpha_d' must lie in [0, 1], got {card.alpha_d}")
    if card.temperature < 0:
        raise InputError(f"{source}: field 'temperature' must be >= 0, got {card.temperature}")
    if not isinstance(card.clamp, str) or not card.clamp:
        raise InputError(f"{source}: field 'clamp' must be a clamp name such as 'gelu', got {card.clamp!r}")
    if card.top_k is not None and (isinstance(card.top_k, bool) or not isinstance(card.top_k, int)
                                   or card.top_k < 2):
        raise InputError(f"{source}: field 'top_k' must be an integer >= 2 or absent, got {card.top_k!r}")
    if card.method not in METHODS:
        raise InputError(f"{source}: field 'method' must be one of {', '.join(METHODS)}, got {card.method!r}")
    if card.method in ("mmaa", "linear") and card.beta is None:
        raise InputError(f"{source}: missing field 'beta' (required for method {card.method!r})")
    for name in ("abc", "rbc", "grid", "data", "attack", "provenance"):
        if not isinstance(getattr(card, name), dict):
            raise InputError(f"{source}: field {name!r} must be a table, got {type(getattr(card, name)).__name__}")
    if card.dataset is not None and not isinstance(card.dataset, str):
        raise InputError(f"{source}: field 'dataset' must be a string, got {card.dataset!r}")
    if not isinstance(card.notes, list) or not all(isinstance(n, str) for n in card.notes):
        raise InputError(f"{source}: field 'notes' must be a list of strings")
    _validate_records(card, source)


_MMAA_KEYS = {"eps": "a positive number", "norm": "'Linf' or 'L2'", "n_iter": "a positive integer",
              "n_target_classes": "an integer >= 0", "n_restarts": "a positive integer", "seed": "an integer"}


def _field_error(source: str, name: str, want: str, got: Any) -> InputError:
    return InputError(f"{source}: field {name!r} must be {want}, got {got!r}; write the card with `mixzoo mix`")


def _is_int(v: Any, low: int | None = None) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and (low is None or v >= low)


def _validate_records(card: MixCard, source: str) -> None:
    """The nested tables other commands read (models, the MMAA record, the data record, the grid) are typed here,
    so that a hand-edited card fails on loading, not after an evaluation."""
    for role in ("abc", "rbc"):
        for key in ("name", "weight_hash"):
            value = getattr(card, role).get(key)
            if value is not None and not (isinstance(value, str) and value):
                raise _field_error(source, f"{role}.{key}", "a non-empty string", value)
    att, data = _plain(card.attack), _plain(card.data)  # an in-memory card may hold tensors or tuples
    if att.get("name") == "mmaa":  # the record `mixzoo mix` writes; check, bench and sanity re-run it
        for key, want in _MMAA_KEYS.items():
            v = att.get(key)
            ok = {"eps": isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v > 0,
                  "norm": v in ("Linf", "L2"), "n_iter": _is_int(v, 1), "n_target_classes": _is_int(v, 0),
                  "n_restarts": _is_int(v, 1), "seed": _is_int(v)}[key]
            if not ok:
                raise _field_error(source, f"attack.{key}", want, v)
        for key in ("batch_size", "top_k"):
            if att.get(key) is not None and not _is_int(att[key], 1):
                raise _field_error(source, f"attack.{key}", "a positive integer", att[key])
        if not _is_int(data.get("n"), 1):
            raise _field_error(source, "data.n", "the number of calibration images", data.get("n"))
    for key in ("n", "n_clean", "n_attacked"):
        if data.get(key) is not None and not _is_int(data[key], 0):
            raise _field_error(source, f"data.{key}", "an integer >= 0", data[key])
    _validate_grid(_plain(card.grid), source)


def _validate_grid(grid: dict[str, Any], source: str) -> None:
    if not grid:
        return
    axes = ("s_values", "p_values", "c_values")
    lengths = []
    for key in axes:
        v = grid.get(key)
        if not (isinstance(v, list) and v and all(isinstance(x, int | float) for x in v)):
            raise _field_error(source, f"grid.{key}", "a non-empty list of numbers", v)
        lengths.append(len(v))
    for key in ("objectives", "alphas"):
        if key not in grid and key == "alphas":
            continue
        try:
            shape = list(np.shape(np.asarray(grid.get(key), dtype=float)))
        except (TypeError, ValueError):
            shape = None
        if shape != lengths:
            raise _field_error(source, f"grid.{key}", f"a {'x'.join(map(str, lengths))} nested list of numbers",
                               "another shape" if shape is not None else grid.get(key))


def _plain(v: Any) -> Any:
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
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
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
    """The provenance table of a new card: mixzoo and torch versions, the layer norm's version
    (:data:`mixzoo.transforms.LAYER_NORM_VERSION`), git commit, UTC creation time, ``extra``."""
    from mixzoo import __version__
    from mixzoo.transforms import LAYER_NORM_VERSION

    out: dict[str, Any] = {"mixzoo_version": __version__, "torch_version": torch.__version__,
                           "layer_norm": LAYER_NORM_VERSION,
                           "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")}
    commit = git_commit()
    if commit:
        out["git_commit"] = commit
    out.update(extra)
    return out


__all__ = ["METHODS", "SCHEMA_VERSION", "MixCard", "git_commit", "provenance"]
