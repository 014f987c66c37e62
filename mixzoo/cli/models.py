"""``mixzoo list``, ``info`` and ``fetch-list``: the models and published mix cards by name, one entry, and the
files a command would read (:func:`mixzoo.core.registry.list_models`, :func:`mixzoo.core.registry.get_spec`,
:func:`mixzoo.zoo.files.fetch_list`). None of them imports torch or uses the network."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from mixzoo.core.commands import AsJson, DataDir, command, examples, out_console
from mixzoo.core.labels import eps_text


@command
@examples('mixzoo list --role robust --dataset cifar10', 'mixzoo list --dataset fashion-mnist --json')
def list_cmd(
    role: Annotated[str | None, typer.Option(help="accurate | robust | mixed (the published mix cards)")] = None,
    dataset: Annotated[str | None, typer.Option(help="e.g. fashion-mnist, cifar10, imagenet")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print a JSON list of entries")] = False,
) -> None:
    """List the models that can be mixed, and the published mix cards, by name."""
    from mixzoo.core.catalog import ROLE, list_cards
    from mixzoo.core.registry import list_models

    specs = list_models(role=role if role != ROLE else None, dataset=dataset) if role != ROLE else []
    cards = list_cards(dataset=dataset) if role in (None, ROLE) else []
    if as_json:
        print(json.dumps([s.to_dict() for s in specs] + cards, indent=2))
        return
    table = Table(title=f"{len(specs)} models" + (f", {len(cards)} published mix cards" if cards else ""))
    table.add_column("name", no_wrap=True)  # names are what users type: never cut or folded
    for col in ("role", "dataset", "threat", "eps", "clean", "robust", "plugin"):
        table.add_column(col)
    for s in specs:
        rep = s.reported or {}
        table.add_row(s.name, s.role, s.dataset, s.threat_model or "", eps_text(s.epsilon) if s.epsilon else "",
                      _pct(rep.get("clean")), reported_robust(rep), s.plugin)
    for c in cards:
        table.add_row(c["name"], f"{c['role']} ({c['method']})", c["dataset"] or "", c["threat_model"] or "",
                      eps_text(c["epsilon"]) if c["epsilon"] else "", "", "", "")
    out_console.print(table)


def _pct(v: Any) -> str:
    return f"{100 * v:.2f}%" if isinstance(v, int | float) and not isinstance(v, bool) else ""


# the robust accuracies a registry entry may report, in the order ``list`` prefers them, with their labels
ROBUST_REPORTED = (("autoattack", "AutoAttack"), ("robust", ""), ("pgd20", "PGD-20"))


def reported_robust(reported: dict[str, Any]) -> str:
    """``list``'s robust cell: the first robust accuracy of :data:`ROBUST_REPORTED` the entry reports, labelled
    with the attack that measured it (``44.47% PGD-20``)."""
    for key, label in ROBUST_REPORTED:
        if _pct(reported.get(key)):
            return f"{_pct(reported[key])} {label}".strip()
    return ""


def _empty(v: Any) -> bool:
    return v is None or (isinstance(v, str | list | dict | tuple) and not v)


def _cell(v: Any) -> str:
    """A value as text: lists comma-separated, tables as ``key value; ...``, numbers as written."""
    if isinstance(v, dict):
        return "; ".join(f"{k} {_cell(x)}" for k, x in v.items() if not _empty(x))
    if isinstance(v, list | tuple):
        return ", ".join(_cell(x) for x in v)
    return str(v)


def info_rows(entry: dict[str, Any]) -> list[tuple[str, str]]:
    """``info``'s rows (label, text) of a spec's or card's entry: empty fields left out, a table's fields one row
    each (``reported clean``: its accuracies as percentages), each note a row, eps with its /255 form."""
    rows: list[tuple[str, str]] = []
    for key, value in entry.items():
        if _empty(value):
            continue
        if key == "epsilon":
            rows.append((key, eps_text(value)))
        elif isinstance(value, dict):
            rows += [(f"{key} {k}", (_pct(x) if key == "reported" and isinstance(x, float) else "") or _cell(x))
                     for k, x in value.items() if not _empty(x)]
        elif key == "notes":
            rows += [("note", _cell(note)) for note in value]
        else:
            rows.append((key, _cell(value)))
    return rows


@command
@examples('mixzoo info fmnist-pgd', 'mixzoo info peng2023-rawrn-70-16 --json', 'mixzoo info mixednuts-cifar10')
def info(name: Annotated[str, typer.Argument(help="a registry name or alias, hf-hub: id, RobustBench name, or a "
                                                  "published mix card's name")],
         as_json: AsJson = False) -> None:
    """Show one model (registry name, alias, hf-hub: id or RobustBench name) or published mix card: its entry, and
    where its files belong on this machine, whether they are there and their size. Loads no weights and uses no
    network."""
    from mixzoo.core.catalog import card_entry
    from mixzoo.core.errors import MissingFileError, UnknownNameError
    from mixzoo.core.plugins import table as plugin_table
    from mixzoo.core.registry import get_spec
    from mixzoo.zoo.files import model_files

    try:
        with downloads_off():
            spec = get_spec(name)
    except UnknownNameError:
        if name not in plugin_table("card"):
            raise
        spec = None
    except MissingFileError as exc:
        raise MissingFileError(f"{name}: {exc}; `mixzoo info` uses no network (`mixzoo fetch-list {name}` says how "
                               "to fetch it)") from None
    entry = spec.to_dict() if spec is not None else card_entry(name)
    files = [f.to_dict() for f in model_files(spec)] if spec is not None else []
    if as_json:
        print(json.dumps({**entry, **({"files": files} if spec is not None else {})}, indent=2))
        return
    table = Table(title=entry["name"], show_header=False)
    for label, text in info_rows(entry):
        table.add_row(label, escape(text))
    for f in files:
        state = f"present, {f['size']:,} bytes" if f["present"] and f["size"] is not None else (
            "present" if f["present"] else "[red]missing")
        table.add_row("file", f"{escape(f['path'])} ({state})")
    out_console.print(table)


@contextlib.contextmanager
def downloads_off() -> Iterator[None]:
    """Name resolution from the local caches only: ``MIXZOO_OFFLINE=1`` while the block runs
    (:func:`mixzoo.zoo.files.offline`), so a hub file that is not cached is a one-line error, not a download."""
    before = os.environ.get("MIXZOO_OFFLINE")
    os.environ["MIXZOO_OFFLINE"] = "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ["MIXZOO_OFFLINE"]
        else:
            os.environ["MIXZOO_OFFLINE"] = before


@command
@examples('mixzoo fetch-list convnextv2-l liu2023-swin-l --data-dir /data/imagenet',
          'mixzoo fetch-list card.toml --json', 'mixzoo fetch-list hf-hub:org/model cifar10/Linf/Wong2020Fast')
def fetch_list_cmd(
    names: Annotated[list[str], typer.Argument(help="model names, hf-hub: ids, RobustBench names or mix cards")],
    dataset: Annotated[str | None, typer.Option(help="data set (default: each robust model's or card's)")] = None,
    data_dir: DataDir = None,
    as_json: AsJson = False,
) -> None:
    """Every file mix, bench and sanity would read for these models and their data: where it belongs on this
    machine, whether it is there, its size and how to fetch it, to prepare an offline machine in one go.
    Exits 1 when a file is missing."""
    from mixzoo.zoo.files import fetch_list

    files = fetch_list(names, dataset=dataset, data_dir=data_dir)
    if as_json:
        print(json.dumps([f.to_dict() for f in files], indent=2))
    else:
        table = Table(title=f"files for {', '.join(names)}")
        for col in ("for", "path", "present", "bytes", "fetch"):
            table.add_column(col)
        for f in files:
            table.add_row(escape(f.what), escape(f.path), "yes" if f.present else "[red]no",
                          f"{f.size:,}" if f.size is not None else "", escape(f.fetch))
        out_console.print(table)
    if not all(f.present for f in files):
        raise typer.Exit(1)


COMMANDS: dict[str, Callable[..., None]] = {"list": list_cmd, "info": info, "fetch-list": fetch_list_cmd}
