"""A third-party plugin package, really installed: examples/mixzoo-plugin-example.

The fixture builds wheels of mixzoo and of a copy of the example and installs both into a THROWAWAY virtual
environment (``python -m venv --without-pip``, the running environment's site-packages added by a ``.pth`` file for
the dependencies, ``pip --python VENV install --no-deps``, as ``.ci/wheel-check`` does); the running environment is
never changed. mixzoo's plugin manager is built once per process, so every check runs the installed ``mixzoo``
command in a fresh process from a directory outside the checkout, as a user would.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mixzoo.core.errors import PluginError
from mixzoo.core.plugins import clear_caches, hookimpl, register_plugin, unregister_plugin
from mixzoo.core.registry import get_registry

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "mixzoo-plugin-example"
MODEL, CLAMP, METHOD = "example-digits-linear", "example-tanh", "example-switch"
PIP = [sys.executable, "-m", "pip"]


def _run(cmd: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None,
         timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)


def _wheel(source: Path, out: Path) -> Path:
    """A wheel of the project at ``source`` (copied first: setuptools writes build files into the source tree)."""
    proc = _run([*PIP, "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(out), str(source)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return next(out.glob(f"{source.name.replace('-', '_')}-*.whl"))


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A throwaway venv holding a mixzoo wheel and the example's wheel; dependencies from this environment."""
    root = tmp_path_factory.mktemp("third-party")
    mixzoo_src = root / "src" / "mixzoo"
    mixzoo_src.mkdir(parents=True)
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, mixzoo_src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.training.pt")
    for name in ("mixzoo", "plugins"):
        shutil.copytree(ROOT / name, mixzoo_src / name, ignore=ignore)
    example_src = root / "src" / "mixzoo-plugin-example"
    shutil.copytree(EXAMPLE, example_src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    wheels = [_wheel(mixzoo_src, root / "dist"), _wheel(example_src, root / "dist")]

    env_dir = root / "venv"
    assert _run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)]).returncode == 0
    python = env_dir / "bin" / "python"
    site = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    deps = [p for p in sys.path if p.endswith("site-packages")]
    (Path(site) / "deps.pth").write_text("\n".join(deps) + "\n")
    proc = _run([*PIP, "--python", str(python), "install", "-q", "--no-deps", "--no-index", *map(str, wheels)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    where = _run([str(python), "-c", "import mixzoo, mixzoo_plugin_example as e; print(mixzoo.__file__, e.__file__)"],
                 cwd=root)
    assert where.returncode == 0 and all(f.startswith(str(env_dir)) for f in where.stdout.split()), where
    return env_dir


def mixzoo_cli(venv: Path, *args: str, cwd: Path, env: dict[str, str] | None = None,
               timeout: int = 600) -> subprocess.CompletedProcess:
    """The installed ``mixzoo`` command, run from ``cwd`` (outside the checkout)."""
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MIXZOO_REGISTRY")}
    return _run([str(venv / "bin" / "mixzoo"), *args], cwd=cwd, env={**clean, **(env or {})}, timeout=timeout)


@pytest.mark.subprocess
def test_installed_plugin_model_clamp_and_method_are_listed(venv, tmp_path):
    proc = mixzoo_cli(venv, "list", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    entries = {e["name"]: e for e in json.loads(proc.stdout)}
    entry = entries[MODEL]
    assert (entry["plugin"], entry["dataset"], entry["role"], entry["num_classes"]) == ("example", "digits",
                                                                                         "robust", 10)
    assert entry["input_size"] == [1, 8, 8] and entry["threat_model"] == "Linf"
    cache = {"MIXZOO_CACHE": str(tmp_path / "cache")}  # faults other runs kept in the user's cache are not ours
    proc = mixzoo_cli(venv, "plugins", "--json", cwd=tmp_path, env=cache)  # from metadata: no hook called
    assert proc.returncode == 0, proc.stderr[-2000:]
    example = {p["name"]: p for p in json.loads(proc.stdout)}["example"]
    assert {"mixzoo_clamp_functions", "mixzoo_mixing_methods", "mixzoo_model_sources"} <= set(example["hooks"])
    proc = mixzoo_cli(venv, "plugins", "--check", "--json", cwd=tmp_path, env=cache)
    assert proc.returncode == 0, proc.stderr[-2000:]
    plugins = {p["name"]: p for p in json.loads(proc.stdout)}
    assert not {n: p["error"] for n, p in plugins.items() if p["error"]}
    example = plugins["example"]
    assert example["version"] == "0.1.0" and example["provides"]["loads source kinds"] == ["example-digits"]
    assert CLAMP in example["provides"]["clamps"] and example["provides"]["methods"] == [METHOD]


@pytest.mark.subprocess
def test_mix_uses_the_plugin_model_and_clamp(venv, tmp_path):
    """`mixzoo mix` calibrates MixedNUTS for a pair whose RBC and clamp come from the plugin; the ABC is a second
    entry of the plugin's source kind, declared in a registry file (MIXZOO_REGISTRY)."""
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
    proc = mixzoo_cli(venv, "mix", "--abc", "test-digits-accurate", "--rbc", MODEL, "--dataset", "digits", "--clamp",
                      CLAMP, "--n-calib", "60", "--n-iter", "5", "--out", str(card), cwd=tmp_path,
                      env={"MIXZOO_REGISTRY": str(registry), "MIXZOO_CACHE": str(tmp_path / "cache")})
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    text = card.read_text()
    assert CLAMP in text and MODEL in text and "test-digits-accurate" in text


@pytest.mark.subprocess
def test_the_plugins_method_through_mix_bench_sanity_and_verify(venv, tmp_path):
    """The example's method (the scaffold's) works by name like a built-in one: `mixzoo mix
    --method` fits a card (its typed option checked), `mixzoo bench` runs the extra attacks it declares and matches
    the linear baseline to the card's worst case, `mixzoo sanity` sweeps that worst case and `mixzoo verify`
    confirms every reported robust error."""
    env = {"MIXZOO_CACHE": str(tmp_path / "cache")}
    card = tmp_path / "switch.toml"
    proc = mixzoo_cli(venv, "mix", "--method", METHOD, "--abc", "digits-std", "--rbc", "digits-pgd", "--tau", "0.8",
                      "--n-calib", "60", "--out", str(card), cwd=tmp_path, env=env)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    text = card.read_text()
    assert f'method = "{METHOD}"' in text and "tau = 0.8" in text and 'command = "mixzoo mix --method' in text
    bad = tmp_path / "x.toml"
    proc = mixzoo_cli(venv, "mix", "--method", METHOD, "-O", "tau=abc", "--out", str(bad), cwd=tmp_path, env=env)
    assert (
        proc.returncode == 2
        and "option tau (--tau) of mixing method" in proc.stderr
        and "a finite number" in proc.stderr
    )
    proc = mixzoo_cli(venv, "mix", "--method", METHOD, "-O", "tau=2", "--out", str(bad), cwd=tmp_path, env=env)
    assert proc.returncode == 2 and "option tau (--tau)" in proc.stderr and "must be in [0, 1]" in proc.stderr
    assert not bad.exists()

    out = tmp_path / "bench"
    attack = ["--attack", "apgd", "-O", "n_iter=5", "-O", "n_target_classes=2", "--n", "30", "--batch-size", "30"]
    proc = mixzoo_cli(venv, "bench", str(card), *attack, "--no-curve", "--save-adversarial", "--out", str(out),
                      cwd=tmp_path, env=env)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    report = json.loads((out / "report.json").read_text())
    rows = {m["kind"]: m for m in report["models"]}
    assert set(rows) == {"abc", "rbc", "linear", METHOD}
    switch = rows[METHOD]
    assert [c["name"] for c in switch["components"]][-3:] == ["apgd-rbc-gradient", "apgd-abc-gradient", "square"]
    assert switch["card"][METHOD]["tau"] == 0.8 and switch["robust_accuracy"] <= switch["clean_accuracy"]
    match = report["settings"]["linear_alpha_match"]
    assert match["card"] == switch["name"] and 0.0 <= match["target_robust_accuracy"] <= 1.0

    eps = report["settings"]["eps"]  # the card's, from the RBC's registry entry
    proc = mixzoo_cli(venv, "sanity", str(card), "--attack", "apgd", "-O", "n_iter=5", "-O", "n_target_classes=2",
                      "--n", "30", "--batch-size", "30", "--eps", f"{eps},0.5", "--no-linear", "--out",
                      str(tmp_path / "sanity"), "--json", cwd=tmp_path, env=env)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    sweep = json.loads(proc.stdout)
    mixed = next(m for m in sweep["models"] if m["kind"] == METHOD)
    assert sweep["radii"] == [eps, 0.5] and mixed["robust_accuracy"][0] == pytest.approx(switch["robust_accuracy"])

    proc = mixzoo_cli(venv, "verify", str(out), "--json", cwd=tmp_path, env=env)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    verified = json.loads(proc.stdout)
    row = next(r for r in verified["rows"] if r["kind"] == METHOD)
    assert verified["passed"] and row["confirmed"] == row["broken_reported"]


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
