"""What `mixzoo --help`, `--version`, `mix --show-options` and bench's help tell a new user."""

from __future__ import annotations

import os
import subprocess
import sys

import click
import typer
from typer.testing import CliRunner

from mixzoo.cli import app


def _commands() -> dict[str, click.Command]:
    group = typer.main.get_command(app)
    ctx = click.Context(group)
    return {name: group.get_command(ctx, name) for name in group.list_commands(ctx)}


def test_version_prints_the_package_version():
    from mixzoo.core import __version__

    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"mixzoo {__version__}"


def test_every_bench_option_has_help():
    bench = _commands()["bench"]
    missing = [p.name for p in bench.params if p.param_type_name == "option" and not (p.help or "").strip()]
    assert not missing, f"bench options without help: {missing}"


def test_batch_size_help_does_not_claim_results_depend_on_it():
    for name in ("bench", "mix"):
        option = next(p for p in _commands()[name].params if p.name == "batch_size")
        assert "so results depend on it" not in option.help and "do not depend on it" in option.help


def test_device_defaults_to_auto_and_resolves_to_the_machine(monkeypatch):
    import torch

    from mixzoo.core.settings import RunSettings
    from mixzoo.methods.base import FitRequest

    for name, command in _commands().items():
        device = next((p for p in command.params if p.name == "device"), None)
        if device is not None:
            assert device.default == "auto", name
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert RunSettings(device="auto").device == "cuda"
    assert FitRequest(device="auto").device == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert RunSettings(device="auto").device == "cpu"
    assert RunSettings(device="auto").to_dict()["device"] == "cpu"  # what reports record
    assert RunSettings(device="cuda:1").device == "cuda:1"


def test_show_options_gives_defaults_and_no_internal_names():
    import dataclasses

    from mixzoo.methods.mixednuts.fitting import MixSettings

    result = CliRunner().invoke(app, ["mix", "--show-options"], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    assert "_grid_option" not in result.output
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:4]]
            for line in result.output.splitlines() if line.startswith("│ --")}
    defaults = {f.name: f.default for f in dataclasses.fields(MixSettings)}  # what the fit uses when not given
    for key in ("beta", "clamp", "n_iter", "n_target_classes", "n_restarts", "objective", "optimizer", "search"):
        type_name, default = rows[f"--{key.replace('_', '-')}"]
        assert default == str(defaults[key]), key


def test_top_level_help_wraps_only_where_the_line_is_full():
    env = {**os.environ, "COLUMNS": "80", "TERMINAL_WIDTH": "80"}
    text = subprocess.run([sys.executable, "-m", "mixzoo.cli", "--help"], capture_output=True, text=True, env=env,
                          check=True).stdout
    lines = text.splitlines()
    start = next(k for k, line in enumerate(lines) if "Commands" in line)
    body = [line for line in lines[start + 1:] if line.startswith("│")]
    width = max(len(line) for line in body)
    for line, following in zip(body, body[1:], strict=False):
        cells = following[1:-1]
        if cells[:17].strip():  # the next line starts another command
            continue
        first_word = cells.split()[0]
        room = width - 2 - len(line.rstrip("│ ").rstrip())
        assert len(first_word) + 1 > room, f"wrapped early:\n{line}\n{following}"


def test_published_cards_are_listed_and_shown():
    import json

    from mixzoo.core.plugins import table

    names = sorted(table("card"))
    assert "mixednuts-cifar10" in names
    listed = CliRunner().invoke(app, ["list", "--json"])
    assert listed.exit_code == 0, listed.output
    entries = {e["name"]: e for e in json.loads(listed.output)}
    assert all(entries[n]["role"] == "mixed" for n in names)
    only = json.loads(CliRunner().invoke(app, ["list", "--role", "mixed", "--json"]).output)
    assert sorted(e["name"] for e in only) == names
    assert not any(e["role"] == "mixed" for e in json.loads(
        CliRunner().invoke(app, ["list", "--role", "robust", "--json"]).output))
    shown = CliRunner().invoke(app, ["info", "mixednuts-cifar10"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert "peng2023-rawrn-70-16" in shown.output and "0.0314 (8/255)" in shown.output and "alpha" in shown.output
    data = json.loads(CliRunner().invoke(app, ["info", "mixednuts-cifar10", "--json"]).output)
    assert (data["method"], data["dataset"], data["rbc"]) == ("mixednuts", "cifar10", "peng2023-rawrn-70-16")
    unknown = CliRunner().invoke(app, ["info", "mixednuts-cifar11"])
    assert unknown.exit_code == 2 and "unknown model" in unknown.output


def test_commands_arrive_one_way_the_core_then_the_plugins_hook():
    """The core's commands are the cli package's own; every other command (the built-in plugins' included: push, export,
    report, check, transfer-params) arrives through the hook ``mixzoo_cli_commands``, as a third party's does."""
    import mixzoo.cli as cli
    from mixzoo.core.plugins import clear_caches, get_plugin_manager

    core = {c.callback.__module__ for c in cli.app.registered_commands}
    assert core == {f"mixzoo.cli.{m}" for m in ("models", "plugins", "mixing", "evaluation", "certify", "train")}, core
    names = set(_commands())
    assert names == {"list", "info", "fetch-list", "plugins", "new-plugin", "mix", "bench", "sanity", "certify",
                     "verify", "train", "push", "export", "report", "check", "transfer-params"}
    pm = get_plugin_manager()
    share = pm.get_plugin("share")
    assert share is not None
    pm.unregister(share)
    clear_caches()
    try:
        assert {"push", "export", "report"}.isdisjoint(_commands())
    finally:
        pm.register(share, name="share")
        clear_caches()
