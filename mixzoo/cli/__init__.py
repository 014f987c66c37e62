"""``mixzoo``: a thin typer layer over the library, one module per command family; each command calls one public
function and prints its result. The options they share are in :mod:`.options`; :mod:`.group` adds the commands
plugins contribute (hook ``mixzoo_cli_commands``, as the built-in plugin ``share`` does with :mod:`.share`).
"""

from __future__ import annotations

import typer

from mixzoo.cli import certify, evaluation, mixing, models, plugins, train
from mixzoo.cli.group import OneLineUsageErrors, main_options
from mixzoo.core.commands import epilog_of

app = typer.Typer(cls=OneLineUsageErrors, help="Mixed classifiers for any accurate/robust model pair, by name.",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
app.callback()(main_options)
for _family in (models, plugins, mixing, evaluation, certify, train):  # `mixzoo --help` lists them in this order
    for _name, _fn in _family.COMMANDS.items():  # each command's --help ends with its examples
        app.command(_name, epilog=epilog_of(_fn),
                    context_settings=getattr(_family, "CONTEXT", {}).get(_name))(_fn)


def main() -> None:
    app()


__all__ = ["app", "main"]
