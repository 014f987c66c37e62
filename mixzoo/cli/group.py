"""The ``mixzoo`` command group: the core's commands then the plugins' (hook ``mixzoo_cli_commands``), usage errors
as one line, and the options every command shares (``--version``, ``--threads``)."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import click
import typer
from rich.markup import escape
from typer.core import TyperGroup

from mixzoo.core.commands import epilog_of
from mixzoo.core.errors import MixzooError
from mixzoo.core.progress import console

# the commands that start without torch (the others configure torch's threads before their work)
NO_TORCH = ("list", "info", "plugins", "fetch-list", "mix")


class PluginCommands(TyperGroup):
    """The core's commands, then those plugins add through the hook ``mixzoo_cli_commands`` (loaded only when
    the command list is shown or a name is not the core's; a core name always wins)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        core = super().list_commands(ctx)
        return core + sorted(set(plugin_commands()) - set(core))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = super().get_command(ctx, cmd_name)
        found = found if found is not None else plugin_commands().get(cmd_name)
        if found is not None and not found.short_help:  # `mixzoo --help` lists it: one paragraph, wrapped to fit
            found.short_help = " ".join((found.help or "").split())
        return found


def plugin_commands() -> dict[str, click.Command]:
    """The commands plugins contribute (hook ``mixzoo_cli_commands``), as click commands by name."""
    from mixzoo.core.plugins import table

    group = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    found = table("command")
    for name, fn in sorted(found.items()):
        group.command(name, epilog=epilog_of(fn))(fn)
    return dict(typer.main.get_group(group).commands) if found else {}


class OneLineUsageErrors(PluginCommands):
    """Usage errors (an option's value of the wrong type, a missing argument, an unknown command) as one line on
    stderr naming the fix, exit status 2, like every other refusal (``error: ...``), not a usage box."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            from typer._click import exceptions as click_errors  # typer's own copy of click
        except ImportError:  # a typer built on click itself
            from click import exceptions as click_errors

        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except typer.Abort:  # Ctrl-C (or the end of input) outside a command's own handling
            console.print("interrupted", highlight=False)
            sys.exit(130)
        except getattr(click_errors, "NoArgsIsHelpError", ()) as exc:  # plain `mixzoo`: the help, as before
            exc.show()
            sys.exit(exc.exit_code)
        except click_errors.ClickException as exc:
            where = getattr(getattr(exc, "ctx", None), "command_path", None) or "mixzoo"
            where = "mixzoo" + where[where.index(" "):] if " " in where else "mixzoo"
            text = " ".join(exc.format_message().split()).rstrip(".")
            console.print(f"[red]error:[/red] {escape(text)}; see `{where} --help`", highlight=False,
                          soft_wrap=True)
            sys.exit(exc.exit_code)
        sys.exit(code if isinstance(code, int) else 0)


def _show_version(value: bool) -> None:
    if value:
        from mixzoo.core import __version__

        print(f"mixzoo {__version__}")
        raise typer.Exit()


def main_options(ctx: typer.Context,
                 version: Annotated[bool, typer.Option("--version", callback=_show_version, is_eager=True,
                                                       help="print mixzoo's version and exit")] = False,
                 threads: Annotated[int | None, typer.Option(
                     "--threads", help="torch's intra-op threads, 1 to the CPUs mixzoo may use (default: those idle "
                                       "at the start, from the affinity mask, cgroup quota and load average; at "
                                       "most 2 for small networks; also $MIXZOO_THREADS)")] = None) -> None:
    """Mixed classifiers for any accurate/robust model pair, by name."""
    from mixzoo.core.threads import configure

    try:  # before any torch work: every command runs with the threads chosen for the machine and the work
        configure(threads, torch_now=ctx.invoked_subcommand not in NO_TORCH)
    except MixzooError as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None


__all__ = ["NO_TORCH", "OneLineUsageErrors", "PluginCommands", "main_options", "plugin_commands"]
