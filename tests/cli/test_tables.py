"""One rule for every table on stdout (:class:`mixzoo.core.commands.WholeTables`): without a terminal a table is
printed at its natural width, so that no name is cut at 80 columns."""

from __future__ import annotations

import io

from rich.table import Table
from typer.testing import CliRunner

from mixzoo.cli import app
from mixzoo.core.commands import WholeTables


def _table(cell: str) -> Table:
    table = Table(title="t")
    table.add_column("name")
    table.add_column("what")
    table.add_row(cell, "x " * 30)
    return table


def test_without_a_terminal_a_wide_table_is_printed_whole():
    name = "mixzoo_plugins.attacks_with_a_long_module_name:" + "y" * 40
    buf = io.StringIO()
    WholeTables(file=buf, width=80).print(_table(name))
    text = buf.getvalue()
    assert name in text and "…" not in text and max(map(len, text.splitlines())) > 80
    narrow = io.StringIO()
    WholeTables(file=narrow, width=80, force_terminal=True).print(_table(name))  # a terminal: its width
    assert max(len(line) for line in narrow.getvalue().splitlines() if "\x1b" not in line) <= 80


def test_plugins_prints_whole_module_names_without_a_terminal():
    from mixzoo.core.plugins import plugin_infos

    result = CliRunner().invoke(app, ["plugins"])
    assert result.exit_code == 0, result.output
    assert "…" not in result.stdout
    for info in plugin_infos():
        assert info.module in result.stdout, info.module
