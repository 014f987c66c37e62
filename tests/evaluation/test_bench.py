"""The bench's own bookkeeping (mixzoo/evaluation/bench.py): batches merged in order, saved points, resumed and
damaged runs, intervals, run settings, the linear baseline matched to the mixture and the trade-off curve."""

from __future__ import annotations

import dataclasses
import math
import types

import pytest
import torch
from card_fields import nuts_card
from eval_requests import ask
from torch import nn

import mixzoo
import mixzoo.attacks.runner
import mixzoo.zoo.pairs
from mixzoo.attacks.result import ComponentStat, EvalResult
from mixzoo.core.cache import Cache
from mixzoo.core.card import MixCard
from mixzoo.core.errors import InputError
from mixzoo.core.request import ReportRequest


# ================================================================================================= bench
def indexed_images(n: int) -> torch.Tensor:
    """Image i is constant i / 100, so a fake attack can tell which example it is given."""
    return (torch.arange(n, dtype=torch.float32) / 100).view(n, 1, 1, 1).expand(n, 1, 2, 2).clone()


def example_ids(images: torch.Tensor) -> list[int]:
    return [round(float(v) * 100) for v in images[:, 0, 0, 0]]


def clean_ok(i: int) -> bool:
    return i % 3 != 0


def robust_ok(i: int) -> bool:
    return i % 3 == 1


class Scripted:
    """A stand-in attack with known outcomes: example i is clean-correct unless i % 3 == 0 and robust only if
    i % 3 == 1. Each batch reports two components (``square`` breaking one of its broken examples, ``apgd-ce`` the
    others: their counts add up to the outcomes, as a cache entry's must) and
    takes ``len(batch)`` seconds. Records the seed of every batch; ``fail_on`` interrupts that run call."""

    seeds: list[int] = []
    calls = 0
    fail_on: int | None = None

    def __init__(self, eps, norm, seed, **options):
        Scripted.seeds.append(seed)

    def run(self, model, images, labels, progress=False):
        Scripted.calls += 1
        if Scripted.calls == Scripted.fail_on:
            raise KeyboardInterrupt
        ids = example_ids(images)
        clean = torch.tensor([clean_ok(i) for i in ids])
        robust = torch.tensor([robust_ok(i) for i in ids])
        broken = int((clean & ~robust).sum())
        return EvalResult("scripted", 0.1, "Linf", len(ids), clean, robust, images + 0.001,
                          [ComponentStat("apgd-ce", broken - min(broken, 1), 0.5),
                           ComponentStat("square", min(broken, 1), 0.25)], [],
                          float(len(ids)))


@pytest.fixture()
def scripted(monkeypatch):
    import mixzoo.core.plugins

    Scripted.seeds, Scripted.calls, Scripted.fail_on = [], 0, None
    monkeypatch.setattr(mixzoo.core.plugins, "lookup", lambda kind, name: Scripted)
    return Scripted


def run_evaluate(cache: Cache, n: int = 10, batch_size: int = 4, **kw):
    from mixzoo.attacks.runner import evaluate

    images = indexed_images(n)
    return evaluate(nn.Identity(), images, torch.zeros(n, dtype=torch.long),
                    ask(attack="scripted", eps=0.1, norm="Linf", seed=kw.pop("seed", 7), batch_size=batch_size,
                        cache=cache, key_parts={"test": "merge"}, label="m", progress=False, **kw))


def test_evaluate_merges_batches_in_order_with_summed_counts_and_times(scripted, tmp_path):
    """10 examples in batches of 4, 4, 2: outcomes concatenated in example order, seconds and per-component
    counts summed over batches; the scripted attack's run() takes no index (no per-example seeds), so batch k is
    attacked with seed + k and the warnings say that results depend on the batch size."""
    from mixzoo.attacks.base import square_masking_note

    ev = run_evaluate(Cache(tmp_path, enabled=False), seed=7)
    assert scripted.seeds == [7, 8, 9]
    assert ev["clean_correct"] == [clean_ok(i) for i in range(10)]
    assert ev["robust_correct"] == [robust_ok(i) for i in range(10)]
    assert ev["seconds"] == pytest.approx(4 + 4 + 2)
    broken = sum(clean_ok(i) and not robust_ok(i) for i in range(10))  # examples 2, 5, 8
    assert ev["components"] == [{"name": "apgd-ce", "newly_broken": broken - 3, "seconds": pytest.approx(1.5)},
                                {"name": "square", "newly_broken": 3, "seconds": pytest.approx(0.75)}]
    assert ev["warnings"][0] == square_masking_note(3) and len(ev["warnings"]) == 2
    assert "cannot draw its randomness per example" in ev["warnings"][1]


def test_saved_points_are_the_broken_examples_with_their_global_index(scripted, tmp_path):
    ev = run_evaluate(Cache(tmp_path, enabled=False), save_adversarial=True)
    want = [i for i in range(10) if clean_ok(i) and not robust_ok(i)]
    assert ev["adversarial"]["index"].tolist() == want == [2, 5, 8]
    assert example_ids(ev["adversarial"]["images"] - 0.001) == want


def test_an_interrupted_evaluation_reattacks_only_the_missing_batches_then_cleans_up(scripted, tmp_path):
    cache = Cache(tmp_path / "c")
    scripted.fail_on = 2  # the second batch is interrupted
    with pytest.raises(KeyboardInterrupt):
        run_evaluate(cache, save_adversarial=True)
    assert len(list((cache.root / "bench").glob("*.partial/*.json"))) == 1
    scripted.seeds, scripted.calls, scripted.fail_on = [], 0, None
    resumed = run_evaluate(cache, save_adversarial=True)
    assert scripted.calls == 2 and scripted.seeds == [8, 9]  # batches 1 and 2, with their own seeds
    assert resumed["robust_correct"] == [robust_ok(i) for i in range(10)]
    assert resumed["adversarial"]["index"].tolist() == [2, 5, 8]
    assert resumed["seconds"] == pytest.approx(10)
    assert not list((cache.root / "bench").glob("*.partial")), "finished: the per-batch files are gone"
    again = run_evaluate(cache, save_adversarial=True)
    assert again["cached"] and scripted.calls == 2


def test_a_damaged_finished_outcome_is_attacked_again(scripted, tmp_path):
    cache = Cache(tmp_path / "c")
    first = run_evaluate(cache)
    [final] = (cache.root / "bench").glob("*.json")
    final.write_text('{"clean_correct": [tru')
    scripted.calls = 0
    again = run_evaluate(cache)
    assert scripted.calls == 3 and not again.get("cached")
    assert again["robust_correct"] == first["robust_correct"]


def wilson(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The Wilson score interval, written out (Wilson 1927)."""
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


def test_each_rows_interval_is_that_of_its_own_accuracy():
    from mixzoo.evaluation.results import row_result as _result

    ev = {"clean_correct": [True] * 8 + [False] * 2, "robust_correct": [True] * 3 + [False] * 7, "seconds": 1.0,
          "components": [], "warnings": []}
    row = _result("m", "abc", ev, "apgd", 0.1, "Linf")
    assert (row.clean_accuracy, row.robust_accuracy, row.n) == (0.8, 0.3, 10)
    assert row.clean_ci == pytest.approx(wilson(8, 10)) and row.robust_ci == pytest.approx(wilson(3, 10))
    assert (row.clean_outcomes, row.robust_outcomes) == ("1" * 8 + "00", "111" + "0" * 7)


def test_terminal_seconds_name_the_device_only_when_it_is_not_the_runs():
    from mixzoo.evaluation.bench import ModelResult
    from mixzoo.evaluation.report import seconds_cell

    row = ModelResult(name="x", kind="abc", clean_accuracy=1.0, robust_accuracy=0.5, attack="apgd", epsilon=0.1,
                      norm="Linf", n=4, seconds=12.4, device="cpu")
    assert seconds_cell(row, "cpu") == "12"
    assert seconds_cell(row, "cuda") == "12 (cpu)"
    assert seconds_cell(dataclasses.replace(row, cached=True), "cpu") == "12 (cached)"
    # report.md always names the device ("?" when unknown)
    assert seconds_cell(dataclasses.replace(row, cached=True)) == "12 (cpu, cached)"
    assert seconds_cell(dataclasses.replace(row, device="")) == "12 (?)"


def test_run_settings_refuse_zero_images():
    from mixzoo.core.settings import RunSettings
    from mixzoo.evaluation.bench import check_run_settings

    with pytest.raises(InputError, match="--n must be positive, got 0"):
        check_run_settings(RunSettings(n=0, batch_size=10, attack="apgd"))
    check_run_settings(RunSettings(n=1, batch_size=10, attack="apgd"))


def test_a_card_may_keep_as_many_top_classes_as_the_task_has():
    from mixzoo.evaluation.bench import card_evaluation

    assert card_evaluation(digits_card(top_k=10), n=10).data.num_classes == 10


# -------------------------------------------------------------------------------- matching the linear baseline
def digits_card(**changes) -> MixCard:
    return nuts_card(**{**dict(s=2.0, p=2.0, c=-0.5, alpha=0.9, beta=0.985, dataset="digits",
                             abc={"name": "digits-std"}, rbc={"name": "digits-pgd"}), **changes})


def linear_robust(alpha: float, n: int) -> list[bool]:
    """A made-up linear mixture: round(2 (alpha - 1/2) n) of n examples robust, growing with alpha."""
    k = round(2 * (alpha - 0.5) * n)
    return [True] * k + [False] * (n - k)


def test_linear_baseline_is_matched_on_the_first_images_and_on_robust_accuracy(monkeypatch):
    """MixedNUTS's robust accuracy on the first match_n = 8 of 20 images is 2/8 (its clean accuracy 1, on all
    images 2/20): the target is 1/4 and every evaluation sees those 8 images."""
    from mixzoo.evaluation.bench import CardEvaluation, matched_linear_alpha

    seen = []

    def fake_evaluate(model, images, labels, request):
        seen.append((request.label, example_ids(images)))
        run = {"clean_correct": [True] * len(images), "seconds": 1.0, "components": [], "warnings": []}
        if request.label.startswith("MixedNUTS"):  # the shared attack and the extra one (apgd-bypass) alike
            return {**run, "robust_correct": [i < 2 for i in example_ids(images)]}
        return {**run, "robust_correct": linear_robust(model.alpha, len(images))}

    monkeypatch.setattr(mixzoo.attacks.runner, "evaluate", fake_evaluate)  # the card's run, the linear bisection
    data = types.SimpleNamespace(images=indexed_images(20), labels=torch.zeros(20, dtype=torch.long),
                                 fingerprint="f")
    ce = CardEvaluation(digits_card(), nn.Linear(2, 2), nn.Linear(2, 2), nn.Identity(), data, 0.1, "Linf", [])
    alpha, tried, target = matched_linear_alpha(ce, ask(attack="apgd", eps=0.1, norm="Linf", seed=0, batch_size=4,
                                                        progress=False), match_n=8)
    assert target == 2 / 8
    assert all(set(ids) <= set(range(8)) for _, ids in seen) and seen[0][1] == list(range(8))
    assert sum(linear_robust(alpha, 8)) == 2  # the chosen mixture matches: 2 robust examples of 8
    assert {"alpha": alpha, "robust_accuracy": 0.25} in tried


def test_bench_rows_linear_mixture_and_points_are_each_their_own(monkeypatch):
    """bench() with the attack replaced: the linear row is Bai et al.'s mixture (1 - a) softmax(g) + a softmax(h)
    at the matched alpha (not the card's), the matching covers min(match_n, n) images, and every row keeps its own
    saved points."""
    from mixzoo.evaluation.bench import bench

    models: dict[str, nn.Module] = {}
    markers = {"digits-std": 0, "digits-pgd": 1, "MixedNUTS": 2}

    def fake_evaluate(model, images, labels, request):
        label, save_adversarial = request.label, request.save_adversarial
        n = len(images)
        models[label] = model
        if label.startswith("linear"):
            robust = linear_robust(model.alpha, n)
        elif label.startswith("MixedNUTS"):
            robust = [True] * (n // 4) + [False] * (n - n // 4)  # robust accuracy 1/4
        else:
            robust = [True] * n
        ev = {"clean_correct": [True] * n, "robust_correct": robust, "seconds": 1.0, "components": [],
              "warnings": [], "device": "cpu", "machine": "m"}
        if save_adversarial:
            ev["adversarial"] = {"index": torch.tensor([markers.get(label, 3)]), "images": torch.zeros(1, 1, 8, 8)}
        return ev

    monkeypatch.setattr(mixzoo.attacks.runner, "evaluate", fake_evaluate)  # every row, the linear bisection
    report = bench(digits_card(), attack="apgd", n=12, curve=None, plots=False, save_adversarial=True,
                   use_cache=False, progress=False, extra_attacks=False)  # MixedNUTS's own: methods/test_methods.py
    linear = report.row("linear")
    assert sum(linear_robust(linear.alpha, 12)) == 3 and linear.alpha != report.card.params["alpha"]
    assert report.settings["linear_alpha_match"]["n"] == 12
    assert report.settings["linear_alpha_match"]["target_robust_accuracy"] == 0.25
    mixture = models[f"linear alpha={linear.alpha}"]
    abc, rbc = models["digits-std"], models["digits-pgd"]
    x = torch.rand(5, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = (1 - linear.alpha) * abc(x).softmax(1) + linear.alpha * rbc(x).softmax(1)
        torch.testing.assert_close(mixture(x).exp(), expected, rtol=1e-5, atol=1e-6)
    assert {k: v["index"].tolist() for k, v in report.adversarial.items()} == {
        "abc": [0], "rbc": [1], "mixednuts": [2], "linear": [3]}


# ----------------------------------------------------------------------------------------- trade-off curve
def test_each_curve_point_uses_the_alpha_calibrated_at_its_beta(monkeypatch):
    """Fig. 8: MixedNUTS recalibrated at every beta; the point's model and clean accuracy use that calibration's
    alpha, not the card's."""
    import importlib

    from mixzoo.methods.mixednuts.mixing import mix_log_probs

    g = torch.tensor([[2.0, 0.0, 0.0], [0.0, 1.0, 0.0], [2.0, 0.0, 0.0], [0.0, 0.0, 3.0]])
    h = torch.tensor([[0.0, 1.5, 0.0], [0.0, 0.0, 1.0], [0.5, 1.0, 0.0], [0.0, 2.0, 0.0]])
    labels = torch.tensor([0, 1, 0, 2])
    data = types.SimpleNamespace(images=torch.zeros(4, 1, 2, 2), labels=labels, fingerprint="f")
    # calibrate is replaced; the curve records how many calibration images it recalibrated on
    cal = types.SimpleNamespace(clean_logits=None, attacked_logits=None, labels=torch.zeros(7, dtype=torch.long))
    import mixzoo.methods.mixednuts.figures as figures

    monkeypatch.setattr(figures, "calibration_data_for", lambda *a, **k: cal)
    monkeypatch.setattr(mixzoo.zoo.pairs, "cached_logits", lambda model, d, **k: g if "ABC" in k["what"] else h)
    calibrated = {0.9: MixCard("mixednuts", {"s": 1.0, "p": 1.0, "c": 0.0, "alpha": 0.55, "beta": 0.9}),
                  0.99: MixCard("mixednuts", {"s": 1.0, "p": 1.0, "c": 0.0, "alpha": 0.95, "beta": 0.99})}
    monkeypatch.setattr(importlib.import_module("mixzoo.methods.mixednuts.calibrate"), "calibrate",
                        lambda **k: calibrated[k["beta"]])

    alphas_attacked = []

    def fake_evaluate(model, images, labels_r, request):
        alphas_attacked.append(getattr(model, "alpha", None))  # the ABC and the RBC alone have none
        return {"robust_correct": [True] * len(images)}

    monkeypatch.setattr(mixzoo.attacks.runner, "evaluate", fake_evaluate)  # the curve runs attacks through it
    card = MixCard("mixednuts", {"s": 1.0, "p": 1.0, "c": 0.0, "alpha": 0.75, "beta": 0.99})
    request = ReportRequest(ask(attack="apgd", eps=0.1, norm="Linf", seed=0, batch_size=4, progress=False), n=4)
    cur = figures.tradeoff_curve(card, nn.Flatten(), nn.Flatten(), data, request, betas=(0.9, 0.99), alphas=())

    def clean(alpha: float) -> float:
        lp = mix_log_probs(g, h, s=1.0, p=1.0, c=0.0, alpha=alpha, clamp="gelu")
        return float((lp.argmax(1) == labels).float().mean())

    assert clean(0.55) != clean(0.95) and clean(0.55) != clean(0.75)  # the choice of alpha matters here
    assert alphas_attacked == [0.55, 0.95, None, None]  # then the ABC and the RBC alone, on the same images
    assert cur["n_calibration"] == 7
    assert [(p["beta"], p["alpha"], p["clean_accuracy"]) for p in cur["mixednuts"]] == [
        (0.9, 0.55, clean(0.55)), (0.99, 0.95, clean(0.95))]


def test_a_matched_baseline_at_alpha_one_is_said_to_be_the_rbc(digits_card, tmp_path):
    """At n=10 on digits no constant alpha below 1 comes closer to the card's robust accuracy: the report says the
    "Linear mix (alpha=1.00)" row is the RBC alone."""
    from mixzoo.evaluation.bench import MatchSettings, bench

    quick = {"n_iter": 5, "n_target_classes": 1}
    report = bench(digits_card, attack="apgd", n=10, cache_dir=tmp_path / "cache", attack_options=quick, curve=None,
                   plots=False, baseline=MatchSettings(n=10, attack="apgd", options=quick), progress=False,
                   extra_attacks=False)
    linear = next(m for m in report.models if m.kind == "linear")
    assert linear.alpha == 1.0
    assert any("alpha 1.00, so it is the RBC alone" in n for n in report.notes), report.notes


def test_an_old_style_baseline_method_is_matched_with_the_former_keywords(monkeypatch):
    """A third-party baseline method written for mixzoo 0.1 (``match(..., **kw)``, no request) is still called,
    with evaluate's former keyword arguments, and a DeprecationWarning says to take a request."""
    import mixzoo.evaluation.matching as matching_module
    from mixzoo.deprecated.methods import adapt_method  # what the table of methods does to a third party's
    from mixzoo.evaluation.bench import CardEvaluation, matched_linear_alpha

    received = {}

    class OldBaseline:
        name = "old-baseline"

        def match(self, abc, rbc, images, labels, target, **kw):
            received.update(kw)
            return 0.75, [{"alpha": 0.75, "robust_accuracy": target}]

    def fake_evaluate(model, images, labels, request):
        return {"clean_correct": [True] * len(images), "robust_correct": [True] * len(images), "seconds": 1.0,
                "components": [], "warnings": []}

    monkeypatch.setattr(matching_module, "baseline_method", lambda: adapt_method(OldBaseline(), "third-party"))
    monkeypatch.setattr(mixzoo.attacks.runner, "evaluate", fake_evaluate)
    data = types.SimpleNamespace(images=indexed_images(6), labels=torch.zeros(6, dtype=torch.long), fingerprint="f")
    ce = CardEvaluation(digits_card(), nn.Linear(2, 2), nn.Linear(2, 2), nn.Identity(), data, 0.1, "Linf", [])
    request = ask(attack="apgd", eps=0.1, norm="Linf", seed=4, batch_size=3, attack_options={"n_iter": 2},
                  progress=False)
    deprecated = r"'old-baseline': match\(abc, rbc, images, labels, target, \*\*kw\)"
    with pytest.warns(DeprecationWarning, match=deprecated):
        alpha, _, target = matched_linear_alpha(ce, request, match_n=4, extra_attacks=False)
    assert (alpha, target) == (0.75, 1.0)
    assert {k: received[k] for k in ("attack", "eps", "norm", "seed", "batch_size", "attack_options",
                                     "per_example_seeds", "progress")} == {
        "attack": "apgd", "eps": 0.1, "norm": "Linf", "seed": 4, "batch_size": 3, "attack_options": {"n_iter": 2},
        "per_example_seeds": True, "progress": False}
    assert received["key_parts"]["match_n"] == 4 and received["cache"] is request.cache


def test_an_old_style_trade_off_curve_is_called_with_the_former_keywords():
    """A third-party method whose tradeoff_curve takes mixzoo 0.1's keyword arguments (no request) still gets its
    curve into the report, with the curve's settings as those keywords and a DeprecationWarning."""
    from mixzoo.core.settings import RunSettings
    from mixzoo.deprecated.methods import adapt_method  # what the table of methods does to a third party's
    from mixzoo.evaluation.bench import BenchRun, CurveSettings, _add_curve
    from mixzoo.evaluation.job import BenchJob, Step

    received = {}

    class OldCurve:
        name = "old-curve"

        def tradeoff_curve(self, card, abc, rbc, data, **kw):
            received.update(kw)
            return {"attack": kw["attack"], "points": []}

    card = types.SimpleNamespace(mixing_method=adapt_method(OldCurve(), "third-party"))
    ce = types.SimpleNamespace(abc=nn.Identity(), rbc=nn.Identity(), data=types.SimpleNamespace(labels=torch.zeros(8)))
    curve = CurveSettings(attack="fast", options={"n_iter": 3}, n=6, points=2)
    run = BenchRun(BenchJob(RunSettings(data_dir="d"), {}, None, curve, (card,)), ce,
                   ask(attack="apgd", eps=0.1, norm="Linf", seed=2, batch_size=4, progress=False), 4, [])
    report = types.SimpleNamespace(curve=None, settings={"components": {}})
    with pytest.warns(DeprecationWarning, match="'old-curve': tradeoff_curve"):
        _add_curve(run, report, Step("curve", card, 2))
    assert run.curve_data == {"attack": "fast", "points": []}
    assert {k: received[k] for k in ("attack", "attack_options", "n", "eps", "norm", "seed", "batch_size",
                                     "data_dir", "device", "progress", "points")} == {
        "attack": "fast", "attack_options": {"n_iter": 3}, "n": 6, "eps": 0.1, "norm": "Linf", "seed": 2,
        "batch_size": 4, "data_dir": "d", "device": "cpu", "progress": False, "points": 2}
