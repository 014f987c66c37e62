"""The run record: everything that decides an evaluation's outcome, one frozen, hashable :class:`RunRecord`, built
where a command starts (:func:`mixzoo.evaluation.bench.bench`), written whole into ``report.json`` with its
:meth:`~RunRecord.digest` and copied by the report's settings (:func:`mixzoo.evaluation.bench.report_settings`).
Variants (a curve point, the matched baseline's attack) are :meth:`~RunRecord.replace` d copies; ``torchrun`` ranks
are checked to agree before any attack (:func:`check_ranks_agree`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from mixzoo.core.errors import InputError


def canonical_json(value: Any) -> str:
    """The canonical JSON of ``value``: sorted keys, no spaces, non-JSON values as their ``str``."""
    return json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))


def sha256_of(value: Any) -> str:
    """sha256 (64 hex digits) of :func:`canonical_json` of ``value``."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


@dataclass(frozen=True)
class RunRecord:
    """What decides an evaluation's outcome (all fields plain, hashable values; options as canonical JSON).

    ``card``: sha256 of the card's own fields (method, parameters, weight hashes), ``None`` without a card;
    ``abc`` / ``rbc``: the evaluated models' weights (with their normalisation); ``dataset`` / ``split`` / ``n`` /
    ``examples``: the data set, its split, how many examples and the fingerprint of exactly those images;
    ``norm`` / ``eps``: the threat model; ``attack`` / ``attack_options`` / ``attack_code``: the attack plugin,
    its options (canonical JSON) and its code version; ``seed`` / ``per_example_seeds`` / ``batch_size``: how
    random numbers are drawn (the batch size decides them only without per-example seeds); ``precision``: the
    attack's arithmetic; ``extra_attacks``: whether card rows also get their method's extra attacks;
    ``budget`` / ``count_overrides``: the budget (:mod:`mixzoo.core.budget`) and the user's ``-O`` counts
    (:data:`~mixzoo.core.budget.COUNTS`, canonical JSON), which with the card give each extra attack's options
    (:func:`~mixzoo.evaluation.worst_case.declared_attacks`); ``mixzoo_version``.
    """

    card: str | None = None
    abc: str | None = None
    rbc: str | None = None
    dataset: str | None = None
    split: str = "evaluation"
    n: int = 0
    examples: str | None = None
    norm: str | None = None
    eps: float | None = None
    attack: str = ""
    attack_options: str = "{}"
    attack_code: str | None = None
    seed: int = 0
    per_example_seeds: bool = True
    batch_size: int = 0
    precision: str = "float32"
    extra_attacks: bool = True
    budget: str = "standard"
    count_overrides: str = "{}"
    mixzoo_version: str = ""

    def __post_init__(self) -> None:
        for name in ("attack_options", "count_overrides"):  # given as a mapping: kept as its canonical JSON
            if not isinstance(getattr(self, name), str):
                object.__setattr__(self, name, canonical_json(dict(getattr(self, name) or {})))

    @classmethod
    def from_settings(cls, settings: Any, **fields: Any) -> RunRecord:
        """The record of a :class:`~mixzoo.core.settings.RunSettings` (its attack's code version looked up) with
        ``fields`` (card, models, data, resolved eps / norm, ``count_overrides``)."""
        from mixzoo.core import __version__

        base = dict(attack=settings.attack, attack_options=canonical_json(dict(settings.attack_options or {})),
                    attack_code=attack_code(settings.attack), eps=settings.eps, norm=settings.norm, n=settings.n,
                    seed=settings.seed, per_example_seeds=settings.per_example_seeds,
                    batch_size=settings.batch_size, precision=settings.precision,
                    extra_attacks=settings.extra_attacks, budget=settings.budget, mixzoo_version=__version__)
        return cls(**{**base, **fields})

    def replace(self, **changes: Any) -> RunRecord:
        """A copy with ``changes`` (``attack_options`` may be a dict); an unknown field is a one-line error."""
        names = [f.name for f in dataclasses.fields(self)]
        unknown = sorted(set(changes) - set(names))
        if unknown:
            raise InputError(f"unknown run record field {unknown[0]!r}; the fields are {', '.join(names)}")
        if "attack" in changes and "attack_code" not in changes:
            changes["attack_code"] = attack_code(changes["attack"])
        return dataclasses.replace(self, **changes)

    def options(self) -> dict[str, Any]:
        """The attack options as a dict."""
        from mixzoo.core.reading import json_value

        return json_value(self.attack_options)

    def counts(self) -> dict[str, Any]:
        """The ``-O`` counts set on every component, as a dict."""
        from mixzoo.core.reading import json_value

        return json_value(self.count_overrides)

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain values (the options and counts as dicts), for reports."""
        out = dataclasses.asdict(self)
        out["attack_options"], out["count_overrides"] = self.options(), self.counts()
        return out

    def digest(self) -> str:
        """:func:`sha256_of` :meth:`to_dict`: equal for equal records, in any process."""
        return sha256_of(self.to_dict())

    def differences(self, other: RunRecord | dict[str, Any]) -> list[tuple[str, Any, Any]]:
        """``(field, this value, other value)`` for every field the two records disagree on, in field order."""
        mine, theirs = self.to_dict(), other.to_dict() if isinstance(other, RunRecord) else dict(other)
        return [(k, mine[k], theirs.get(k)) for k in mine if canonical_json(mine[k]) != canonical_json(theirs.get(k))]


def attack_code(attack: str) -> str | None:
    """The attack plugin's ``code_version`` (``None`` when it declares none or is not installed)."""
    from mixzoo.core.plugins import lookup

    try:
        return getattr(lookup("attack", attack), "code_version", None)
    except Exception:  # noqa: BLE001 - an unknown attack is refused where it is used, with its own message
        return None


def check_ranks_agree(record: RunRecord, what: str = "run record") -> None:
    """Under ``torchrun``: every rank's ``record`` gathered on every rank; when one differs, every rank stops with
    the same one-line error naming the first differing field and each rank's value (nothing in one process)."""
    from mixzoo.core.distributed import gather, world

    if world().size == 1:
        return
    records = gather(record.to_dict())
    first = RunRecord(**records[0])  # its options and counts as dicts: kept as their canonical JSON
    for rank, other in enumerate(records[1:], start=1):
        diff = first.differences(other)
        if diff:
            name, a, b = diff[0]
            more = f" (and {', '.join(d[0] for d in diff[1:])})" if len(diff) > 1 else ""
            raise InputError(f"torchrun ranks disagree on the {what}: {name} is {a!r} on rank 0 and {b!r} on rank "
                             f"{rank}{more}; nothing was attacked or written: start every rank with the same"
                             " arguments")


__all__ = ["RunRecord", "attack_code", "canonical_json", "check_ranks_agree", "sha256_of"]
