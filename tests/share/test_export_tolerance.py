"""``mixzoo export``'s check: the difference in units of the outputs' own spread, ``--tolerance``, and the `export`
extra's modules asked for before anything loads (mixzoo/share/export.py)."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch
from typer.testing import CliRunner

from mixzoo.cli import app
from mixzoo.core.errors import InputError, MixzooError
from mixzoo.share import export as share_export


def test_the_difference_is_measured_against_the_references_spread():
    b = torch.tensor([[0.0, -2.0, -4.0], [-1.0, -3.0, -float("inf")]], dtype=torch.float64)
    a = b.clone()
    a[0, 1] += 3e-4
    spread = float(b[torch.isfinite(b)].std())
    assert share_export.spread_of(b) == pytest.approx(spread)
    assert share_export.spread_diff(a, b) == pytest.approx(3e-4 / spread)
    # a nearly uniform output: the same difference is a larger share of its spread
    flat = torch.tensor([[-2.30, -2.31, -2.29]], dtype=torch.float64)
    assert share_export.spread_diff(flat + 1e-5, flat) == pytest.approx(1e-5 / float(flat.std()))
    assert share_export.spread_of(torch.zeros(2, 3)) == 1.0  # constant outputs: differences as they are
    c = b.clone()
    c[1, 2] = -50.0
    assert share_export.spread_diff(c, b) == float("inf")  # an infinity must match exactly


def test_export_checks_against_the_spread_with_the_tolerance_given(digits_card, tmp_path):
    res = share_export.export(digits_card, "torch-export", tmp_path / "a")
    import mixzoo
    from mixzoo.zoo.data import load_dataset

    with torch.no_grad():
        reference = mixzoo.load_mixed(digits_card)(load_dataset("digits", "evaluation", n=100).images).double()
    assert res.tolerance == share_export.TOLERANCE
    assert res.spread == pytest.approx(float(reference[torch.isfinite(reference)].std()), rel=1e-6)
    assert res.max_scaled_diff == pytest.approx(res.max_abs_diff / res.spread)
    with pytest.raises(MixzooError, match=r"of their spread \(std .*\), more than --tolerance 1e-12, .*nothing was"
                                          " written"):
        share_export.export(digits_card, "torch-export", tmp_path / "b", tolerance=1e-12)
    assert not list((tmp_path / "b").glob("*.pt2"))
    for bad in (0, -1.0, float("nan"), float("inf"), True):
        with pytest.raises(InputError, match="--tolerance must be a positive number"):
            share_export.export(digits_card, "torch-export", tmp_path / "c", tolerance=bad)


def test_cli_export_takes_a_tolerance(digits_card, tmp_path):
    runner = CliRunner()
    ok = runner.invoke(app, ["export", str(digits_card), "--format", "torch-export", "--out", str(tmp_path / "a"),
                             "--tolerance", "0.01", "--json"])
    assert ok.exit_code == 0, ok.output
    out = json.loads(ok.stdout)
    assert out["tolerance"] == 0.01 and out["max_scaled_diff"] == pytest.approx(out["max_abs_diff"] / out["spread"])
    bad = runner.invoke(app, ["export", str(digits_card), "--format", "torch-export", "--out", str(tmp_path / "b"),
                              "--tolerance", "1e-12"])
    assert bad.exit_code == 2 and "--tolerance 1e-12" in bad.stderr and "\n" not in bad.stderr.strip()


def test_a_missing_onnx_module_is_named_before_anything_loads(monkeypatch, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "onnxscript" else real(name, *a))
    # the card does not exist: had export loaded it first, the error would be about the card
    with pytest.raises(MixzooError) as err:
        share_export.export(tmp_path / "no-such-card.toml", "onnx", tmp_path / "out")
    assert str(err.value) == ("ONNX export needs onnx, onnxruntime, onnxscript (onnxscript missing); pip install"
                              " 'mixzoo[export]'")
    res = CliRunner().invoke(app, ["export", str(tmp_path / "no-such-card.toml"), "--format", "onnx", "--out",
                                   str(tmp_path / "out")])
    assert res.exit_code == 2 and "pip install 'mixzoo[export]'" in res.stderr and "no-such-card" not in res.stderr
    assert not (tmp_path / "out").exists()
