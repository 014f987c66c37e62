from __future__ import annotations

import importlib.metadata as md
import json
import os
import subprocess
import sys
import textwrap

import pytest
from typer.testing import CliRunner

from mixzoo.cli import app
from mixzoo.core.errors import PluginError, UnknownNameError
from mixzoo.core.plugins import (
    clear_caches,
    hookimpl,
    lookup,
    plugin_failures,
    plugin_infos,
    register_plugin,
    table,
    unregister_plugin,
)
from mixzoo.core.plugins.guard import collect
from mixzoo.core.plugins.state import STATE
from mixzoo.core.registry import ModelSpec, get_registry


class ClampPlugin:
    @hookimpl
    def mixzoo_clamp_functions(self):
        return {"test-double-clamp": lambda x: 2 * x}


class RaisingPlugin:
    @hookimpl
    def mixzoo_attacks(self):
        raise RuntimeError("boom")


def test_runtime_plugin_provides_clamp_and_raising_hook_is_contained():
    register_plugin(ClampPlugin(), name="test-clamp-plugin")
    register_plugin(RaisingPlugin(), name="test-raising-plugin")
    try:
        assert lookup("clamp", "test-double-clamp")(3) == 6
        with pytest.raises(UnknownNameError, match="unknown attack"):
            lookup("attack", "definitely-not-an-attack")
        assert "boom" in plugin_failures()["test-raising-plugin"]
    finally:
        unregister_plugin("test-clamp-plugin")
        unregister_plugin("test-raising-plugin")
        clear_caches()


def test_two_plugins_same_clamp_name_is_an_error_naming_both():
    register_plugin(ClampPlugin(), name="first-plugin")
    register_plugin(ClampPlugin(), name="second-plugin")
    try:
        with pytest.raises(PluginError) as err:
            lookup("clamp", "test-double-clamp")
        assert "first-plugin" in str(err.value) and "second-plugin" in str(err.value)
    finally:
        unregister_plugin("first-plugin")
        unregister_plugin("second-plugin")


@pytest.mark.subprocess
def test_plugin_that_fails_to_import_is_reported_and_others_work(tmp_path):
    """A real entry point (dist-info on sys.path) whose module raises on import."""
    dist = tmp_path / "broken_mixzoo_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-mixzoo-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[mixzoo]\nbroken = broken_mixzoo_plugin_mod\n")
    (tmp_path / "broken_mixzoo_plugin_mod.py").write_text("raise ImportError('needs libfoo')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    code = textwrap.dedent("""
        import json
        from mixzoo.core.plugins import plugin_failures, get_plugin_manager
        pm = get_plugin_manager()
        print(json.dumps({"failures": plugin_failures(), "loaded": [n for n, _ in pm.list_name_plugin()]}))
    """)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    data = json.loads(out.stdout.strip().splitlines()[-1])
    assert "needs libfoo" in data["failures"]["broken"]
    assert "broken" not in data["loaded"]
    assert data["loaded"], "the other plugins must still load"
    # `mixzoo plugins` without --check (no hook called, no torch) still shows the import failure, with the version
    # from the distribution's metadata
    probe = ("import json, sys\nsys.argv = ['mixzoo', 'plugins', '--json']\nfrom mixzoo.cli import main\n"
             "try:\n    main()\nexcept SystemExit:\n    pass\nprint(json.dumps({'torch': 'torch' in sys.modules}))")
    env["MIXZOO_CACHE"] = str(tmp_path / "cache")  # no faults other runs kept in the user's cache
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    *listing, last = out.stdout.strip().splitlines()
    shown = {p["name"]: p for p in json.loads("\n".join(listing))}
    assert "ImportError: needs libfoo" in shown["broken"]["error"] and json.loads(last) == {"torch": False}
    assert shown["zoo"]["error"] is None and shown["zoo"]["version"] == md.version("mixzoo")


@pytest.mark.subprocess
@pytest.mark.parametrize(("body", "named"), [
    ("import sys\nsys.exit(3)\n", "SystemExit: the plugin called sys.exit(3)"),
    ("raise SystemExit\n", "SystemExit: the plugin called sys.exit(None)"),
    ("raise KeyboardInterrupt\n", "KeyboardInterrupt"),
])
def test_a_plugin_that_exits_or_is_interrupted_at_import_is_contained_and_named(tmp_path, body, named):
    """A real entry point whose module calls ``sys.exit`` (or raises ``KeyboardInterrupt``) on import: every command
    still runs (exit 0), and `mixzoo plugins` names what the plugin did."""
    dist = tmp_path / "exiting_mixzoo_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: exiting-mixzoo-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[mixzoo]\nexiting = exiting_mixzoo_plugin_mod\n")
    (tmp_path / "exiting_mixzoo_plugin_mod.py").write_text(body)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
           "MIXZOO_CACHE": str(tmp_path / "cache")}
    run = [sys.executable, "-c", "from mixzoo.cli import main; main()"]
    out = subprocess.run([*run, "plugins", "--json"], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    shown = {p["name"]: p for p in json.loads(out.stdout)}
    assert named in shown["exiting"]["error"] and shown["zoo"]["error"] is None
    out = subprocess.run([*run, "list"], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "digits-std" in out.stdout, out.stderr


ACCURATE = {"role": "accurate", "dataset": "digits", "num_classes": 10, "input_size": [1, 8, 8],
            "source": {"kind": "zoo"}}


# --------------------------------------------------------------------------------------------- the plugin manager


@pytest.fixture()
def plugin():
    """Register runtime plugins for one test; unregister them and forget their failures afterwards."""
    from mixzoo.core import plugins as plugins_module

    pm = plugins_module.get_plugin_manager()
    names: list[str] = []

    def add(obj, name: str) -> str:
        names.append(register_plugin(obj, name=name))
        return names[-1]

    yield add
    for name in names:
        if pm.get_plugin(name) is not None:
            unregister_plugin(name)
        STATE.failures.pop(name, None)
    clear_caches()


class _Clamps:
    __version__ = "1.2.3"

    def __init__(self, **clamps):
        self.clamps = clamps

    @hookimpl
    def mixzoo_clamp_functions(self):
        return dict(self.clamps)


class _Specs:
    def __init__(self, *entries):
        self.entries = entries

    @hookimpl
    def mixzoo_model_specs(self):
        return list(self.entries)


def test_registering_and_unregistering_a_plugin_refreshes_the_cached_tables(plugin):
    from mixzoo.core.plugins import table

    assert "mut-late-clamp" not in table("clamp")  # the merged table is now cached
    name = plugin(_Clamps(**{"mut-late-clamp": abs}), "mut-late")
    assert lookup("clamp", "mut-late-clamp") is abs
    unregister_plugin(name)
    with pytest.raises(UnknownNameError, match="unknown clamp 'mut-late-clamp'"):
        lookup("clamp", "mut-late-clamp")


def test_registering_a_plugin_refreshes_the_cached_registry(plugin):
    assert "mut-new-model" not in get_registry()
    plugin(_Specs({"name": "mut-new-model", **ACCURATE}), "mut-specs")
    assert get_registry().get("mut-new-model").plugin == "mut-specs"


def test_a_spec_object_from_a_plugin_is_credited_to_that_plugin(plugin):
    spec = ModelSpec(name="mut-spec-object", role="accurate", dataset="digits", num_classes=10,
                     input_size=(1, 8, 8), source={"kind": "zoo"})
    assert spec.plugin == "registry.toml"
    plugin(_Specs(spec), "mut-spec-objects")
    assert get_registry().get("mut-spec-object").plugin == "mut-spec-objects"
    credited = ModelSpec(**{**spec.__dict__, "name": "mut-spec-credited", "plugin": "upstream"})
    plugin(_Specs(credited), "mut-spec-credited-by")
    assert get_registry().get("mut-spec-credited").plugin == "upstream"


def test_hooks_answering_none_are_skipped_and_wrong_types_are_recorded(plugin):
    class Silent:
        @hookimpl
        def mixzoo_clamp_functions(self):
            return None

    class Listy:
        @hookimpl
        def mixzoo_attacks(self):
            return ["not", "a", "dict"]

    plugin(Silent(), "mut-silent")
    plugin(Listy(), "mut-listy")
    plugin(_Clamps(**{"mut-ok-clamp": abs}), "mut-ok")
    assert lookup("clamp", "mut-ok-clamp") is abs
    assert ("mut-silent", None) not in collect("mixzoo_clamp_functions")
    assert "mut-ok-clamp" in table("clamp")
    assert lookup("attack", "apgd") is not None
    failures = plugin_failures()
    assert "mut-silent" not in failures
    assert failures["mut-listy"] == "mixzoo_attacks returned list, expected dict"


def test_each_kind_is_looked_up_in_its_own_table():
    assert lookup("optimizer", "grid") is not None and lookup("attack", "apgd") is not None
    with pytest.raises(UnknownNameError, match="unknown optimizer 'apgd'"):
        lookup("optimizer", "apgd")
    with pytest.raises(UnknownNameError, match="unknown attack 'grid'"):
        lookup("attack", "grid")
    with pytest.raises(UnknownNameError, match="unknown dataset 'gelu'"):
        lookup("dataset", "gelu")


def test_plugin_infos_are_sorted_and_show_versions_sorted_provisions_and_failures(plugin):
    class Broken:
        @hookimpl
        def mixzoo_calibration_optimizers(self):
            raise RuntimeError("optimizer import failed")

        @hookimpl
        def mixzoo_load_model(self, spec, device, allow_unsafe):
            return None

    class Unversioned:
        @hookimpl
        def mixzoo_datasets(self):
            return {"mut-b-data": abs, "mut-a-data": abs}

    plugin(_Clamps(**{"mut-z-clamp": abs, "mut-a-clamp": abs}), "mut-info-clamps")
    plugin(Broken(), "mut-info-broken")
    plugin(Unversioned(), "mut-info-plain")
    plugin(_Specs({"name": "mut-info-model", **ACCURATE}), "mut-info-specs")
    infos = plugin_infos()
    names = [i.name for i in infos]
    assert names == sorted(names)
    by_name = {i.name: i for i in infos}
    clamps = by_name["mut-info-clamps"]
    assert clamps.version == "1.2.3" and clamps.provides == {"clamps": ["mut-a-clamp", "mut-z-clamp"]}
    assert clamps.error is None
    plain = by_name["mut-info-plain"]
    assert plain.version == "runtime" and plain.provides == {"datasets": ["mut-a-data", "mut-b-data"]}
    broken = by_name["mut-info-broken"]
    assert broken.error == "mixzoo_calibration_optimizers: RuntimeError: optimizer import failed"
    assert broken.provides == {"loads source kinds": ["(unspecified)"]}
    assert by_name["mut-info-specs"].provides == {"models": ["mut-info-model"]}
    assert "mut-info-model" not in by_name["zoo"].provides.get("models", [])
    assert by_name["zoo"].provides["loads source kinds"] == ["zoo"]


def test_cli_plugins_json_lists_the_runtime_plugin(plugin):
    """`mixzoo plugins` lists the hooks a plugin implements without calling them; --check lists what they give."""
    plugin(_Clamps(**{"mut-cli-clamp": abs}), "mut-cli-plugin")
    result = CliRunner().invoke(app, ["plugins", "--json"])
    assert result.exit_code == 0, result.output
    entry = next(p for p in json.loads(result.stdout) if p["name"] == "mut-cli-plugin")
    assert entry["hooks"] == ["mixzoo_clamp_functions"] and entry["provides"] == {} and entry["version"] == "1.2.3"
    result = CliRunner().invoke(app, ["plugins", "--check", "--json"])
    assert result.exit_code == 0, result.output
    entry = next(p for p in json.loads(result.stdout) if p["name"] == "mut-cli-plugin")
    assert entry["provides"] == {"clamps": ["mut-cli-clamp"]} and entry["version"] == "1.2.3"
    for args in (["plugins"], ["plugins", "--check"]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0 and result.output.count("mut-cli-plugin") == 1, result.output


# --------------------------------------------------------------------------------------------- one table per kind


class _Archs:
    def __init__(self, **archs):
        self.archs = archs

    @hookimpl
    def mixzoo_architectures(self):
        return dict(self.archs)


def test_every_kind_is_merged_by_the_same_rule(plugin):
    """Architectures and models follow the rule of clamps: a name two third parties give is left out for both and
    named in both plugins' failures; a name a built-in gives stays the built-in's, with a warning."""
    from mixzoo.core.plugins.tables import KINDS

    assert {"model", "architecture", "command", "card", "attack", "method", "clamp", "optimizer", "dataset",
            "source"} <= set(KINDS)
    plugin(_Archs(**{"mut-arch": dict}), "mut-arch-a")
    plugin(_Archs(**{"mut-arch": dict}), "mut-arch-b")
    plugin(_Specs({"name": "mut-both", **ACCURATE}), "mut-model-a")
    plugin(_Specs({"name": "mut-both", **ACCURATE}, {"name": "mut-own", **ACCURATE}), "mut-model-b")
    for kind, name in (("architecture", "mut-arch"), ("model", "mut-both")):
        with pytest.raises(PluginError, match=f"{kind} name '{name}' is provided by both plugin '.*-a' and plugin"):
            lookup(kind, name)
        failures = plugin_failures()
        for owner in ("a", "b"):
            assert f"{kind} {name!r} left out" in failures[f"mut-{kind.replace('itecture', '')}-{owner}"]
    assert get_registry().get("mut-own").plugin == "mut-model-b"  # the rest of the plugin's entries stay
    with pytest.raises(PluginError, match="model name 'mut-both'"):
        get_registry().get("mut-both")
    plugin(_Archs(convnet=dict), "mut-arch-shadow")
    plugin(_Specs({"name": "digits-std", **ACCURATE}), "mut-model-shadow")
    with pytest.warns(Warning, match="a name of the built-in 'registry.toml'"):
        assert get_registry().get("digits-std").plugin == "registry.toml"
    with pytest.warns(Warning, match="a name of the built-in 'zoo'"):
        assert lookup("architecture", "convnet") is not dict


def test_a_third_party_architecture_is_guarded_and_cached(plugin):
    def broken(**kwargs):
        raise RuntimeError("no such layer")

    plugin(_Archs(**{"mut-broken-arch": broken}), "mut-arch-guarded")
    builder = lookup("architecture", "mut-broken-arch")
    assert lookup("architecture", "mut-broken-arch") is builder  # built once, until the plugins change
    with pytest.raises(PluginError, match="plugin 'mut-arch-guarded' failed to run architecture 'mut-broken-arch':"
                                          " RuntimeError: no such layer"):
        builder()


@pytest.mark.subprocess
def test_importing_the_registry_registers_nothing():
    """The registry is a table of the plugin manager, built when first asked for: importing it changes no state."""
    code = "import sys, mixzoo.core.registry\nprint('mixzoo.core.plugins' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False"]
