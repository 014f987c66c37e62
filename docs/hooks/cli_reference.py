"""MkDocs hook: the CLI reference and the methods' option tables are generated from the code at build time.

``docs/reference/cli.md`` holds the marker ``<!-- cli-reference -->``; this hook replaces it with one section per
command of the click command tree (``typer.main.get_command(mixzoo.cli.app)``): the command's help, its usage line
and a table of its arguments and options with their help and defaults. Commands that plugins add appear as they
load, so the page always matches the installed CLI.

A method page's marker ``<!-- method-options:NAME -->`` becomes a table of the mixing method NAME's fit options
(``MixingMethod.options``, given as ``-O KEY=VALUE`` to ``mixzoo mix``) and its ``fit_cost`` line.
"""

from __future__ import annotations

import re
from typing import Any

try:  # typer >= 0.25 carries its own copy of click
    from typer._click.core import Context
except ImportError:  # pragma: no cover - older typer uses click itself
    from click import Context

MARKER = "<!-- cli-reference -->"
PAGE = "reference/cli.md"


def command_tree() -> Any:
    import typer.main

    import mixzoo.cli

    return typer.main.get_command(mixzoo.cli.app)


def _cell(text: str | None) -> str:
    return " ".join((text or "").split()).replace("|", "\\|")


def _is_option(param: Any) -> bool:
    return getattr(param, "param_type_name", "") == "option"


def _default(param: Any) -> str:
    default = param.default
    if isinstance(default, bool) and not getattr(param, "secondary_opts", None):
        return ""  # a plain flag: off unless given
    if default is None or callable(default) or default == () or default == []:
        return ""
    if isinstance(default, bool):
        return f"`{(param.opts if default else param.secondary_opts)[0]}`"
    return f"`{default}`"


def _names(param: Any) -> str:
    if not _is_option(param):
        return f"`{param.name}`" + (" ..." if param.nargs == -1 else "")
    return " / ".join(f"`{o}`" for o in [*param.opts, *param.secondary_opts])


def examples_markdown(epilog: str | None) -> list[str]:
    """The command's Examples block (its ``--help`` epilog) as a shell code block."""
    if not epilog or "Examples:" not in epilog:
        return []
    commands = [line.strip() for line in epilog.split("Examples:", 1)[1].splitlines() if line.strip()]
    return ["Examples:", "", "```bash", *commands, "```", ""] if commands else []


def command_markdown(name: str, cmd: Any, ctx: Any) -> str:
    help_text = (cmd.help or "").strip()
    usage = " ".join(cmd.collect_usage_pieces(ctx))
    lines = [f"## `mixzoo {name}`", "", help_text, "", "```", f"mixzoo {name} {usage}".rstrip(), "```", ""]
    lines += examples_markdown(getattr(cmd, "epilog", None))
    params = [p for p in cmd.params if not (_is_option(p) and p.name == "help")]
    if params:
        lines += ["| argument / option | meaning | default |", "|---|---|---|"]
        for p in params:
            helptext = getattr(p, "help", None) or ""
            lines.append(f"| {_names(p)} | {_cell(helptext)} | {_default(p)} |")
        lines.append("")
    return "\n".join(lines)


def cli_markdown() -> str:
    root = command_tree()
    ctx = Context(root, info_name="mixzoo")
    parts = []
    for name in root.list_commands(ctx):  # as `mixzoo --help` lists them: the core's, then the plugins'
        cmd = root.get_command(ctx, name)
        if cmd is None or getattr(cmd, "hidden", False):
            continue
        parts.append(command_markdown(name, cmd, Context(cmd, info_name=name, parent=ctx)))
    return "\n".join(parts)


METHOD_MARKER = re.compile(r"<!-- method-options:([\w-]+) -->")


def method_options_markdown(name: str) -> str:
    from mixzoo.core.plugins import lookup

    method = lookup("method", name)
    lines = [f"Fit cost: {method.fit_cost or 'not stated'}.", "",
             "Options are given to `mixzoo mix --method " + name + "` as `--KEY VALUE` or `-O KEY=VALUE`:", "",
             "| option | type | default | meaning |", "|---|---|---|---|"]
    for key, spec in method.option_specs().items():
        default = f"`{spec.default_text}`" if spec.default_text else ""
        lines.append(f"| `--{key.replace('_', '-')}` | {spec.type_name} | {_cell(default)} | {_cell(spec.help)} |")
    return "\n".join(lines) + "\n"


def on_page_markdown(markdown: str, page, **kwargs) -> str:  # noqa: ANN001 - MkDocs hook signature
    if page.file.src_uri == PAGE and MARKER in markdown:
        markdown = markdown.replace(MARKER, cli_markdown())
    return METHOD_MARKER.sub(lambda m: method_options_markdown(m.group(1)), markdown)
