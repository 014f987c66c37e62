"""The published-model path end to end, offline, on stand-ins written by RobustBench's, timm's and
huggingface_hub's own code (tests/published_standins.py): ``info``, ``fetch-list``, ``mix`` of a hub ABC with a
RobustBench RBC on a CIFAR folder and on a user's ImageFolder, ``bench``, a linear mix on an ``.npz`` file,
``sanity`` and ``export``, each as the installed ``mixzoo`` command with downloads off."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from published_standins import HUB_NAME, RB_NAME, build, steps

pytestmark = [pytest.mark.slow, pytest.mark.subprocess]
MIXZOO = str(Path(sys.executable).with_name("mixzoo"))


@pytest.fixture(scope="module")
def standins(tmp_path_factory):
    root = tmp_path_factory.mktemp("published")
    return root, build(root)


def run(env: dict[str, str], args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([MIXZOO, *args], env=env, capture_output=True, text=True, timeout=600)


def test_the_published_model_path_runs_offline_end_to_end(standins):
    root, env = standins
    for label, args in steps(root):
        proc = run(env, args)
        assert proc.returncode == 0, f"{label}: {proc.stdout[-1500:]} {proc.stderr[-1500:]}"
    card = (root / "card_pets.toml").read_text()
    assert f'dataset = "imagefolder:{root / "pets"}"' in card
    report = json.loads((root / "bench" / "report.json").read_text())
    assert (report["dataset"]["name"], report["dataset"]["n"]) == ("imagefolder", 4)
    assert report["dataset"]["source"] == f"imagefolder:{(root / 'pets').resolve()}"
    assert (root / "export" / "card.pt2").is_file() and (root / "sanity" / "sanity.json").is_file()
    shown = json.loads(run(env, ["info", RB_NAME, "--json"]).stdout)
    assert shown["files"][0]["present"] and shown["files"][0]["size"] > 0


def test_offline_a_missing_checkpoint_is_named_with_every_other_missing_file(standins):
    root, env = standins
    proc = run({**env, "MIXZOO_ROBUSTBENCH_DIR": str(root / "empty")}, [
        "mix", "--abc", HUB_NAME, "--rbc", RB_NAME, "--data-dir", str(root / "nowhere"), "--out",
        str(root / "never.toml")])
    assert proc.returncode != 0 and not (root / "never.toml").exists()
    assert "empty/cifar10/Linf/Wong2020Fast.pt" in proc.stderr and "nowhere/cifar-10-batches-py" in proc.stderr
