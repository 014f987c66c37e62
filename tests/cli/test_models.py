"""``mixzoo list``, ``info`` and ``fetch-list`` (mixzoo/cli/models.py): readable rows, the robust column labelled
with its attack, published card names everywhere, and no network for ``info``."""

from __future__ import annotations

import json
import os

from typer.testing import CliRunner

from mixzoo.cli import app
from mixzoo.core.catalog import card_entry
from mixzoo.core.registry import get_spec, list_models

CARD = "mixednuts-cifar10"


def _rows(output: str) -> dict[str, str]:
    """A two-column table's rows, label -> text."""
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in output.splitlines() if line.startswith("│")]
    return {c[0]: c[1] for c in cells if len(c) == 2}


def test_info_prints_readable_rows_and_leaves_out_empty_ones():
    spec = get_spec("digits-pgd")
    result = CliRunner().invoke(app, ["info", "digits-pgd"])
    assert result.exit_code == 0, result.output
    rows = _rows(result.stdout)
    assert rows["reported clean"] == f"{100 * spec.reported['clean']:.2f}%"
    assert rows["reported pgd20"] == f"{100 * spec.reported['pgd20']:.2f}%"
    assert rows["reported n"] == str(spec.reported["n"])
    assert rows["input_size"] == ", ".join(map(str, spec.input_size))
    assert all(f"taps {k}" in rows for k in spec.taps)
    empty = [k for k, v in spec.to_dict().items() if v in (None, "", [], {})]
    assert empty and not [k for k in empty if any(label.split()[0] == k for label in rows)], rows
    assert not [t for t in rows.values() if t.startswith(("{", "[")) or t == "None"], rows


def test_info_of_a_published_card_gives_its_parameters_and_notes_as_rows():
    entry = card_entry(CARD)
    rows = _rows(CliRunner().invoke(app, ["info", CARD]).stdout)
    assert rows["parameters alpha"] == str(entry["parameters"]["alpha"])
    assert rows["note"] == entry["notes"][0] and rows["rbc"] == entry["rbc"]


def test_list_shows_each_reported_robust_accuracy_with_the_attack_that_measured_it():
    result = CliRunner().invoke(app, ["list", "--dataset", "digits"])
    assert result.exit_code == 0, result.output
    lines = {line.split("│")[1].strip(): line for line in result.stdout.splitlines() if line.startswith("│")}
    pgd_only = [s for s in list_models(dataset="digits") if "pgd20" in s.reported and "autoattack" not in s.reported]
    assert pgd_only, "the digits zoo reports PGD-20 accuracies"
    for s in pgd_only:
        assert f"{100 * s.reported['pgd20']:.2f}% PGD-20" in lines[s.name], lines[s.name]
    both = next(s for s in list_models() if {"pgd20", "autoattack"} <= set(s.reported))
    line = next(ln for ln in CliRunner().invoke(app, ["list"]).stdout.splitlines() if f"│ {both.name} " in ln)
    assert f"{100 * both.reported['autoattack']:.2f}% AutoAttack" in line


def test_fetch_list_takes_a_published_card_name(hf_cache, rb_dir, tmp_path):
    entry = card_entry(CARD)
    result = CliRunner().invoke(app, ["fetch-list", CARD, "--data-dir", str(tmp_path / "nodata"), "--json"])
    assert result.exit_code == 1, result.output  # its files are not on this machine
    listed = json.loads(result.stdout)
    assert {entry["abc"], entry["rbc"], entry["dataset"]} <= {f["what"] for f in listed}
    assert str(tmp_path / "nodata" / "cifar-10-batches-py" / "test_batch") in {f["path"] for f in listed}


def test_info_of_an_uncached_hub_name_uses_no_network(tmp_path, monkeypatch):
    from huggingface_hub import constants

    import mixzoo.zoo.hub as hub

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("MIXZOO_OFFLINE", raising=False)
    reached = []
    monkeypatch.setattr(hub, "hub_reachable", lambda *a, **k: reached.append(a) or True)
    monkeypatch.setattr(hub, "hub_download", lambda *a, **k: reached.append(a))
    result = CliRunner().invoke(app, ["info", "hf-hub:org/not-cached"])
    assert result.exit_code == 2 and not reached, (reached, result.output)
    message = " ".join(result.stderr.split())
    assert "config.json" in message and "uses no network" in message and "fetch-list hf-hub:org/not-cached" in message
    assert "MIXZOO_OFFLINE" not in os.environ  # downloads are off for the lookup only
