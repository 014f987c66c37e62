"""``mixzoo sanity`` in bf16: every radius is attacked under bfloat16 autocast with float32 confirmation, cached
apart from float32, and the sweep says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mixzoo.evaluation.sanity import eps_sweep

CARD = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "cards" / "digits_mixednuts.toml"


@pytest.mark.slow
def test_the_sweep_runs_and_says_bf16(tmp_path):
    common = dict(radii=[0.1, 0.3], baseline=None, plots=False, n=10, attack="apgd",
                  attack_options={"n_iter": 3, "n_target_classes": 0}, cache_dir=tmp_path / "cache", progress=False)
    b16 = eps_sweep(CARD, precision="bf16", out=tmp_path / "b16", **common)
    files = set((tmp_path / "cache" / "bench").glob("*.json"))
    f32 = eps_sweep(CARD, out=tmp_path / "f32", **common)
    assert b16.precision == "bf16" and f32.precision == "float32"
    assert len(set((tmp_path / "cache" / "bench").glob("*.json")) - files) == len(files)  # nothing reused
    assert json.loads((tmp_path / "b16" / "sanity.json").read_text())["precision"] == "bf16"
    assert "in bf16 (every break confirmed in float32)" in (tmp_path / "b16" / "sanity.md").read_text()
    assert "bf16" not in (tmp_path / "f32" / "sanity.md").read_text()
