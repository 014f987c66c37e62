"""``mixzoo sanity``: robust accuracy over eps with the monotonicity and grey-image checks, on the digits zoo."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from typer.testing import CliRunner

from mixzoo.cli import app
from mixzoo.data import load_dataset
from mixzoo.errors import InputError
from mixzoo.pipeline import mix
from mixzoo.sanity import checked_robust, default_radii, eps_sweep, grey_distance

FAST = dict(n_calib=120, n_iter=8, n_target_classes=2, batch_size=60, progress=False)
N = 60


@pytest.fixture(scope="module")
def card(tmp_path_factory):
    root = tmp_path_factory.mktemp("sanity")
    mix("digits-std", "digits-pgd", out=root / "card.toml", cache_dir=root / "cache", **FAST)
    return root / "card.toml", root / "cache"


def test_checks_on_hand_made_flags():
    # three radii (ascending), four examples
    robust = torch.tensor([[1, 1, 1, 0], [0, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.bool)
    grey = torch.tensor([[0, 0, 0, 0], [0, 0, 0, 0], [0, 1, 0, 1]], dtype=torch.bool)
    # example 0: broken at the middle radius, so not robust at the largest one whatever the attack said there;
    # example 1: the grey image breaks it at the largest radius
    expected = torch.tensor([[1, 1, 1, 0], [0, 1, 1, 0], [0, 0, 0, 0]], dtype=torch.bool)
    assert torch.equal(checked_robust(robust, grey), expected)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 5), st.integers(1, 12), st.integers(0, 2**31 - 1))
def test_checked_flags_are_a_monotone_subset(n_radii, n, seed):
    g = torch.Generator().manual_seed(seed)
    robust = torch.rand(n_radii, n, generator=g) < 0.6
    grey = torch.rand(n_radii, n, generator=g) < 0.3
    checked = checked_robust(robust, grey)
    assert not (checked & ~robust).any() and not (checked & grey).any()
    assert not (checked[1:] & ~checked[:-1]).any()  # non-increasing in eps, example by example
    # nothing is removed that neither check explains: broken here by the grey image, or earlier by either
    broken_before = torch.zeros(n, dtype=torch.bool)
    for e in range(n_radii):
        broken_before |= ~robust[e] | grey[e]
        assert torch.equal(robust[e] & ~checked[e], robust[e] & broken_before)


def test_grey_distance_and_default_radii():
    x = torch.tensor([0.0, 0.5, 0.75]).view(1, 1, 1, 3).repeat(2, 1, 1, 1)
    x[1] = 0.6
    assert grey_distance(x, "Linf").tolist() == pytest.approx([0.5, 0.1])
    assert grey_distance(x, "L2").tolist() == pytest.approx([(0.25 + 0.0625) ** 0.5, (3 * 0.01) ** 0.5])
    assert default_radii(0.1, x, "Linf") == [0.1, 0.2, 0.4, 0.5]
    assert default_radii(0.2, x, "Linf") == [0.2, 0.4, 0.5]
    assert default_radii(0.3, x, "L2")[-1] >= float(grey_distance(x, "L2").max())  # reaches every example


def test_sweep_reuses_bench_rows_and_passes_on_the_digits_pair(card, tmp_path):
    from mixzoo.bench import bench

    path, cache = card
    match = dict(match_n=N, match_options={"n_iter": 4, "n_target_classes": 1})
    report = bench(path, attack="adaptive-apgd", n=N, batch_size=N, curve=False, cache_dir=cache, progress=False,
                   **match)
    sweep = eps_sweep(path, n=N, batch_size=N, cache_dir=cache, out=tmp_path / "out", progress=False, **match)
    assert sweep.radii == [0.2, 0.4, 0.5] and sweep.eps == pytest.approx(0.2) and sweep.reach == 0.5
    assert [m.kind for m in sweep.models] == ["abc", "rbc", "linear", "mixednuts"]
    # the linear baseline gets the alpha bench matched, from the cache
    alpha = report.row("linear").alpha
    assert sweep.models[2].alpha == alpha and 0.5 <= alpha <= 1
    assert [m.name for m in sweep.models] == ["digits-std", "digits-pgd", f"Linear mix (alpha={alpha:.2f})",
                                              "MixedNUTS"]
    for m in sweep.models:
        assert m.cached[0] and not any(m.cached[1:])  # bench's row at the nominal eps, the rest attacked here
        assert m.robust_accuracy[0] == report.row(m.kind).robust_accuracy
        assert m.clean_accuracy == report.row(m.kind).clean_accuracy
    # the default (100-iteration) attack finds what there is to find on these models
    assert sweep.passed, sweep.notes
    assert sweep.models[1].robust_accuracy[0] > 0.2 and all(m.robust_accuracy[-1] <= 0.15 for m in sweep.models)
    written = json.loads((tmp_path / "out" / "sanity.json").read_text())
    assert written["passed"] and written["radii"] == sweep.radii
    assert all(row["misses"] == [0, 0, 0] for row in written["models"]) and written["models"][2]["alpha"] == alpha
    assert (tmp_path / "out" / "sanity.png").stat().st_size > 0
    assert "**Passed.**" in (tmp_path / "out" / "sanity.md").read_text()
    from mixzoo.machine import describe_machine, machine_line

    assert written["run"]["machine"] == describe_machine("cpu") and written["run"]["device"] == "cpu"
    assert f"Run on: {machine_line(written['run'])}." in (tmp_path / "out" / "sanity.md").read_text()
    again = eps_sweep(path, n=N, batch_size=N, cache_dir=cache, progress=False, **match)
    assert all(all(m.cached) for m in again.models)
    assert [m.robust_accuracy for m in again.models] == [m.robust_accuracy for m in sweep.models]


def test_a_weak_attack_is_caught(card):
    path, cache = card
    # PGD that barely moves: its "robust accuracy" at eps 0.5 is far above what any classifier can have
    sweep = eps_sweep(path, n=N, batch_size=N, cache_dir=cache, attack="pgd", linear_alpha=0.9,
                      attack_options={"n_iter": 1, "step_size": 1e-6}, progress=False)
    assert not sweep.passed
    labels = load_dataset("digits", "evaluation", n=N).labels
    for m in sweep.models:
        assert m.grey_misses[-1] > 10
        assert m.robust_accuracy[-1] > 0.5
        # at eps 0.5 only examples of the class the model gives the grey image can survive the checks
        assert m.checked_robust_accuracy[-1] <= float((labels == m.grey_class).double().mean())
    assert any("the grey image breaks" in note and "overstates robustness" in note for note in sweep.notes)


class Quantized(nn.Module):
    """Input quantisation: the textbook gradient masking (zero gradient almost everywhere)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(torch.round(x * 4) / 4)


def test_a_gradient_masked_rbc_is_caught(card):
    from mixzoo.models import load_model

    path, cache = card
    masked = Quantized(load_model("digits-pgd"))
    with pytest.warns(UserWarning, match="calibrated for 'digits-pgd'"):
        sweep = eps_sweep(path, rbc=masked, n=N, batch_size=N, cache_dir=cache, radii=[0.2, 0.5], linear=False,
                          progress=False)
    rbc = sweep.models[1]
    assert rbc.name == "RBC (Quantized)"
    assert any("calibrated for 'digits-pgd'" in note for note in sweep.notes)
    assert rbc.robust_accuracy[-1] > 0.3 and rbc.grey_misses[-1] > 10 and not sweep.passed
    assert sweep.models[0].misses == [0, 0]  # the ABC is unmasked


def test_bad_input_fails_with_one_line(card, tmp_path):
    path, cache = card
    with pytest.raises(InputError, match="--n must be positive"):
        eps_sweep(path, n=0, cache_dir=cache)
    with pytest.raises(InputError, match="--eps values must be positive"):
        eps_sweep(path, n=N, radii=[-0.1, 0.2], cache_dir=cache)
    with pytest.raises(InputError, match=r"--linear-alpha must be in \[0.5, 1\]"):
        eps_sweep(path, n=N, linear_alpha=0.3, cache_dir=cache)
    runner = CliRunner()
    res = runner.invoke(app, ["sanity", str(path), "--eps", "0.2,abc", "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "comma-separated list of numbers" in res.output
    assert not (tmp_path / "o").exists()


def test_cli_sanity_strict_exit_status(card, tmp_path):
    path, cache = card
    runner = CliRunner()
    args = ["sanity", str(path), "--n", str(N), "--batch-size", str(N), "--cache-dir", str(cache), "--strict"]
    ok = runner.invoke(app, [*args, "--no-linear", "--out", str(tmp_path / "a"), "--json"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output)["passed"] is True
    weak = runner.invoke(app, [*args, "--attack", "pgd", "--eps", "0.05,0.5", "--linear-alpha", "0.9",
                               "--out", str(tmp_path / "b")])
    written = json.loads((tmp_path / "b" / "sanity.json").read_text())
    assert (weak.exit_code == 1) == (not written["passed"])
    assert "class at grey" in weak.output and "Linear mix (alpha=0.90)" in weak.output
    assert [(m["kind"], m["alpha"]) for m in written["models"]][2:] == [("linear", 0.9), ("mixednuts", None)]
    # attack options from the command line: a PGD that barely moves is caught, and --strict says so
    barely = runner.invoke(app, [*args, "--attack", "pgd", "-O", "n_iter=1", "-O", "step_size=1e-6", "--eps", "0.5",
                                 "--no-linear", "--out", str(tmp_path / "c")])
    assert barely.exit_code == 1, barely.output
    written = json.loads((tmp_path / "c" / "sanity.json").read_text())
    assert [m["kind"] for m in written["models"]] == ["abc", "rbc", "mixednuts"]
    assert written["passed"] is False and written["attack_options"] == {"n_iter": 1, "step_size": 1e-6}
    typo = runner.invoke(app, [*args, "--attack", "pgd", "-O", "n_iters=1", "--out", str(tmp_path / "d")])
    assert typo.exit_code == 2 and "did you mean n_iter" in typo.output
    assert not (tmp_path / "d").exists()
