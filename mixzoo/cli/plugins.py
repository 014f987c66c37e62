"""``mixzoo plugins``: the installed plugins, their versions, modules and what each provides
(:func:`mixzoo.core.plugins.plugin_infos`); ``mixzoo new-plugin``: a plugin package to publish
(:func:`mixzoo.scaffold.new_plugin`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from mixzoo.core.commands import AsJson, command, examples, out_console


@command
@examples('mixzoo plugins', 'mixzoo plugins --json', 'mixzoo plugins --check')
def plugins(
    as_json: AsJson = False,
    check: Annotated[bool, typer.Option("--check", help="also call every hook and build every table (imports torch):"
                                                        " list the names each plugin provides and the faults found"
                                                        " there")] = False,
) -> None:
    """List installed plugins, their versions, modules and hooks; a plugin that fails to import shows its error.
    --check also calls every hook (see its help)."""
    from dataclasses import asdict

    from mixzoo.core.plugins import plugin_infos

    infos = plugin_infos(check=check)
    if as_json:
        print(json.dumps([asdict(i) for i in infos], indent=2))
        return
    table = Table(title="mixzoo plugins" + (" (checked)" if check else ""))
    for col in ("plugin", "version", "module", "provides" if check else "hooks", "status"):
        table.add_column(col)
    for i in infos:
        shown = {**i.provides} if check else {"hooks": [h.removeprefix("mixzoo_") for h in i.hooks], **i.provides}
        provides = "; ".join(f"{k}: {', '.join(v)}" for k, v in shown.items() if v)
        status = f"[red]{escape(i.error)}" if i.error else "[green]ok"
        if i.deprecations:
            status += "\n[yellow]deprecated: " + escape("; ".join(i.deprecations))
        if i.hints:
            status += "\n[yellow]" + escape("; ".join(i.hints))
        table.add_row(escape(i.name), i.version, escape(i.module), escape(provides), status)
    out_console.print(table)
    if not check:
        out_console.print("`mixzoo plugins --check` calls every hook and compares what each plugin declares with them")


@command
@examples("mixzoo new-plugin acme", "mixzoo new-plugin acme --kinds model,attack --directory ~/src")
def new_plugin(
    name: Annotated[str, typer.Argument(help="the plugin's name: the package is mixzoo-plugin-NAME, every entry"
                                             " NAME-...")],
    kinds: Annotated[str, typer.Option(help="comma-separated kinds to include, of model, dataset, clamp, optimizer,"
                                            " attack, method, command (default: all)")] = "",
    directory: Annotated[Path, typer.Option(help="where to create the package's folder")] = Path("."),
) -> None:
    """Write a plugin package (pyproject with the mixzoo entry point, one module per kind, tests, README) that
    installs and runs at once: `pip install -e FOLDER`, then `mixzoo plugins` lists it."""
    from mixzoo.scaffold import new_plugin as write_package

    target = write_package(name, directory, kinds=kinds.split(",") if kinds else None)
    print(f"wrote {target}; next: pip install -e {target} && python -m pytest {target}/tests && mixzoo plugins")


COMMANDS: dict[str, Callable[..., None]] = {"plugins": plugins, "new-plugin": new_plugin}
