"""The schema of the files mixzoo reads that users or other tools touch (mix cards' common fields, bench reports'
``report.json``, a pushed repository's base-model references, cache entries), as pydantic models for :func:`validate`
(parsing, with its size, nesting and duplicate-key checks, is :func:`mixzoo.core.reading.parse_text`'s).

Models allow fields they do not name (files carry more than a reader needs); the fields they name are typed strictly
(``"ten"`` is not a number, ``true`` is not 1).
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from mixzoo.core.errors import InputError
from mixzoo.core.reading import depth_error, shown

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


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(the whole file)"


def validation_message(exc: ValidationError, source: str, fix: str) -> str:
    """The first problem of a pydantic :class:`ValidationError` as one line naming ``source`` and the field."""
    err = exc.errors(include_url=False)[0]
    where = _loc(tuple(err.get("loc", ())))
    if err.get("type") == "missing":
        return f"{source}: missing field {where!r}; {fix}"
    if err.get("type") == "value_error":  # a check of ours: its message names the values
        msg = " ".join(str((err.get("ctx") or {}).get("error", err.get("msg"))).split())
        return f"{source}: {msg}; {fix}" if where == "(the whole file)" else f"{source}: field {where!r}: {msg}; {fix}"
    msg = " ".join(str(err.get("msg", "is not valid")).split())
    msg = msg[0].lower() + msg[1:] if msg else msg
    return f"{source}: field {where!r}: {msg}, got {shown(err.get('input'))}; {fix}"


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
# A report keeps each truth once and its copies beside it: a row's figures beside its per-image outcomes, the
# settings beside the run record, the record beside its digest. Reading one checks every copy against its truth,
# so no reader (verify, report --format robustbench, push) can print a figure the outcomes do not give.
Outcomes = Annotated[str, Field(strict=True, pattern=r"^[01]*$")]


class Component(Record):
    """A row's attack component: ``own_outcomes`` (a clean-scope component's stand-alone outcomes, one character
    per image as the row's) is the truth of ``own_broken``, the clean-correct images they leave out."""

    name: Name
    newly_broken: Count | None = None
    own_broken: Count | None = None
    own_outcomes: Outcomes | None = None
    broken: Count | None = None


def whole(fraction: float, n: int, what: str) -> int:
    """``fraction`` of ``n`` images as a count; a ``ValueError`` when it is no whole number of them."""
    count = round(fraction * n)
    if not math.isclose(count, fraction * n, abs_tol=1e-6):
        raise ValueError(f"{what} {fraction} is no whole number of the row's {n} images")
    return count


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
    clean_outcomes: Outcomes | None = None
    robust_outcomes: Outcomes | None = None

    @model_validator(mode="after")
    def _consistent(self) -> ReportRow:
        where = f"row {self.name!r}"
        if self.robust_accuracy > self.clean_accuracy + 1e-9:
            raise ValueError(f"{where}: robust_accuracy {self.robust_accuracy} is above clean_accuracy"
                             f" {self.clean_accuracy}, which no attack gives")
        clean = whole(self.clean_accuracy, self.n, f"{where}: clean_accuracy")
        robust = whole(self.robust_accuracy, self.n, f"{where}: robust_accuracy")
        for what, text, count in (("clean", self.clean_outcomes, clean), ("robust", self.robust_outcomes, robust)):
            if text is None:
                continue  # a report of a mixzoo before outcomes were kept: its figures stand alone
            if len(text) != self.n:
                raise ValueError(f"{where}: {what}_outcomes has {len(text)} images, the row says n = {self.n}")
            if text.count("1") != count:
                raise ValueError(f"{where}: {what}_accuracy is {count / self.n!r} but its {what}_outcomes give"
                                 f" {text.count('1') / self.n!r} ({text.count('1')} of {self.n})")
        if self.clean_outcomes is not None and self.robust_outcomes is not None and any(
                r == "1" and c == "0" for c, r in zip(self.clean_outcomes, self.robust_outcomes, strict=True)):
            raise ValueError(f"{where}: an image is robust but not clean in its outcomes, which no attack gives")
        counted = [c.newly_broken for c in self.components]
        if counted and None not in counted and sum(counted) != clean - robust:  # type: ignore[arg-type]
            raise ValueError(f"{where}: its components broke {sum(counted)} images (newly_broken)"  # type: ignore
                             f" but its accuracies say {clean - robust} ({clean} clean, {robust} robust)")
        for comp in self.components:
            own = own_breaks(comp.model_dump(), self.clean_outcomes, self.robust_outcomes, where)
            low, high = comp.newly_broken or 0, clean - robust  # at least its new breaks, at most the worst case's
            if own is not None and not low <= own <= high:
                raise ValueError(f"{where}: component {comp.name!r} broke {own} images on its own, outside"
                                 f" {low} (its newly_broken) to {high} (the row's worst case)")
        return self


def own_breaks(comp: dict[str, Any], clean: str | None, robust: str | None, where: str) -> int | None:
    """A row's component's own breaks (``None``: not recorded): counted from its ``own_outcomes`` (one per image,
    correct only where ``clean`` and wherever ``robust``, the row's outcomes), which ``own_broken`` must then
    equal; a report of a mixzoo before they were kept has the count alone. A ``ValueError`` naming ``where`` (the
    row), the component and both values when they disagree."""
    own, count = comp.get("own_outcomes"), comp.get("own_broken")
    if own is None:
        return count
    name = f"{where}: component {comp['name']!r}"
    if clean is None or robust is None or len(own) != len(clean):
        raise ValueError(f"{name}: own_outcomes has {len(own)} images, the row's outcomes"
                         f" {'none' if clean is None or robust is None else len(clean)}")
    if any((o == "1" and c == "0") or (r == "1" and o == "0") for o, c, r in zip(own, clean, robust, strict=True)):
        raise ValueError(f"{name}: its own_outcomes call an image correct that is not clean, or broken that is"
                         " robust, which no attack gives")
    derived = clean.count("1") - own.count("1")
    if count is not None and count != derived:
        raise ValueError(f"{name}: own_broken is {count} but its own_outcomes give {derived}")
    return derived


def counts(row: dict[str, Any]) -> tuple[int, int, int]:
    """``(n, clean-correct, robust)`` images of a report row (:class:`ReportRow`, already validated): counted in its
    per-image outcomes, or, in a report of a mixzoo before outcomes were kept, its accuracies' whole numbers.
    Every figure a reader prints, exports or pushes is derived from these."""
    n = int(row["n"])
    clean, robust = row.get("clean_outcomes"), row.get("robust_outcomes")
    return (n, clean.count("1") if clean is not None else round(row["clean_accuracy"] * n),
            robust.count("1") if robust is not None else round(row["robust_accuracy"] * n))


class ReportSettings(Record):
    attack: Name
    eps: Radius
    norm: Literal["Linf", "L2"]
    seed: Int64 | None = None


class ReportDataset(Record):
    name: Name | None = None
    split: Text | None = None
    n: PositiveCount | None = None
    fingerprint: Text | None = None


# settings field -> the run record's field it copies (mixzoo.core.record.RunRecord)
SETTINGS_FROM_RECORD = {"attack": "attack", "eps": "eps", "norm": "norm", "seed": "seed", "batch_size": "batch_size",
                        "per_example_seeds": "per_example_seeds", "extra_attacks": "extra_attacks",
                        "attack_options": "attack_options", "precision_policy": "precision", "budget": "budget"}
# record fields a run record of an older mixzoo lacks: its settings' copy is then checked against nothing, and
# what needs the field (``verify --recheck`` of the extra attacks) refuses the report
LATER_RECORD_FIELDS = ("budget", "count_overrides")


def record_problem(report: ReportFile) -> str | None:
    """Why the report's parts disagree with its run record (``None`` when they agree or there is no record): the
    record's digest recomputed from its fields, every settings field that copies one of them
    (:data:`SETTINGS_FROM_RECORD`), the cards' digest, the data set's name and fingerprint, each row's size."""
    from mixzoo.core.record import canonical_json, sha256_of

    record = getattr(report, "record", None)
    if not record:  # a report of a mixzoo before run records: nothing to check against
        return None
    if not isinstance(record, dict) or not isinstance(record.get("digest"), str):
        return "field 'record' is not a run record with its digest"
    fields = {k: v for k, v in record.items() if k != "digest"}
    if sha256_of(fields) != record["digest"]:
        return (f"the run record's digest {record['digest'][:12]}... is not the digest of its fields"
                f" ({sha256_of(fields)[:12]}...)")
    settings = report.settings.model_dump()
    copies = [(f"settings.{k}", settings[k], record.get(r)) for k, r in SETTINGS_FROM_RECORD.items()
              if k in settings and (r in record or r not in LATER_RECORD_FIELDS)]
    if "precision" in settings and record.get("precision") != "auto":
        copies.append(("settings.precision", settings["precision"], record.get("precision")))
    component = (settings.get("components") or {}).get("attack") if isinstance(settings.get("components"),
                                                                               dict) else None
    if isinstance(component, dict):
        copies += [("settings.components.attack.attack", component.get("attack"), record.get("attack")),
                   ("settings.components.attack.options", component.get("options"), record.get("attack_options"))]
    cards = getattr(report, "cards", None)
    if cards and record.get("card") is not None:  # the cards benched: their digest is the record's
        copies.append(("the cards' digest (field 'cards')", sha256_of(cards), record["card"]))
    ds = report.dataset
    copies += [(f"dataset.{k}", getattr(ds, k), record.get(r)) for k, r in (("name", "dataset"),
                                                                            ("fingerprint", "examples"))
               if getattr(ds, k) is not None]
    copies += [(f"row {m.name!r} n", m.n, ds.n) for m in report.models if ds.n is not None]
    for where, stated, truth in copies:
        if canonical_json(stated) != canonical_json(truth):
            return f"{where} is {shown(stated)} but the run record says {shown(truth)}"
    return None


class ReportFile(Record):
    """A ``mixzoo bench`` report.json, as far as other commands read it: every figure checked against the
    per-image outcomes it copies (:class:`ReportRow`), the settings against the run record, the record against
    its digest (:func:`record_problem`)."""

    settings: ReportSettings
    models: Annotated[list[ReportRow], Field(min_length=1)]
    dataset: ReportDataset = ReportDataset()

    @model_validator(mode="after")
    def _agrees(self) -> ReportFile:
        problem = record_problem(self)
        if problem is not None:
            raise ValueError(f"{problem}; the report was edited or mixes runs")
        return self


# ------------------------------------------------------------------------------------- a pushed Hub repository
class BaseModelRef(Record):
    name: Name | None = None
    file: Name | None = None


class BaseModelsFile(Record):
    """``base_models.json`` of a repository ``mixzoo push`` wrote."""

    abc: BaseModelRef
    rbc: BaseModelRef


__all__ = ["BaseModelsFile", "CardFile", "Count", "Fraction", "Int64", "Name", "PositiveCount", "Record", "ReportFile",
           "ReportRow", "ReportSettings", "Sha256", "counts", "own_breaks", "record_problem", "validate",
           "validation_message", "whole"]
