"""A plugin written against the previous release's documentation keeps working, with DeprecationWarnings.

``tests/fixtures/old_docs_plugin`` is frozen: it imports ``hookimpl`` from ``mixzoo.plugins`` and uses the module
names of mixzoo 0.1 (``mixzoo.errors``, ``mixzoo.data``, ``mixzoo.card``, ``mixzoo.pipeline``,
``mixzoo.calibrate``) and a mixing method that is a plain object. It is installed as an entry point of group
``mixzoo`` by putting its package and a ``.dist-info`` (METADATA, entry_points.txt) on ``PYTHONPATH`` of the
processes started here (the running environment is never changed), and run through ``mixzoo plugins``, ``mix``,
``bench`` and ``sanity`` on digits: its model, clamp, calibration optimizer, attack and mixing method.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.subprocess, pytest.mark.slow]

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "old_docs_plugin"
MODEL, CLAMP, OPTIMIZER, ATTACK, METHOD = ("olddocs-digits-linear", "olddocs-tanh", "olddocs-grid", "olddocs-fgsm",
                                           "olddocs-switch")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """A folder holding the plugin's package and its distribution metadata, as ``pip install`` leaves them."""
    root = tmp_path_factory.mktemp("old-docs-site")
    shutil.copytree(FIXTURE / "src" / "mixzoo_old_docs_plugin", root / "mixzoo_old_docs_plugin")
    info = root / "mixzoo_old_docs_plugin-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mixzoo-old-docs-plugin\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[mixzoo]\nolddocs = mixzoo_old_docs_plugin\n")
    return root


def _env(site: Path, tmp: Path) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MIXZOO_REGISTRY", "PYTHONWARNINGS")}
    return {**clean, "PYTHONPATH": str(site), "MIXZOO_CACHE": str(tmp / "cache"), "OMP_NUM_THREADS": "1",
            "PYTHONWARNINGS": "always::DeprecationWarning"}


def mixzoo(site: Path, tmp: Path, *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-c", "from mixzoo.cli import main; main()", *args], capture_output=True,
                          text=True, cwd=tmp, env=_env(site, tmp), timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return proc


def test_the_old_import_path_warns_and_names_the_new_place(site, tmp_path):
    code = ("import warnings\nwarnings.simplefilter('always')\nwith warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n    import mixzoo_old_docs_plugin as p\n"
            "import mixzoo\nassert p.hookimpl is mixzoo.hookimpl\n"
            "print('\\n'.join(f'{x.category.__name__}: {x.message}' for x in w))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(site, tmp_path),
                          cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert ("DeprecationWarning: mixzoo.plugins.hookimpl is deprecated and will be removed in mixzoo 0.3; use"
            " mixzoo.hookimpl") in proc.stdout


def test_plugins_lists_everything_the_old_plugin_provides(site, tmp_path):
    plugins = {p["name"]: p for p in json.loads(mixzoo(site, tmp_path, "plugins", "--check", "--json").stdout)}
    old = plugins["olddocs"]
    assert old["error"] is None and old["version"] == "0.1.0"
    assert {k: old["provides"][k] for k in ("models", "clamps", "optimizers", "attacks", "methods")} == {
        "models": [MODEL], "clamps": [CLAMP], "optimizers": [OPTIMIZER], "attacks": [ATTACK], "methods": [METHOD]}
    # Python hides DeprecationWarnings from users by default; `mixzoo plugins` shows them
    assert old["deprecations"][0] == ("mixzoo.plugins.hookimpl is deprecated and will be removed in mixzoo 0.3; use"
                                      " mixzoo.hookimpl")
    assert old["deprecations"][1].startswith("mixzoo.attacks.Attack.defaults is deprecated") and (
        "attack class FGSM declares `defaults`" in old["deprecations"][1])
    assert "does not subclass mixzoo.methods.MixingMethod" in old["deprecations"][2]
    assert old["deprecations"][3].startswith("mixzoo.core.hookspecs.mixzoo_load_model is deprecated")
    # plain `mixzoo plugins` imports the module (its import-time warnings) and calls no hook
    plain = {p["name"]: p for p in json.loads(mixzoo(site, tmp_path, "plugins", "--json").stdout)}["olddocs"]
    assert plain["deprecations"] == old["deprecations"][:2] and plain["error"] is None


def test_mix_bench_and_sanity_run_the_old_plugin(site, tmp_path):
    nuts, switch = tmp_path / "nuts.toml", tmp_path / "switch.toml"
    proc = mixzoo(site, tmp_path, "mix", "--abc", "digits-std", "--rbc", MODEL, "--clamp", CLAMP, "-O",
                  f"optimizer={OPTIMIZER}", "--n-calib", "60", "--n-iter", "5", "--out", str(nuts))
    assert "mixzoo.calibrate.grid_search is deprecated" in proc.stderr
    card = nuts.read_text()
    assert f'clamp = "{CLAMP}"' in card and MODEL in card and OPTIMIZER in card

    proc = mixzoo(site, tmp_path, "mix", "--method", METHOD, "--abc", "digits-std", "--rbc", MODEL, "--tau", "0.8",
                  "--n-calib", "60", "--out", str(switch))
    assert "does not subclass mixzoo.methods.MixingMethod" in proc.stderr
    assert "mixzoo.pipeline.prepare_pair is deprecated" in proc.stderr and "use mixzoo.zoo.pairs.prepare_pair" in \
        proc.stderr
    assert f'method = "{METHOD}"' in switch.read_text() and "tau = 0.8" in switch.read_text()

    out = tmp_path / "bench"
    mixzoo(site, tmp_path, "bench", str(switch), str(nuts), "--attack", ATTACK, "--n", "30", "--batch-size", "30",
           "--no-curve", "--no-plots", "--out", str(out))
    report = json.loads((out / "report.json").read_text())
    rows = {m["kind"]: m for m in report["models"]}
    assert {"abc", "rbc", "mixednuts", METHOD} <= set(rows)
    assert report["settings"]["attack"] == ATTACK
    assert [c["name"] for c in rows[METHOD]["components"]] == ["fgsm", "apgd-rbc-gradient"]
    for row in rows.values():
        assert 0.0 <= row["robust_accuracy"] <= row["clean_accuracy"] <= 1.0

    proc = mixzoo(site, tmp_path, "sanity", str(switch), "--attack", ATTACK, "--n", "30", "--batch-size", "30",
                  "--eps", "0.1,0.5", "--no-linear", "--out", str(tmp_path / "sanity"), "--json")
    sweep = json.loads(proc.stdout)
    mixed = next(m for m in sweep["models"] if m["kind"] == METHOD)
    assert sweep["radii"] == [0.1, 0.5]
    assert mixed["robust_accuracy"][0] == pytest.approx(rows[METHOD]["robust_accuracy"])
