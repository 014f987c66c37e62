"""Mixing methods are plugins: the hook, the built-in methods, cards of any method, the bench over
several cards with each method's declared attacks, and the rule that the core never names a method."""

from __future__ import annotations

import ast
import json
import math
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

from mixzoo.core.card import MixCard
from mixzoo.core.errors import InputError, MixzooError
from mixzoo.core.plugins import hookimpl, lookup, plugin_infos, register_plugin, table, unregister_plugin
from mixzoo.methods import ExtraAttack, MixingMethod, default_method, fit, get_method

ROOT = Path(__file__).resolve().parents[2]
PAIR = {"abc": {"name": "digits-std"}, "rbc": {"name": "digits-pgd"}, "dataset": "digits"}


def test_builtin_methods_come_from_the_methods_plugin():
    methods = table("method")
    assert {"mixednuts", "linear"} <= set(methods)
    assert default_method() == "mixednuts"
    info = {i.name: i for i in plugin_infos()}
    assert info["methods"].provides["methods"] == ["adaptive-smoothing", "knn-smoothing", "linear",
                                                   "local-smoothing", "local-smoothing-adaptive", "mixednuts"]
    assert info["methods"].error is None
    with pytest.raises(Exception, match="linaer"):
        lookup("method", "linaer")


def test_core_bench_and_cli_name_no_method():
    """Nothing outside mixzoo/methods/ (and the plugin that registers them) may name a built-in method: a string
    constant "mixednuts" / "linear" there would mean the core knows a method."""
    offenders = []
    for path in sorted((ROOT / "mixzoo").rglob("*.py")):
        rel = path.relative_to(ROOT / "mixzoo").as_posix()
        if rel.startswith("methods/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in ("mixednuts", "linear"):
                offenders.append(f"{rel}:{node.lineno} {node.value!r}")
    assert not offenders, offenders


def test_schema1_card_loads_with_warning_and_same_classifier(tmp_path):
    with pytest.warns(UserWarning, match="run `mixzoo mix` again"):
        old = MixCard.load(ROOT / "benchmarks" / "results" / "cards" / "fmnist_mixednuts_population_ln.toml")
    assert old.method == "mixednuts" and old.params["fit"] == "mmaa" and old.schema_version == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a schema-2 file loads silently
        new = MixCard.load(old.save(tmp_path / "v2.toml"))
    assert new == old and new.params["alpha"] == pytest.approx(0.9826, abs=1e-4)
    text = (tmp_path / "v2.toml").read_text()
    assert 'method = "mixednuts"' in text and "[mixednuts]" in text and "\ns = " in text


def test_schema1_linear_card_is_claimed_by_linear(tmp_path):
    path = tmp_path / "v1.json"
    path.write_text(json.dumps({"schema_version": 1, "s": 1.0, "p": 1.0, "c": 0.0, "alpha": 0.93, "clamp": "linear",
                                "beta": 0.985, "temperature": 1.0, "method": "linear"}))
    card = MixCard.load(path)  # schema 1 is upgraded by MixCard.load only
    with pytest.raises(InputError, match="schema-1 card; read it from its file with MixCard.load"):
        MixCard.from_dict(json.loads(path.read_text()))
    assert card.method == "linear" and card.params["alpha"] == 0.93 and card.params["temperature"] == 1.0


def _pair_models():
    from digits_models import train_digits_mlp

    g, x, y = train_digits_mlp(seed=0, steps=200)
    h, _, _ = train_digits_mlp(seed=1, steps=50)
    return g, h, x, y


def test_linear_method_builds_eq_3_4_in_float64():
    """001 Eq. 3.4: log((1 - alpha) softmax(g / T) + alpha softmax(h)), checked against a direct computation."""
    g, h, x, _ = _pair_models()
    card = MixCard("linear", {"alpha": 0.8, "temperature": 2.0}, **PAIR)
    out = get_method("linear").build(g.double(), h.double(), card)(x.double())
    expect = torch.log(0.2 * torch.softmax(g.double()(x.double()) / 2.0, -1)
                       + 0.8 * torch.softmax(h.double()(x.double()), -1))
    assert torch.allclose(out, expect, atol=1e-12)


@pytest.mark.parametrize(("params", "message"), [
    ({"alpha": 0.3}, "'linear.alpha' must be in"),
    ({"alpha": "big"}, "'linear.alpha' must be a finite number"),
    ({}, "missing field 'linear.alpha'"),
    ({"alpha": 0.9, "fit": "magic"}, "'linear.fit' must be one of"),
    ({"alpha": 0.9, "temperature": -1.0}, "'linear.temperature' must be in"),
])
def test_linear_section_errors_name_the_field(params, message):
    with pytest.raises(InputError, match=message):
        MixCard("linear", params, **PAIR)


def test_fit_refuses_unknown_and_conflicting_options(tmp_path):
    with pytest.raises(InputError, match="takes no option 'clamp'"):
        fit("linear", "digits-std", "digits-pgd", options={"clamp": "gelu"}, out=tmp_path / "c.toml")
    with pytest.raises(InputError, match="one of alpha, beta, target_robust"):
        fit("linear", "digits-std", "digits-pgd", options={"alpha": 0.9, "beta": 0.98}, out=tmp_path / "c.toml")
    with pytest.raises(MixzooError, match="unknown method"):
        fit("nope", "digits-std", "digits-pgd")
    assert list(tmp_path.iterdir()) == []  # nothing half-written


def test_linear_fit_given_alpha_writes_a_card(tmp_path, cache_dir):
    res = fit("linear", "digits-std", "digits-pgd", options={"alpha": 0.9}, out=tmp_path / "lin.toml")
    card = MixCard.load(res.path)
    assert (card.method, card.params["alpha"], card.params["fit"], card.abc["name"]) == (
        "linear",
        0.9,
        "given",
        "digits-std",
    )
    assert len(card.abc["weight_hash"]) == 16


def test_linear_fit_by_target_robust_accuracy(tmp_path, cache_dir, one_thread):
    """The matched alpha's robust accuracy on the calibration images is the closest to the target on the grid."""
    res = fit("linear", "digits-std", "digits-pgd", n_calib=60, options={"target_robust": 0.3, "n_iter": 5},
              out=tmp_path / "lin.toml")
    tried = res.summary["tried"]
    gap = {t["alpha"]: abs(t["robust_accuracy"] - 0.3) for t in tried}
    assert (
        gap[res.card.params["alpha"]] == min(gap.values())
        and res.card.params["fit"] == "matched"
        and 3 <= len(tried) <= 8
    )


def test_worst_case_merges_extra_attack_example_by_example():
    from mixzoo.evaluation.worst_case import worst_case

    ev = {"clean_correct": [True] * 5, "robust_correct": [True, False, True, True, False], "seconds": 1.0,
          "components": [{"name": "apgd-ce", "newly_broken": 2, "seconds": 1.0}], "warnings": [],
          "adversarial": {"index": torch.tensor([1, 4]), "images": torch.zeros(2, 1, 2, 2)}}
    subset = torch.tensor([0, 2, 3])
    extra = {"robust_correct": [True, False, False], "seconds": 2.0, "warnings": ["w"],
             "adversarial": {"index": torch.tensor([1, 2]), "images": torch.ones(2, 1, 2, 2)}}
    out = worst_case(ev, extra, subset, "apgd-bypass")
    assert out["robust_correct"] == [True, False, False, False, False]
    assert out["components"][-1] == {"name": "apgd-bypass", "newly_broken": 2, "seconds": 2.0}
    assert out["adversarial"]["index"].tolist() == [1, 4, 2, 3] and out["warnings"] == ["apgd-bypass: w"]
    assert out["seconds"] == 3.0


class _Recorder(MixingMethod):
    """A test method: the RBC alone, declaring one extra attack on a variant that records it was built."""

    name, title = "test-recorder", "Recorder"
    built: list[str] = []

    def validate(self, params, source):
        return params

    def build(self, abc, rbc, card, *, gradient="exact"):
        self.built.append(gradient)
        return nn.Sequential(rbc, nn.LogSoftmax(dim=-1))

    def extra_attacks(self, card):
        return [ExtraAttack("pgd-variant", "pgd", {"n_iter": 3}, gradient="variant")]


class _RecorderPlugin:
    @hookimpl
    def mixzoo_mixing_methods(self):
        return {"test-recorder": _Recorder()}


def test_bench_runs_cards_of_several_methods_and_their_declared_attacks(tmp_path, cache_dir, one_thread):
    name = register_plugin(_RecorderPlugin(), name="test-recorder-plugin")
    try:
        lin = MixCard("linear", {"alpha": 0.9}, **PAIR).save(tmp_path / "lin.toml")
        rec = MixCard("test-recorder", {}, **PAIR).save(tmp_path / "rec.toml")
        from mixzoo.evaluation.bench import bench

        report = bench([str(lin), str(rec)], attack="pgd", attack_options={"n_iter": 3}, n=40, curve=None,
                       out=tmp_path / "out", progress=False, save_adversarial=True)
    finally:
        unregister_plugin(name)
    assert [m.kind for m in report.models] == ["abc", "rbc", "linear", "test-recorder"]
    assert [m.method for m in report.models] == [None, None, "linear", "test-recorder"]
    rec_row, rbc_row = report.models[3], report.models[1]
    assert [c["name"] for c in rec_row.components][-1] == "pgd-variant" and "variant" in _Recorder.built
    assert rec_row.robust_accuracy <= rbc_row.robust_accuracy  # the RBC itself, attacked once more
    pairs = [(c["a"], c["b"]) for c in report.comparisons()]
    assert (report.models[2].name, report.models[3].name) in pairs
    assert all((m.name, rbc_row.name) in pairs for m in report.models[2:])
    saved = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [c["method"] for c in saved["cards"]] == ["linear", "test-recorder"]
    assert saved["models"][2]["card"]["linear"]["alpha"] == 0.9
    assert math.isclose(saved["models"][3]["robust_accuracy"], rec_row.robust_accuracy)


def test_bench_refuses_cards_of_different_pairs(tmp_path):
    from mixzoo.evaluation.bench import bench

    a = MixCard("linear", {"alpha": 0.9}, **PAIR).save(tmp_path / "a.toml")
    b = MixCard("linear", {"alpha": 0.9}, **{**PAIR, "abc": {"name": "fmnist-std"}}).save(tmp_path / "b.toml")
    with pytest.raises(InputError, match="different ABCs"):
        bench([str(a), str(b)], n=10, curve=None, progress=False)


def test_published_cards_load_by_name_and_bench_names_missing_weights(tmp_path, hf_cache, rb_dir, monkeypatch):
    """`mixzoo bench mixednuts-cifar10` finds the card through the mixzoo_cards hook; offline without the authors'
    weights it stops with the one-line error naming the file to fetch, and writes nothing."""
    from mixzoo.core.errors import MissingFileError
    from mixzoo.evaluation.bench import bench

    monkeypatch.setenv("MIXZOO_OFFLINE", "1")
    assert str(lookup("card", "mixednuts-cifar10")).endswith("mixednuts-cifar10.toml")
    card = MixCard.load("mixednuts-imagenet")
    assert (card.method, card.params["top_k"], card.abc["name"], card.rbc["name"]) == ("mixednuts", 250, "convnextv2-l",
                                                                             "liu2023-swin-l")
    with pytest.raises(MissingFileError, match="bit-r152x2-cifar10.pt"):
        bench("mixednuts-cifar10", n=10, out=tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()
