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
from mixzoo.core.errors import InputError, MixzooError
from mixzoo.evaluation.bench import MatchSettings, bench
from mixzoo.evaluation.sanity import (
    EpsSweep,
    SweepRow,
    _row,
    checked_robust,
    default_radii,
    eps_sweep,
    grey_distance,
    markdown,
)
from mixzoo.methods.mixednuts.fitting import mix
from mixzoo.zoo.data import load_dataset
from mixzoo.zoo.models import load_model

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


@pytest.mark.slow
def test_sweep_reuses_bench_rows_and_passes_on_the_digits_pair(card, tmp_path):
    from mixzoo.evaluation.bench import bench

    path, cache = card
    match = dict(baseline=MatchSettings(n=N, options={"n_iter": 4, "n_target_classes": 1}))
    report = bench(path, attack="adaptive-apgd", n=N, batch_size=N, curve=None, cache_dir=cache, progress=False,
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
    from mixzoo.core.machine import describe_machine, machine_line

    assert written["run"]["machine"] == describe_machine("cpu") and written["run"]["device"] == "cpu"
    assert f"Run on: {machine_line(written['run'])}." in (tmp_path / "out" / "sanity.md").read_text()
    again = eps_sweep(path, n=N, batch_size=N, cache_dir=cache, progress=False, **match)
    assert all(all(m.cached) for m in again.models)
    assert [m.robust_accuracy for m in again.models] == [m.robust_accuracy for m in sweep.models]


def test_a_weak_attack_is_caught(card):
    path, cache = card
    # PGD that barely moves: its "robust accuracy" at eps 0.5 is far above what any classifier can have (alone: the
    # method's extra attacks would break what it misses)
    sweep = eps_sweep(path, n=N, batch_size=N, cache_dir=cache, attack="pgd", baseline=0.9, extra_attacks=False,
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


@pytest.mark.slow
def test_a_gradient_masked_rbc_is_caught(card):
    from mixzoo.zoo.models import load_model

    path, cache = card
    masked = Quantized(load_model("digits-pgd"))
    with pytest.warns(UserWarning, match="calibrated for 'digits-pgd'"):
        sweep = eps_sweep(path, rbc=masked, n=N, batch_size=N, cache_dir=cache, radii=[0.2, 0.5], baseline=None,
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
        eps_sweep(path, n=N, baseline=0.3, cache_dir=cache)
    runner = CliRunner()
    res = runner.invoke(app, ["sanity", str(path), "--eps", "0.2,abc", "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "comma-separated list of numbers" in res.output
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
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
    assert "class at grey" in weak.output and "Linear mix, alpha 0.900" in weak.output
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


N_SMALL = 20
BENCH_SMALL = dict(attack="apgd", n=N_SMALL, attack_options={"n_iter": 5, "n_target_classes": 2}, curve=None,
                   plots=False, baseline=MatchSettings(options={"n_iter": 3, "n_target_classes": 1}), batch_size=25,
                   progress=False)


# --------------------------------------------------------------------------------------------- sanity: by hand
class GreyIsTwo(nn.Module):
    """Class 0 for dark images, 1 for bright ones, 2 at the grey image (logits from the mean pixel m)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = x.flatten(1).mean(dim=1)
        return torch.stack([1 - 2 * m, 2 * m - 1, 1 - 4 * (m - 0.5).abs()], dim=1)


def _images(*values: float, size: int = 4) -> torch.Tensor:
    return torch.stack([torch.full((1, 2, size // 2), v) for v in values])


def _evs(*robust: list[bool]) -> list[dict]:
    return [{"robust_correct": r, "clean_correct": [True] * len(r), "seconds": 1.0} for r in robust]


def test_the_model_is_asked_at_the_grey_image_and_its_argmax_is_the_grey_class():
    model = GreyIsTwo()
    with torch.no_grad():  # the premise: class 2 at x0 = 1/2, class 0 at the black image
        assert int(model(torch.full((1, 1, 2, 2), 0.5)).argmax()) == 2
        assert int(model(torch.zeros(1, 1, 2, 2)).argmax()) == 0
    images = _images(0.4, 0.6)
    row = _row("m", "rbc", model, _evs([True, True]), [0.2], images, torch.tensor([2, 0]), "Linf")
    assert row.grey_class == 2
    # example 0 has the grey class as label: the grey image cannot break it; example 1 it breaks (0.1 <= 0.2)
    assert row.grey_misses == [1] and row.grey_bound == [0.5]


def test_the_grey_image_is_legal_at_exactly_its_distance():
    """x0 lies in the closed ball: ||x - x0|| <= eps, so a distance equal to the radius counts."""
    images = _images(0.25, 0.75, 0.5)  # L-inf distances 0.25, 0.25, 0 (exact in float32)
    row = _row("m", "rbc", GreyIsTwo(), _evs([True, True, True]), [0.25], images, torch.tensor([0, 1, 1]), "Linf")
    assert row.grey_misses == [3] and row.checked_robust_accuracy == [0.0] and row.misses == [3]


def test_the_grey_reach_uses_the_sweeps_norm():
    # 4 pixels at 0.4: L-inf distance 0.1, L2 distance 0.2
    images = _images(0.4)
    labels = torch.tensor([0])
    linf = _row("m", "rbc", GreyIsTwo(), _evs([True], [True]), [0.15, 0.25], images, labels, "Linf")
    l2 = _row("m", "rbc", GreyIsTwo(), _evs([True], [True]), [0.15, 0.25], images, labels, "L2")
    assert linf.grey_misses == [1, 1]
    assert l2.grey_misses == [0, 1] and l2.grey_bound == [1.0, 0.0] and l2.checked_robust_accuracy == [1.0, 0.0]


def test_the_grey_bound_counts_reached_examples_of_the_grey_class_as_unbreakable():
    images = _images(0.5, 0.5, 0.0, 1.0)  # all reached at eps 0.5
    labels = torch.tensor([2, 0, 2, 1])  # the grey image (class 2) breaks examples 1 and 3 only
    row = _row("m", "abc", GreyIsTwo(), _evs([False, False, False, False]), [0.5], images, labels, "Linf")
    assert row.grey_bound == [0.5] and row.grey_misses == [0]


def test_checked_accuracy_is_what_survives_both_checks():
    images = _images(0.0, 0.0, 0.0)  # grey distance 0.5: unreachable at 0.1 and 0.2, reached at 0.5
    labels = torch.tensor([2, 0, 0])
    evs = _evs([True, True, False], [True, False, True], [True, True, True])
    row = _row("m", "rbc", GreyIsTwo(), evs, [0.1, 0.2, 0.5], images, labels, "Linf")
    # example 0 (grey class) survives throughout; 1 is broken at 0.2; 2 broken at 0.1 so not robust at 0.2 or 0.5
    assert row.robust_accuracy == pytest.approx([2 / 3, 2 / 3, 1.0])
    assert row.checked_robust_accuracy == pytest.approx([2 / 3, 1 / 3, 1 / 3])
    assert row.monotone_misses == [0, 1, 0] and row.grey_misses == [0, 0, 2]


def _sweep_row(name: str, mono: list[int], grey: list[int]) -> SweepRow:
    k = len(mono)
    return SweepRow(name=name, kind="rbc", clean_accuracy=0.75, robust_accuracy=[0.5] * k,
                    checked_robust_accuracy=[0.25] * k, monotone_misses=mono, grey_misses=grey, grey_class=0,
                    grey_bound=[1.0] * k, n=4, seconds=[0.0] * k)


def _sweep(*rows: SweepRow) -> EpsSweep:
    return EpsSweep(radii=[0.1, 0.2], models=list(rows), attack="pgd", norm="Linf", eps=0.1, n=4,
                    dataset={"name": "digits", "fingerprint": "f"}, reach=0.5, seconds=0.0)


@pytest.mark.parametrize(("mono", "grey"), [([0, 1], [0, 0]), ([0, 0], [1, 0])])
def test_either_kind_of_miss_fails_the_sweep_and_is_counted(mono, grey):
    sweep = _sweep(_sweep_row("a", [0, 0], [0, 0]), _sweep_row("b", mono, grey))
    assert not sweep.passed
    assert sweep.models[1].misses == [m + g for m, g in zip(mono, grey, strict=True)]
    written = sweep.to_dict()
    assert written["passed"] is False and written["models"][1]["misses"] == sweep.models[1].misses
    assert _sweep(_sweep_row("a", [0, 0], [0, 0])).passed


def test_both_kinds_of_misses_are_added():
    row = _sweep_row("b", [2, 1], [3, 0])
    assert row.misses == [5, 1]


def test_markdown_cells_show_checked_accuracy_and_misses_only_where_there_are_misses():
    text = markdown(_sweep(_sweep_row("ok", [0, 0], [0, 0]), _sweep_row("bad", [0, 1], [0, 0])))
    assert "| RBC ok | 75.0 | 0 | 50.0 | 50.0 |" in text
    assert "| RBC bad | 75.0 | 0 | 50.0 | 50.0 -> 25.0 (1 missed) |" in text and "**FAILED.**" in text


def test_default_radii_keep_the_nominal_eps_beyond_the_grey_reach():
    x = _images(0.0, 0.3)  # L-inf reach 0.5
    assert default_radii(0.6, x, "Linf") == [0.6]
    assert default_radii(0.5, x, "Linf") == [0.5]


# ------------------------------------------------------------------------------------ digits card and report
@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    root = tmp_path_factory.mktemp("check")
    mix("digits-std", "digits-pgd", out=root / "card.toml", cache_dir=root / "cache", **FAST)
    bench(root / "card.toml", out=root / "bench", cache_dir=root / "cache", save_adversarial=True, **BENCH_SMALL)
    return root


def test_sweep_input_checks_before_any_work(tmp_path):
    missing = tmp_path / "no-card.toml"
    with pytest.raises(InputError, match="--eps values must be positive"):
        eps_sweep(missing, radii=[0.0, 0.2], n=4, cache_dir=tmp_path)
    with pytest.raises(InputError, match=r"--linear-alpha must be in \[0.5, 1\]"):
        eps_sweep(missing, baseline=1.01, n=4, cache_dir=tmp_path)
    for alpha in (0.5, 1.0):  # the ends of [1/2, 1] are legal: the next complaint is the missing card
        with pytest.raises(MixzooError) as err:
            eps_sweep(missing, baseline=alpha, n=4, cache_dir=tmp_path)
        assert "--linear-alpha" not in str(err.value) and "no-card.toml" in str(err.value)


@pytest.mark.slow
def test_sweep_sorts_radii_and_evaluates_the_models_it_names(digits, tmp_path):
    from mixzoo.methods.mixednuts.mixing import MixedClassifier

    sweep = eps_sweep(digits / "card.toml", n=N_SMALL, batch_size=N_SMALL, radii=[0.5, 0.2], attack="pgd",
                      attack_options={"n_iter": 1}, baseline=1.0, cache_dir=tmp_path / "cache", progress=False)
    assert sweep.radii == [0.2, 0.5] and sweep.reach == 0.5
    # the largest radius reaches every example (the digits all have a 0 pixel): no "add it to --eps" note
    assert not any("is below" in note for note in sweep.notes)
    data = load_dataset("digits", "evaluation", n=N_SMALL)
    abc, rbc = load_model("digits-std"), load_model("digits-pgd")
    mixed = MixedClassifier.from_card(digits / "card.toml", abc, rbc)
    grey = torch.full_like(data.images[:1], 0.5)

    def clean(model):
        with torch.no_grad():
            return float((model(data.images).argmax(1) == data.labels).double().mean())

    def grey_class(model):
        with torch.no_grad():
            return int(model(grey).argmax(1))

    # premise: the RBC and the ABC differ here, so each row shows which model it evaluated
    assert clean(abc) != clean(rbc) and grey_class(abc) != grey_class(rbc)
    lin, nuts = sweep.models[2], sweep.models[3]
    # alpha = 1: the linear mixture is the RBC's softmax (Bai et al. Eq. 1), not the ABC's
    assert lin.clean_accuracy == clean(rbc) and lin.grey_class == grey_class(rbc)
    assert nuts.clean_accuracy == clean(mixed) and nuts.grey_class == grey_class(mixed)


def _edited_card(digits, tmp_path, **changes):
    from mixzoo.core.card import MixCard

    data = MixCard.load(digits / "card.toml").to_dict()
    for key, value in changes.items():
        # a common table (attack, data, ...) or a parameter of the method's section (alpha: data["mixednuts"])
        where = data if key in data else data[data["method"]]
        if isinstance(value, dict):
            where[key] = {**where[key], **value}
        else:
            where[key] = value
    return MixCard.from_dict(data).save(tmp_path / "edited.toml")


def test_the_mixednuts_row_evaluates_the_cards_mixture(digits, tmp_path):
    """At alpha = 1/2 with T = 0 the mixture answers the ABC's class (the ABC's one-hot weighs 1/2, paper Eq. 5),
    so its row differs from the RBC's: clean accuracy and class at the grey image are the mixture's."""
    from mixzoo.core.card import MixCard
    from mixzoo.methods.mixednuts.mixing import MixedClassifier

    card = _edited_card(digits, tmp_path, alpha=0.5)
    assert MixCard.load(card).params["alpha"] == 0.5
    sweep = eps_sweep(card, n=N, batch_size=N, radii=[0.2], attack="pgd", attack_options={"n_iter": 1},
                      baseline=None, cache_dir=tmp_path / "cache", progress=False)
    data = load_dataset("digits", "evaluation", n=N)
    abc, rbc = load_model("digits-std"), load_model("digits-pgd")
    mixed = MixedClassifier.from_card(MixCard.load(card), abc, rbc)
    grey = torch.full_like(data.images[:1], 0.5)
    clean = float((_predict(mixed, data.images) == data.labels).double().mean())
    assert clean != float((_predict(rbc, data.images) == data.labels).double().mean())  # premise
    assert int(_predict(mixed, grey)[0]) != int(_predict(rbc, grey)[0])  # premise
    nuts = sweep.models[-1]
    assert nuts.kind == "mixednuts" and nuts.clean_accuracy == clean
    assert nuts.grey_class == int(_predict(mixed, grey)[0])


def test_an_l2_sweep_reaches_the_farthest_example(digits, tmp_path):
    card = _edited_card(digits, tmp_path, attack={"norm": "L2", "eps": 1.0})
    sweep = eps_sweep(card, n=N_SMALL, batch_size=N_SMALL, radii=[1.0], attack="pgd", attack_options={"n_iter": 1},
                      baseline=None, cache_dir=tmp_path / "cache", progress=False)
    images = load_dataset("digits", "evaluation", n=N_SMALL).images
    dist = (images - 0.5).flatten(1).norm(dim=1)
    assert dist.min() < dist.max() - 0.1  # premise: in L2 the examples lie at different distances from grey
    assert sweep.norm == "L2" and sweep.reach == pytest.approx(float(dist.max()))
    assert any(f"is below {float(dist.max()):g}" in note for note in sweep.notes)


def test_sweep_notes_a_largest_radius_below_the_grey_reach(digits, tmp_path):
    sweep = eps_sweep(digits / "card.toml", n=N_SMALL, batch_size=N_SMALL, radii=[0.2], attack="pgd", baseline=None,
                      attack_options={"n_iter": 1}, cache_dir=tmp_path / "cache", progress=False)
    assert any("is below 0.5" in note for note in sweep.notes)


def _predict(model, images):
    with torch.no_grad():
        return model(images).argmax(1)


K = 10


def test_eps_sweep_counts_each_miss_once():
    """A robust example the grey image would break is a grey miss, not also a monotonicity miss."""
    from mixzoo.evaluation.sanity import _row

    class Grey(nn.Module):  # the grey image is classified 0
        def forward(self, x):
            out = torch.zeros(len(x), K)
            out[:, 0] = 1.0
            return out

    images = torch.stack([torch.full((1, 2, 2), v) for v in (0.5, 0.45, 0.0, 1.0)])  # grey distance .0,.05,.5,.5
    labels = torch.tensor([1, 1, 1, 1])
    radii = [0.1, 0.6]
    evs = [{"robust_correct": [True, True, True, False], "clean_correct": [True] * 4, "seconds": 1.0},
           {"robust_correct": [False, True, True, False], "clean_correct": [True] * 4, "seconds": 1.0}]
    row = _row("m", "rbc", Grey(), evs, radii, images, labels, "Linf")
    # eps 0.1: examples 0 and 1 are within reach of the grey image (class 0 != 1) yet reported robust -> 2 grey
    # misses; eps 0.6: example 1 and 2 are robust and grey-breakable -> 2 grey misses, and no monotone miss counted
    assert row.grey_misses == [2, 2] and row.monotone_misses == [0, 0]


@pytest.mark.slow
def test_cli_sanity_prints_the_time_the_command_took(card, tmp_path):
    """Its plan and its files included: a sweep the cache holds takes next to nothing itself, the command not."""
    import re
    import time

    path, cache = card
    args = ["sanity", str(path), "--n", str(N), "--batch-size", str(N), "--cache-dir", str(cache), "--no-linear",
            "--attack", "pgd", "-O", "n_iter=2", "--eps", "0.1", "--out", str(tmp_path / "s")]
    CliRunner().invoke(app, args)  # fills the cache
    t0 = time.perf_counter()
    res = CliRunner().invoke(app, args)
    took = time.perf_counter() - t0
    assert res.exit_code == 0, res.output
    printed = float(re.search(r"^([0-9.]+) s; written to", res.output, re.M).group(1))
    swept = json.loads((tmp_path / "s" / "sanity.json").read_text())["seconds"]
    assert printed > swept + 0.05 and printed <= took + 0.05, (printed, swept, took)
