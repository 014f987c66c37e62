"""The schema of the files mixzoo reads that users or other tools touch: mix cards' common fields, bench reports
(``report.json``), a pushed repository's base-model references, and anything else a caller describes with a
pydantic model (cache entries).

Every file is untrusted input. :func:`parse_text` reads TOML or JSON with a bound on nesting (a file nested 10,000
levels deep is a one-line error, not a ``RecursionError``); :func:`validate` checks a value against a pydantic model
and turns the first problem into one line naming the file and the field (``report.json: field
'models[1].clean_accuracy' must be ... got -3``). Models allow fields they do not name (files carry more than a
reader needs); the fields they name are typed strictly (``"ten"`` is not a number, ``true`` is not 1).
"""

from __future__ import annotations

import json
import math
import tomllib
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from mixzoo.core.errors import InputError

MAX_DEPTH = 64  # no mixzoo file nests deeper than about 8 levels

M = TypeVar("M", bound=BaseModel)

Fraction = Annotated[float, Field(strict=True, ge=0, le=1, allow_inf_nan=False)]
Count = Annotated[int, Field(strict=True, ge=0, le=2 ** 63 - 1)]
PositiveCount = Annotated[int, Field(strict=True, ge=1, le=2 ** 63 - 1)]
Int64 = Annotated[int, Field(strict=True, ge=-(2 ** 63), le=2 ** 63 - 1)]
Name = Annotated[str, Field(strict=True, min_length=1, max_length=500)]
Text = Annotated[str, Field(strict=True)]
Sha256 = Annotated[str, Field(strict=True, pattern=r"^[0-9a-fA-F]{64}$")]
Radius = Annotated[float, Field(strict=True, gt=0, allow_inf_nan=False)]


class Record(BaseModel):
    """A table of a file: the fields it names are checked, any others are kept as they are."""

    model_config = ConfigDict(extra="allow", frozen=True)


def depth_error(source: str) -> InputError:
    return InputError(f"{source}: nested deeper than {MAX_DEPTH} levels, which no mixzoo file is; pass the file"
                      " mixzoo wrote")


def check_depth(value: Any, source: str, limit: int = MAX_DEPTH) -> None:
    """A one-line :class:`InputError` when ``value`` (parsed TOML / JSON) nests lists or tables deeper than
    ``limit``; iterative, so any depth is measured without recursion."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth >= limit:
                raise depth_error(source)
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))


def parse_text(text: str, kind: str, source: str) -> Any:
    """TOML (``kind="toml"``) or JSON text as Python values, nesting bounded (:data:`MAX_DEPTH`); a file that is not
    valid, or nested too deep, is a one-line :class:`InputError` naming ``source``."""
    try:
        data = tomllib.loads(text) if kind == "toml" else json.loads(text)
    except RecursionError:
        raise depth_error(source) from None
    except (tomllib.TOMLDecodeError, ValueError) as exc:
        raise InputError(f"{source}: not valid {kind.upper()} ({str(exc).splitlines()[0][:200]})") from None
    check_depth(data, source)
    return data


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(the whole file)"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def validation_message(exc: ValidationError, source: str, fix: str) -> str:
    """The first problem of a pydantic :class:`ValidationError` as one line naming ``source`` and the field."""
    err = exc.errors(include_url=False)[0]
    where = _loc(tuple(err.get("loc", ())))
    if err.get("type") == "missing":
        return f"{source}: missing field {where!r}; {fix}"
    msg = " ".join(str(err.get("msg", "is not valid")).split())
    msg = msg[0].lower() + msg[1:] if msg else msg
    return f"{source}: field {where!r}: {msg}, got {_short(err.get('input'))}; {fix}"


def validate(model: type[M], data: Any, source: str, fix: str = "pass the file mixzoo wrote") -> M:
    """``data`` checked against ``model``; the first problem is a one-line :class:`InputError` naming ``source``
    (the file) and the field, ending with ``fix``."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InputError(validation_message(exc, source, fix)) from None
    except RecursionError:
        raise depth_error(source) from None


# -------------------------------------------------------------------------------------------------- mix cards
class ModelRef(Record):
    name: Name | None = None
    weight_hash: Name | None = None


class CardFile(Record):
    """The common fields of a schema-2 mix card (the method's own section is the method's to check)."""

    schema_version: Literal[2]
    method: Name
    dataset: Text | None = None
    notes: list[Text] = []
    abc: ModelRef = ModelRef()
    rbc: ModelRef = ModelRef()
    data: dict[str, Any] = {}
    attack: dict[str, Any] = {}
    weights: dict[str, Sha256] = {}
    provenance: dict[str, Any] = {}


# ---------------------------------------------------------------------------------------------- bench reports
class Component(Record):
    name: Name
    own_broken: Count | None = None
    broken: Count | None = None


class ReportRow(Record):
    name: Name
    kind: Name
    n: PositiveCount
    clean_accuracy: Fraction
    robust_accuracy: Fraction
    components: list[Component] = []
    method: Text | None = None
    card: dict[str, Any] | None = None
    card_path: Text | None = None

    @model_validator(mode="after")
    def _consistent(self) -> ReportRow:
        if self.robust_accuracy > self.clean_accuracy + 1e-9:
            raise ValueError(f"robust_accuracy {self.robust_accuracy} is above clean_accuracy"
                             f" {self.clean_accuracy}, which no attack gives")
        clean = round(self.clean_accuracy * self.n)
        if not math.isclose(clean, self.clean_accuracy * self.n, abs_tol=1e-6):
            raise ValueError(f"clean_accuracy {self.clean_accuracy} is no whole number of the row's {self.n} images")
        for comp in self.components:
            if comp.own_broken is not None and comp.own_broken > clean:
                raise ValueError(f"component {comp.name!r} broke {comp.own_broken} of {clean} clean-correct images")
        return self


class ReportSettings(Record):
    attack: Name
    eps: Radius
    norm: Literal["Linf", "L2"]
    seed: Int64 | None = None


class ReportDataset(Record):
    name: Name | None = None
    split: Text | None = None


class ReportFile(Record):
    """A ``mixzoo bench`` report.json, as far as other commands read it."""

    settings: ReportSettings
    models: Annotated[list[ReportRow], Field(min_length=1)]
    dataset: ReportDataset = ReportDataset()


# ------------------------------------------------------------------------------------- a pushed Hub repository
class BaseModelRef(Record):
    name: Name | None = None
    file: Name | None = None


class BaseModelsFile(Record):
    """``base_models.json`` of a repository ``mixzoo push`` wrote."""

    abc: BaseModelRef
    rbc: BaseModelRef


__all__ = ["MAX_DEPTH", "BaseModelsFile", "CardFile", "Count", "Fraction", "Int64", "Name", "PositiveCount", "Record",
           "ReportFile", "ReportRow", "ReportSettings", "Sha256", "check_depth", "parse_text", "validate",
           "validation_message"]
