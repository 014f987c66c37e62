"""The CLI answers without torch: ``import mixzoo``, ``import mixzoo.cli``, ``mixzoo --help``, ``mixzoo list`` and
``mixzoo info NAME`` import neither torch nor a mixing method, and every built-in plugin module imports without
torch (a plugin module is imported whenever the plugins load, so its import must be cheap).

Each case runs in a fresh interpreter and reads ``sys.modules`` at its end; the timings are
``benchmarks/startup_speed.py``'s job.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import subprocess
import sys

import pytest

PROBE = """
import json, sys
args = sys.argv[1:]
try:
    if args and args[0] == "--import":
        for name in args[1:]:
            __import__(name)
    else:
        sys.argv = ["mixzoo", *args]
        from mixzoo.cli import main
        try:
            main()
        except SystemExit as exc:
            assert exc.code in (0, None), f"exit status {exc.code}"
finally:
    sys.stdout.flush()
    mods = sorted(sys.modules)
    print("\\nPROBE " + json.dumps({"torch": "torch" in sys.modules,
          "methods": [m for m in mods if m.startswith("mixzoo.methods.") and m != "mixzoo.methods.base"]}))
"""


def probe(*args: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("PROBE ")][-1]
    return json.loads(line[len("PROBE "):])


@pytest.mark.parametrize("args", [("--import", "mixzoo"), ("--import", "mixzoo.cli"), ("--help",), ("list",),
                                  ("list", "--json"), ("info", "digits-pgd")], ids=" ".join)
def test_command_imports_neither_torch_nor_a_method(args):
    seen = probe(*args)
    assert seen == {"torch": False, "methods": []}, f"{' '.join(args)} imported {seen}"


def test_built_in_plugin_modules_import_without_torch():
    modules = sorted(ep.value for ep in md.entry_points(group="mixzoo") if ep.value.startswith("mixzoo_plugins."))
    assert len(modules) >= 10, modules  # every built-in plugin is registered as an entry point
    seen = probe("--import", *modules)
    assert seen == {"torch": False, "methods": []}, seen


def test_the_probe_sees_torch_when_it_is_imported():
    """The check can fail: a command that needs torch (`mixzoo plugins` builds every table) is seen importing it."""
    assert probe("--import", "mixzoo.zoo.models")["torch"]
    assert probe("plugins")["methods"]
