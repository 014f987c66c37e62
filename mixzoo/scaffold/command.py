"""``mixzoo new-plugin NAME``: the typer layer over :func:`mixzoo.scaffold.new_plugin`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mixzoo.core.commands import command, examples
from mixzoo.scaffold.package import KINDS, new_plugin


@command
@examples("mixzoo new-plugin acme", "mixzoo new-plugin acme --kinds model,attack --directory ~/src")
def new_plugin_command(
    name: Annotated[str, typer.Argument(help="the plugin's name: the package is mixzoo-plugin-NAME, every entry"
                                             " NAME-...")],
    kinds: Annotated[str, typer.Option(help=f"comma-separated kinds to include, of {','.join(KINDS)}")]
    = ",".join(KINDS),
    directory: Annotated[Path, typer.Option(help="where to create the package's folder")] = Path("."),
) -> None:
    """Write a plugin package (pyproject with the mixzoo entry point, one module per kind, tests, README) that
    installs and runs at once: `pip install -e FOLDER`, then `mixzoo plugins` lists it."""
    target = new_plugin(name, directory, kinds=kinds.split(","))
    print(f"wrote {target}; next: pip install -e {target} && python -m pytest {target}/tests && mixzoo plugins")
