"""`bench CARD --rbc OTHER` labels every row, file and comparison with the model actually evaluated."""

from __future__ import annotations

import json

import pytest

from mixzoo.evaluation.bench import MatchSettings, bench

# a small APGD on 20 images; the card's declared extra attack is off: the labels, not the attack, are under test
BENCH = dict(attack="apgd", n=20, attack_options={"n_iter": 3, "n_target_classes": 1}, curve=None, plots=False,
             baseline=MatchSettings(options={"n_iter": 2, "n_target_classes": 1}), batch_size=20, progress=False,
             extra_attacks=False)


def test_a_substituted_rbc_is_named_in_rows_report_files_and_comparisons(tmp_path, digits_card):
    card = digits_card  # digits-std + digits-pgd, shared read-only (conftest)
    out = tmp_path / "bench"
    with pytest.warns(UserWarning, match="calibrated for 'digits-pgd'"):
        report = bench(card, rbc="digits-std", out=out, cache_dir=tmp_path / "cache", **BENCH)
    assert report.row("rbc").name == "digits-std"
    data = json.loads((out / "report.json").read_text())
    assert [m["name"] for m in data["models"] if m["kind"] == "rbc"] == ["digits-std"]
    assert all(c["b"] != "digits-pgd" for c in report.comparisons())
    assert any(c["b"] == "digits-std" and c["b_kind"] == "rbc" for c in report.comparisons())
    # no row claims the card's RBC; a mixed row's ``card`` is the card file's own record (its calibration RBC)
    assert "digits-pgd" not in json.dumps([{k: v for k, v in m.items() if k != "card"} for m in data["models"]])
    assert all(m["card"]["rbc"]["name"] == "digits-pgd" for m in data["models"] if m["card"] is not None)
    assert any("digits-std" in n and "digits-pgd" in n for n in report.notes)
    md = (out / "report.md").read_text()
    assert "digits-pgd" not in "\n".join(line for line in md.splitlines() if line.startswith("|"))
    # without the override the card's RBC is evaluated and named
    plain = bench(card, out=None, cache_dir=tmp_path / "cache", **BENCH)
    assert plain.row("rbc").name == "digits-pgd" and not any("calibrated for" in n for n in plain.notes)
