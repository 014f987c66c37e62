"""``--precision`` on the attack commands: a bad value is one line naming the choices; ``bf16`` runs the bench with
every break confirmed in float32 and the report shows both counts and the precision."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mixzoo.cli import app

CARD = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "cards" / "digits_mixednuts.toml"


def run(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.mark.parametrize("command", ["bench", "sanity"])
def test_a_bad_precision_is_one_line_naming_the_choices(command, tmp_path):
    res = run(command, str(CARD), "--precision", "fp16", "--out", str(tmp_path / "out"))
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.exit_code == 2, res.output
    assert lines == ["error: unknown precision 'fp16'; choose float32, tf32, bf16, auto (--precision)"]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["bench", "sanity"])
def test_the_help_offers_the_option(command):
    res = run(command, "--help")
    assert res.exit_code == 0 and "--precision" in res.output


@pytest.mark.slow
def test_bench_in_bf16_reports_both_counts_and_the_precision(tmp_path):
    out = tmp_path / "bench"
    res = run("bench", str(CARD), "--n", "20", "--attack", "adaptive-apgd", "-O", "n_iter=3", "-O",
              "n_target_classes=3", "--no-curve", "--no-baseline", "--no-plots", "--precision", "bf16", "--out",
              str(out), "--cache-dir", str(tmp_path / "cache"))
    assert res.exit_code == 0, res.output
    assert "breaks bf16/fp32" in res.output and "(cpu, bf16)" in res.output
    report = json.loads((out / "report.json").read_text())
    assert report["settings"]["precision"] == "bf16"
    for row in report["models"]:
        assert row["precision"] == "bf16"
        for comp in row["components"]:
            assert comp["confirmed_float32"] <= comp["found_bf16"]
            assert comp["confirmed_float32"] <= comp["newly_broken"]
        broken = sum(c["newly_broken"] for c in row["components"])
        assert broken == row["clean_outcomes"].count("1") - row["robust_outcomes"].count("1")
    md = (out / "report.md").read_text()
    assert "in bf16 (every break confirmed in float32)" in md and "found in bf16" in md
    # float32, the default, is a separate cached outcome with no bf16 counts
    res = run("bench", str(CARD), "--n", "20", "--attack", "adaptive-apgd", "-O", "n_iter=3", "-O",
              "n_target_classes=3", "--no-curve", "--no-baseline", "--no-plots", "--out", str(tmp_path / "f32"),
              "--cache-dir", str(tmp_path / "cache"), "--json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)["models"]
    assert all(not r["cached"] and r["precision"] == "float32" for r in rows)
    assert all("found_bf16" not in c for r in rows for c in r["components"])
