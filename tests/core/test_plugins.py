from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from mixzoo.errors import PluginError, UnknownNameError
from mixzoo.plugins import clear_caches, hookimpl, lookup, plugin_failures, register_plugin, unregister_plugin


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
        from mixzoo.plugins import plugin_failures, get_plugin_manager
        pm = get_plugin_manager()
        print(json.dumps({"failures": plugin_failures(), "loaded": [n for n, _ in pm.list_name_plugin()]}))
    """)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    data = json.loads(out.stdout.strip().splitlines()[-1])
    assert "needs libfoo" in data["failures"]["broken"]
    assert "broken" not in data["loaded"]
    assert data["loaded"], "the other plugins must still load"
