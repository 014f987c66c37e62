"""``mixzoo``: a thin typer layer over the library. Each command calls one public function and prints its result.

One module per command family: :mod:`.models` (``list``, ``info``, ``fetch-list``), :mod:`.plugins`,
:mod:`.mixing` (``mix``), :mod:`.evaluation` (``bench``, ``sanity``, ``verify``), :mod:`.certify`, :mod:`.train`;
the options they share are declared once in :mod:`.options`, which also builds their
:class:`~mixzoo.core.settings.RunSettings`. The command group (:mod:`.group`) adds the commands plugins contribute
(hook ``mixzoo_cli_commands``; the built-in plugin ``share`` contributes :mod:`.share`'s ``push``, ``export`` and
``report`` that way).
"""

from __future__ import annotations

import typer

from mixzoo.cli import certify, evaluation, mixing, models, plugins, train
from mixzoo.cli.group import OneLineUsageErrors, PluginCommands, main_options, plugin_commands
from mixzoo.cli.options import parse_attack_options, parse_floats
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


__all__ = ["OneLineUsageErrors", "PluginCommands", "app", "main", "parse_attack_options", "parse_floats",
           "plugin_commands"]
