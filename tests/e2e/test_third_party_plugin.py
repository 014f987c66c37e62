"""A third-party plugin package, really installed: examples/mixzoo-plugin-example.

The fixture pip-installs a copy of the example into this environment (``--no-deps --no-build-isolation``) and
uninstalls it afterwards. mixzoo's plugin manager is cached per process, so every check of the installed plugin runs
the CLI in a fresh interpreter, exactly as a user would.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mixzoo.errors import PluginError
from mixzoo.plugins import clear_caches, hookimpl, register_plugin, unregister_plugin
from mixzoo.registry import get_registry

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mixzoo-plugin-example"
MODEL, CLAMP, DIST = "example-digits-linear", "tanh-clamp", "mixzoo-plugin-example"
PIP = [sys.executable, "-m", "pip"]


def mixzoo_cli(*args: str, env: dict[str, str] | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mixzoo.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def installed_example(tmp_path_factory):
    """pip install a copy of the example (the build writes into its source tree), uninstall at teardown."""
    src = tmp_path_factory.mktemp("example") / DIST
    shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    proc = subprocess.run([*PIP, "install", "-q", "--no-deps", "--no-build-isolation", "--no-index", str(src)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    importlib.invalidate_caches()
    try:
        yield src
    finally:
        subprocess.run([*PIP, "uninstall", "-y", "-q", DIST], capture_output=True, timeout=120)
        importlib.invalidate_caches()


def test_installed_plugin_model_is_listed(installed_example):
    proc = mixzoo_cli("list", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    entries = {e["name"]: e for e in json.loads(proc.stdout)}
    assert MODEL in entries
    entry = entries[MODEL]
    assert (entry["plugin"], entry["dataset"], entry["role"], entry["num_classes"]) == ("example", "digits",
                                                                                         "robust", 10)
    assert entry["input_size"] == [1, 8, 8] and entry["threat_model"] == "Linf"


def test_installed_plugin_shows_its_clamp_and_version(installed_example):
    proc = mixzoo_cli("plugins", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = proc.stdout
    assert '"example"' in text and CLAMP in text and MODEL in text and "0.1.0" in text
    example = next(p for p in json.loads(text) if p["name"] == "example")
    assert example["provides"]["loads source kinds"] == ["example-digits"]  # its SOURCE_KINDS


def test_mix_uses_the_plugin_model_and_clamp(installed_example, tmp_path):
    """`mixzoo mix` calibrates a pair whose RBC and clamp come from the plugin; the ABC is a second entry of the
    plugin's source kind, declared in a registry file (MIXZOO_REGISTRY)."""
    registry = tmp_path / "registry.toml"
    registry.write_text("""
[models.test-digits-accurate]
role = "accurate"
dataset = "digits"
num_classes = 10
input_size = [1, 8, 8]
mean = [0.3]
std = [0.4]
source = { kind = "example-digits", seed = 1, adv_eps = 0.0, steps = 150 }
""")
    card = tmp_path / "card.toml"
    proc = mixzoo_cli("mix", "--abc", "test-digits-accurate", "--rbc", MODEL, "--dataset", "digits", "--clamp", CLAMP,
                      "--n-calib", "60", "--out", str(card),
                      env={"MIXZOO_REGISTRY": str(registry), "MIXZOO_CACHE": str(tmp_path / "cache")})
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    text = card.read_text()
    assert CLAMP in text and MODEL in text and "test-digits-accurate" in text


def test_the_plugins_own_mixing_method_through_mix_and_bench(installed_example, tmp_path):
    """The example's method (example-confidence-switch) works by name like a built-in: `mixzoo plugins` lists it,
    `mixzoo mix --method` fits a card, `mixzoo bench` evaluates it next to a linear card of the same pair and runs
    the extra attacks the method declares (switch bypassed through each model, and Square)."""
    env = {"MIXZOO_CACHE": str(tmp_path / "cache")}
    proc = mixzoo_cli("plugins", "--json")
    example = next(p for p in json.loads(proc.stdout) if p["name"] == "example")
    assert example["provides"]["methods"] == ["example-confidence-switch"]
    card, lin = tmp_path / "switch.toml", tmp_path / "lin.toml"
    proc = mixzoo_cli("mix", "--method", "example-confidence-switch", "--abc", "digits-std", "--rbc", "digits-pgd",
                      "-O", "tau=0.8", "--n-calib", "60", "--out", str(card), env=env)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert 'method = "example-confidence-switch"' in card.read_text() and "tau = 0.8" in card.read_text()
    proc = mixzoo_cli("mix", "--method", "example-confidence-switch", "-O", "tau=2", "--out", str(tmp_path / "x.toml"),
                      env=env)
    assert proc.returncode == 2 and "example-confidence-switch.tau" in proc.stderr
    assert not (tmp_path / "x.toml").exists()
    proc = mixzoo_cli("mix", "--method", "linear", "--abc", "digits-std", "--rbc", "digits-pgd", "-O", "alpha=0.9",
                      "--out", str(lin), env=env)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    out = tmp_path / "bench"
    proc = mixzoo_cli("bench", str(card), str(lin), "--attack", "apgd", "--n", "30", "--no-curve", "-O", "n_iter=5",
                      "--out", str(out), env=env, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    report = json.loads((out / "report.json").read_text())
    rows = {m["kind"]: m for m in report["models"]}
    assert set(rows) == {"abc", "rbc", "example-confidence-switch", "linear"}
    switch = rows["example-confidence-switch"]
    assert [c["name"] for c in switch["components"]][-3:] == ["apgd-rbc-gradient", "apgd-abc-gradient", "square"]
    assert switch["card"]["example-confidence-switch"]["tau"] == 0.8
    assert switch["robust_accuracy"] <= min(rows["abc"]["clean_accuracy"], 1.0)


class _SpecPlugin:
    """A runtime plugin providing one model spec (name clash on purpose)."""

    def __init__(self, description: str):
        self.description = description

    @hookimpl
    def mixzoo_model_specs(self):
        return [{"name": "clash-model", "role": "accurate", "dataset": "digits", "num_classes": 10,
                 "input_size": [1, 8, 8], "source": {"kind": "zoo"}, "description": self.description}]


def test_model_name_collision_between_plugins_names_both():
    register_plugin(_SpecPlugin("first"), name="plugin-alpha")
    register_plugin(_SpecPlugin("second"), name="plugin-beta")
    try:
        assert "digits-std" in get_registry()  # the rest of the registry keeps working
        with pytest.raises(PluginError) as err:
            get_registry().get("clash-model")
        msg = str(err.value)
        assert "plugin-alpha" in msg and "plugin-beta" in msg and "clash-model" in msg
    finally:
        unregister_plugin("plugin-alpha")
        unregister_plugin("plugin-beta")
        clear_caches()
    assert "clash-model" not in get_registry()
