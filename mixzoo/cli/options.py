"""The options several commands share, declared once as option groups (frozen dataclasses whose fields are typer
options; a command takes a group as one parameter annotated with its class, :func:`grouped`), and the one function
that turns them into :class:`~mixzoo.core.settings.RunSettings` (:func:`run_settings`).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

import typer

from mixzoo.core.commands import (
    AllowUnsafe,
    AsJson,
    AttackName,
    Budget,
    CacheDir,
    DataDir,
    Device,
    DryRun,
    ExtraAttacks,
    NoCache,
    PerExampleSeeds,
    Precision,
)
from mixzoo.core.errors import MixzooError

if typing.TYPE_CHECKING:
    from mixzoo.core.settings import RunSettings

F = TypeVar("F", bound=Callable[..., Any])

AttackBatch = Annotated[str, typer.Option(
    help="images per attack batch, or auto: on a GPU the batch that fits in its free memory (one attack step's "
         "measured memory per image), on a CPU 250; with per-example seeds, the default, results do not depend on "
         "it; recorded in the report")]
ShowAttackOptions = Annotated[bool, typer.Option("--show-options", help="print the attack's options (type, default, "
                                                                     "range, meaning) and exit")]
AttackOptions = Annotated[list[str] | None, typer.Option(
    "--attack-option", "-O", metavar="KEY=VALUE",
    help="an option of the attack, repeatable, e.g. -O n_iter=200 -O n_restarts=2 (numbers, true/false, "
         "comma-separated lists); --show-options lists the attack's options")]
Norm = Annotated[str | None, typer.Option(help="Linf | L2 (default: the card's, else the RBC's)")]
Seed = Annotated[int, typer.Option(help="seed of the attacks' random draws")]


@dataclass(frozen=True)
class AttackGroup:
    """The attack options ``bench`` and ``sanity`` share: the shared attack, its budget and options, and how it
    runs (seeds, batches, arithmetic)."""

    attack: AttackName = None
    budget: Budget = "standard"
    attack_option: AttackOptions = None
    show_options: ShowAttackOptions = False
    norm: Norm = None
    seed: Seed = 0
    batch_size: AttackBatch = "250"
    per_example_seeds: PerExampleSeeds = True
    extra_attacks: ExtraAttacks = True
    precision: Precision = "float32"


@dataclass(frozen=True)
class MachineGroup:
    """Where the data set files are, the torch device, and whether pickled checkpoints may be loaded."""

    data_dir: DataDir = None
    device: Device = "auto"
    allow_unsafe: AllowUnsafe = False


@dataclass(frozen=True)
class CacheGroup:
    """The cache a command reads and writes."""

    cache_dir: CacheDir = None
    no_cache: NoCache = False


@dataclass(frozen=True)
class EvalGroup(CacheGroup, MachineGroup, AttackGroup):
    """What ``bench`` and ``sanity`` share: :class:`AttackGroup`'s, :class:`MachineGroup`'s and :class:`CacheGroup`'s
    options in that order, then ``--dry-run`` and ``--json``."""

    dry_run: DryRun = False
    as_json: AsJson = False


GROUPS = (AttackGroup, MachineGroup, CacheGroup, EvalGroup)


def grouped(fn: F) -> F:
    """``fn`` with each parameter annotated with an option group (:data:`GROUPS`) shown to typer as that group's
    fields, and called with one instance of the group in that parameter."""
    hints = typing.get_type_hints(fn, include_extras=True)
    params: list[inspect.Parameter] = []
    groups: dict[str, type] = {}
    for p in inspect.signature(fn).parameters.values():
        if hints.get(p.name) in GROUPS:
            groups[p.name] = cls = hints[p.name]
            fields = typing.get_type_hints(cls, include_extras=True)
            params += [inspect.Parameter(f.name, p.kind, default=f.default,
                                         annotation=fields[f.name]) for f in dataclasses.fields(cls)]
        else:
            params.append(p.replace(annotation=hints.get(p.name, p.annotation)))

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        for name, cls in groups.items():
            kwargs[name] = cls(**{f.name: kwargs.pop(f.name) for f in dataclasses.fields(cls) if f.name in kwargs})
        return fn(*args, **kwargs)

    wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    return wrapper  # type: ignore[return-value]


def chosen_attack(group: AttackGroup, default: str | None = None) -> str:
    """The shared attack ``group`` asks for: ``--attack``, else its budget's, else ``default`` (else
    :class:`RunSettings`' default)."""
    from mixzoo.core.budget import shared_attack
    from mixzoo.core.settings import DEFAULT_ATTACK

    return shared_attack(group.budget, group.attack, default if default is not None else DEFAULT_ATTACK)


def run_settings(attack: AttackGroup | None = None, machine: MachineGroup | None = None,
                 cache: CacheGroup | None = None, *, default: str | None = None, **fields: Any) -> RunSettings:
    """The :class:`RunSettings` of a command's option groups and its own ``fields`` (``n``, ``eps``, ``abc``, ...):
    the one place a command's options become settings. ``default``: the shared attack when the options name none
    (:func:`chosen_attack`). An :class:`EvalGroup` as ``attack`` is also the machine and cache groups."""
    from mixzoo.core.settings import RunSettings

    if isinstance(attack, EvalGroup):
        machine, cache = attack, attack

    values: dict[str, Any] = {}
    if attack is not None:
        from mixzoo.attacks.memory import parse_batch_size

        values.update(attack=chosen_attack(attack, default),
                      attack_options=parse_attack_options(attack.attack_option) or {},
                      batch_size=parse_batch_size(attack.batch_size), budget=attack.budget, norm=attack.norm,
                      seed=attack.seed, per_example_seeds=attack.per_example_seeds,
                      extra_attacks=attack.extra_attacks, precision=attack.precision)
    if machine is not None:
        values.update(data_dir=machine.data_dir, device=machine.device, allow_unsafe=machine.allow_unsafe)
    if cache is not None:
        values.update(cache_dir=cache.cache_dir, use_cache=not cache.no_cache)
    return RunSettings(**{**values, **fields})


def parse_attack_options(values: list[str] | None) -> dict[str, Any] | None:
    """``["n_iter=200", "components=apgd-ce,apgd-t"]`` -> ``{"n_iter": 200, "components": ["apgd-ce", "apgd-t"]}``,
    read by mixzoo's one ``KEY=VALUE`` parser (:func:`mixzoo.core.options.parse_pairs`)."""
    from mixzoo.core.options import parse_pairs

    return parse_pairs(values, "-O") if values else None


def parse_floats(text: str | None, option: str) -> list[float] | None:
    """``"0.1,0.2"`` -> ``[0.1, 0.2]`` (``None`` for no text); a one-line error naming ``option`` otherwise."""
    if not text:
        return None
    try:
        return [float(v) for v in text.split(",")]
    except ValueError:
        raise MixzooError(f"{option} {text!r} is not a comma-separated list of numbers, e.g. 0.1,0.2,0.5") from None


def print_options(title: str, specs: dict[str, Any], spelled: Callable[[str], str]) -> None:
    """Option specs (:class:`mixzoo.core.options.OptionSpec`) as a table: option, type, default, range, meaning."""
    from rich.table import Table
    from rich.text import Text

    from mixzoo.core.commands import out_console

    table = Table(title=title)
    for col in ("option", "type", "default", "range", "meaning"):
        table.add_column(col, no_wrap=col == "option", overflow="fold")
    for key, spec in sorted(specs.items()):
        table.add_row(*(Text(cell) for cell in (spelled(key), spec.type_name, spec.default_text, spec.range_text,
                                                spec.help)))
    out_console.print(table)


def print_attack_options(name: str) -> None:
    """``bench --show-options`` / ``sanity --show-options``: the attack's options as a table."""
    from mixzoo.core.plugins import lookup

    print_options(f"options of attack {name} (-O KEY=VALUE)", lookup("attack", name).options_spec, lambda key: key)


__all__ = ["AttackGroup", "CacheGroup", "EvalGroup", "MachineGroup", "chosen_attack", "grouped",
           "parse_attack_options", "parse_floats", "print_attack_options", "print_options", "run_settings"]
