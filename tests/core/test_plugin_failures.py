"""One faulty plugin costs only its own names (issue 31, item 2): colliding names, invalid entries and hooks that
return the wrong type are left out and reported by `mixzoo plugins`; every other command keeps working, and only a
command that uses a colliding name fails, with one line naming both plugins."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from mixzoo.cli import app
from mixzoo.core.errors import MixzooError, PluginError, UnknownNameError
from mixzoo.core.plugins import (
    clear_caches,
    hookimpl,
    lookup,
    plugin_failures,
    plugin_infos,
    register_plugin,
    runtime_failures,
)
from mixzoo.core.plugins import unregister_plugin as _unregister
from mixzoo.core.registry import get_registry, get_spec, list_models

ROBUST = {"role": "robust", "dataset": "digits", "num_classes": 10, "input_size": [1, 8, 8],
          "source": {"kind": "zoo"}, "threat_model": "Linf", "epsilon": 0.1}


@pytest.fixture()
def plugin():
    names: list[str] = []

    def add(obj, name: str) -> str:
        names.append(register_plugin(obj, name=name))
        return names[-1]

    yield add
    for name in names:
        _unregister(name)
    clear_caches()
    assert not any(n in plugin_failures() for n in names)


class Clamps:
    def __init__(self, **clamps):
        self.clamps = clamps

    @hookimpl
    def mixzoo_clamp_functions(self):
        return dict(self.clamps)


class Specs:
    def __init__(self, entries):
        self.entries = entries

    @hookimpl
    def mixzoo_model_specs(self):
        return self.entries


def one_line(result) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    return lines[0]


def test_a_clamp_two_plugins_provide_fails_only_when_used_and_plugins_reports_it(plugin):
    plugin(Clamps(**{"i31-clamp": abs, "i31-own": abs}), "i31-first")
    plugin(Clamps(**{"i31-clamp": abs}), "i31-second")
    assert lookup("clamp", "gelu") is not None  # another clamp: works
    assert lookup("clamp", "i31-own") is abs  # the first plugin's other clamp: works
    with pytest.raises(PluginError) as err:
        lookup("clamp", "i31-clamp")
    assert "i31-first" in str(err.value) and "i31-second" in str(err.value) and "\n" not in str(err.value)
    errors = {i.name: i.error for i in plugin_infos()}
    assert "i31-clamp" in errors["i31-first"] and "i31-second" in errors["i31-first"]
    assert "i31-clamp" in errors["i31-second"] and "i31-first" in errors["i31-second"]
    result = CliRunner().invoke(app, ["plugins"])
    assert result.exit_code == 0 and "i31-clamp" in result.output
    result = CliRunner().invoke(app, ["mix", "--abc", "digits-std", "--rbc", "digits-pgd", "--dataset", "digits",
                                      "--clamp", "i31-clamp", "--out", "never-written.toml"])
    assert result.exit_code == 2
    assert "i31-first" in one_line(result) and "i31-second" in one_line(result)


def test_a_model_name_two_plugins_provide_fails_only_when_used(plugin):
    plugin(Specs([{"name": "i31-clash", **ROBUST}, {"name": "i31-fine", **ROBUST}]), "i31-specs-a")
    plugin(Specs([{"name": "i31-clash", **ROBUST}]), "i31-specs-b")
    assert get_spec("i31-fine").plugin == "i31-specs-a" and get_spec("digits-std").name == "digits-std"
    assert "i31-clash" not in [s.name for s in list_models()]
    with pytest.raises(PluginError) as err:
        get_spec("i31-clash")
    assert "i31-specs-a" in str(err.value) and "i31-specs-b" in str(err.value)
    runner = CliRunner()
    assert runner.invoke(app, ["list"]).exit_code == 0
    result = runner.invoke(app, ["plugins", "--json"])
    assert result.exit_code == 0, result.output
    errors = {p["name"]: p["error"] for p in json.loads(result.output)}
    assert "i31-clash" in errors["i31-specs-a"] and "i31-clash" in errors["i31-specs-b"]
    result = runner.invoke(app, ["info", "i31-clash"])
    assert result.exit_code == 2 and "i31-specs-a" in one_line(result) and "i31-specs-b" in one_line(result)


def test_an_invalid_entry_is_left_out_and_the_plugins_other_entries_stay(plugin):
    no_eps = {k: v for k, v in ROBUST.items() if k != "epsilon"}
    plugin(Specs([{"name": "i31-no-eps", **no_eps}, {"name": "i31-valid", **ROBUST}]), "i31-invalid")
    registry = get_registry()
    assert "i31-no-eps" not in registry and "i31-valid" in registry
    failure = plugin_failures()["i31-invalid"]
    assert "i31-no-eps" in failure and "epsilon" in failure
    result = CliRunner().invoke(app, ["list", "--dataset", "digits"])
    assert result.exit_code == 0 and "i31-valid" in result.output


def test_a_spec_hook_returning_a_dict_is_reported_not_a_traceback(plugin):
    plugin(Specs({"i31-dict": ROBUST}), "i31-dict-specs")
    runner = CliRunner()
    for args in (["list"], ["plugins"], ["info", "digits-std"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, (args, result.output, result.exception)
    assert "returned dict" in plugin_failures()["i31-dict-specs"]
    result = runner.invoke(app, ["plugins", "--json"])
    assert "returned dict" in {p["name"]: p["error"] for p in json.loads(result.output)}["i31-dict-specs"]


def test_unknown_model_names_the_plugins_that_failed(plugin):
    plugin(Specs({"i31-dict": ROBUST}), "i31-broken-specs")
    with pytest.raises(UnknownNameError) as err:
        get_spec("i31-dict")
    assert "plugins that failed to load: i31-broken-specs" in str(err.value) and "mixzoo plugins" in str(err.value)


class CorruptLoader:
    """A plugin whose model's weights file is corrupt: its loader raises safetensors' own error."""

    def __init__(self, path):
        self.path = str(path)

    @hookimpl
    def mixzoo_model_specs(self):
        return [{"name": "i31-corrupt", **ROBUST, "source": {"kind": "i31-corrupt-kind", "file": self.path}}]

    @hookimpl
    def mixzoo_load_model(self, spec, device, allow_unsafe):
        if spec.source["kind"] != "i31-corrupt-kind":
            return None
        from safetensors.torch import load_file

        load_file(spec.source["file"])
        raise AssertionError("unreachable: the file is corrupt")


def test_an_exception_in_a_plugin_loader_is_one_line_naming_plugin_and_model(plugin, tmp_path):
    from mixzoo.zoo.models import load_model

    weights = tmp_path / "weights.safetensors"
    weights.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not a header....")
    plugin(CorruptLoader(weights), "i31-corrupt-plugin")
    before = runtime_failures()
    with pytest.raises(MixzooError) as err:  # a damaged file is the user's to fetch again, not the plugin's fault
        load_model("i31-corrupt")
    msg = str(err.value)
    assert err.type.__name__ == "FileProblemError" and "\n" not in msg
    assert "load model 'i31-corrupt'" in msg and "'i31-corrupt-plugin'" in msg and "SafetensorError" in msg
    assert "reinstall the plugin" not in msg and "fetch it again" in msg and runtime_failures() == before
    assert load_model("digits-std").name == "digits-std"  # other plugins' models still load
    result = CliRunner().invoke(app, ["mix", "--abc", "digits-std", "--rbc", "i31-corrupt", "--dataset", "digits",
                                      "--out", str(tmp_path / "card.toml")])
    assert result.exit_code == 2 and "i31-corrupt-plugin" in one_line(result)
    assert not (tmp_path / "card.toml").exists()


# ------------------------------------------------------------------------------------------ memory at the edge
def test_memory_that_cannot_be_allocated_is_the_users_one_line_not_a_plugin_fault():
    """A real allocation no machine can make (torch's CPU allocator refuses it) inside a plugin call: one line
    naming the size and the fix, not recorded as a plugin's fault."""
    import torch

    from mixzoo.core.plugins.guard import guarded_call
    from mixzoo.core.plugins.state import STATE

    name = "memory-test-plugin"  # not an installed entry point: nothing is kept on disk
    try:
        with pytest.raises(MixzooError, match=r"not enough memory to run attack 'x' \(\d+ bytes were asked\)") as err:
            guarded_call(name, "run attack 'x'", torch.zeros, 10 ** 11, 10 ** 7)
        assert "\n" not in str(err.value) and "--batch-size" in str(err.value)
        assert name not in runtime_failures()
        with pytest.raises(PluginError):  # any other failure is still the plugin's
            guarded_call(name, "run attack 'x'", torch.zeros, -1)
        assert name in runtime_failures()
    finally:
        STATE.runtime.pop(name, None)


def test_a_command_that_cannot_allocate_its_memory_ends_in_one_line():
    import torch
    import typer

    from mixzoo.core.commands import command

    app = typer.Typer()

    @app.command()
    @command
    def huge() -> None:
        torch.empty(2 ** 62, dtype=torch.uint8)

    res = CliRunner().invoke(app, [])
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: not enough memory"), res.output
