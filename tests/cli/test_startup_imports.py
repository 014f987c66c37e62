"""The CLI answers without torch: ``import mixzoo``, ``import mixzoo.cli``, ``mixzoo --help``, ``mixzoo list``,
``mixzoo info NAME`` (a known name or a typo) and ``mixzoo plugins`` (which calls no hook) import neither torch
nor a mixing method, and every built-in plugin module imports without torch (a plugin module is imported whenever
the plugins load, so its import must be cheap).

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
            print(f"\\nEXIT {exc.code or 0}")
finally:
    sys.stdout.flush()
    mods = sorted(sys.modules)
    print("\\nPROBE " + json.dumps({"torch": "torch" in sys.modules,
          "methods": [m for m in mods if m.startswith("mixzoo.methods.") and m != "mixzoo.methods.base"]}))
"""


def probe(*args: str, status: int = 0) -> dict:
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    exits = [int(ln.split()[1]) for ln in proc.stdout.splitlines() if ln.startswith("EXIT ")]
    assert exits in ([], [status]), (exits, proc.stdout[-2000:], proc.stderr[-2000:])
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("PROBE ")][-1]
    return json.loads(line[len("PROBE "):])


@pytest.mark.parametrize(("args", "status"), [
    (("--import", "mixzoo"), 0), (("--import", "mixzoo.cli"), 0), (("--help",), 0), (("list",), 0),
    (("list", "--json"), 0), (("info", "digits-pgd"), 0), (("info", "no-such-model"), 2), (("plugins",), 0),
    (("plugins", "--json"), 0),
    (("info", "cifar10/Linf/Peng2023Robust"), 0), (("info", "imagenet/Linf/Liu2023Comprehensive_Swin-L"), 0),
    (("info", "cifar10/Linf/Peng2023Robus"), 2), (("info", "convnextv2-l"), 0),
    (("info", "hf-hub:org/a-model-not-in-the-cache"), 2),  # the cache only: no download, no torch
    (("mix", "--abc", "fmnist-std", "--rbc", "cifar10/Linf/Wong2020Fast"), 2)],  # refused before torch
    ids=lambda v: " ".join(v) if isinstance(v, tuple) else str(v))
def test_command_imports_neither_torch_nor_a_method(args, status):
    seen = probe(*args, status=status)
    assert seen == {"torch": False, "methods": []}, f"{' '.join(args)} imported {seen}"


def test_built_in_plugin_modules_import_without_torch():
    modules = sorted(ep.value for ep in md.entry_points(group="mixzoo") if ep.value.startswith("mixzoo_plugins."))
    assert len(modules) >= 10, modules  # every built-in plugin is registered as an entry point
    seen = probe("--import", *modules)
    assert seen == {"torch": False, "methods": []}, seen


@pytest.mark.subprocess
def test_the_probe_sees_torch_when_it_is_imported():
    """The check can fail: a command that needs torch (`mixzoo plugins --check` builds every table) is seen
    importing it."""
    assert probe("--import", "mixzoo.zoo.models")["torch"]
    checked = probe("plugins", "--check")
    assert checked["torch"] and checked["methods"]
