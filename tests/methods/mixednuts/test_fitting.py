"""End to end on the digits zoo: mix (cached MMAA + Algorithm 1), bench, reports, resume, CLI errors."""

from __future__ import annotations

import dataclasses
import io
import json
from dataclasses import replace

import pytest
import torch
from card_fields import nuts_card
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from torch import nn
from typer.testing import CliRunner

import mixzoo.attacks as attacks
import mixzoo.methods.mixednuts.fitting as pipeline
import mixzoo.zoo.pairs
from mixzoo.attacks.apgd import ApgdSettings
from mixzoo.cli import app
from mixzoo.core.cache import Cache
from mixzoo.core.card import MixCard
from mixzoo.core.errors import InputError, UnknownNameError
from mixzoo.evaluation.bench import CurveSettings, MatchSettings
from mixzoo.methods.mixednuts.calibrate import Grid, calibrate
from mixzoo.methods.mixednuts.calibration_data import CalibrationData, MMAASettings, cached_mmaa, calibration_data
from mixzoo.methods.mixednuts.fitting import margin_summary, mix
from mixzoo.methods.mixednuts.transforms import rbc_transform
from mixzoo.zoo.data import load_dataset
from mixzoo.zoo.models import BaseClassifier, load_model
from mixzoo.zoo.pairs import cached_logits, card_dataset, card_models, load_mixed, threat_model_of

FAST = dict(n_calib=120, n_iter=8, n_target_classes=2, batch_size=60, progress=False)


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


def test_mix_writes_card_and_reuses_cached_mmaa(tmp_path, shared_cache):
    first = mix("digits-std", "digits-pgd", out=tmp_path / "card.toml", cache_dir=shared_cache, **FAST)
    card = MixCard.load(tmp_path / "card.toml")
    assert 0.5 <= card.params["alpha"] <= 1.0 and card.params["beta"] == 0.985
    assert card.rbc["name"] == "digits-pgd" and card.abc["name"] == "digits-std"
    assert card.dataset == "digits" and card.data["n"] == 120 and card.data["split"] == "calibration"
    assert card.attack["name"] == "mmaa" and card.attack["eps"] == pytest.approx(0.2)
    assert card.attack["batch_size"] == 60  # fixes the per-batch seeds, so the card records it
    assert first.summary["n_clean_incorrect"] > 0 and first.summary["n_attacked_correct"] > 0
    assert first.cache_hits == {"rbc_logits": False, "mmaa": False}

    second = mix("digits-std", "digits-pgd", beta=0.9, clamp="relu", out=tmp_path / "card2.json",
                 cache_dir=shared_cache, **FAST)
    assert second.cache_hits == {"rbc_logits": True, "mmaa": True}
    card2 = MixCard.load(tmp_path / "card2.json")
    assert card2.params["beta"] == 0.9 and card2.params["clamp"] == "relu"
    from mixzoo.core.machine import machine_summary  # where it ran, and whether MMAA is this run's or the cache's

    assert card.provenance["machine"] == card2.provenance["machine"] == machine_summary("cpu")
    assert card.provenance["mmaa_from_cache"] is False and card2.provenance["mmaa_from_cache"] is True
    # a lower beta never needs a larger alpha (the constraint is looser)
    assert card2.params["alpha"] <= card.params["alpha"] + 1e-9 or card2.params["clamp"] != card.params["clamp"]


def test_interrupted_mmaa_resumes_and_writes_no_card(tmp_path, monkeypatch):
    import mixzoo.attacks as attacks

    real = attacks.mmaa
    calls = {"n": 0}

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(attacks, "mmaa", flaky)
    out = tmp_path / "card.toml"
    with pytest.raises(KeyboardInterrupt):
        mix("digits-std", "digits-pgd", out=out, cache_dir=tmp_path / "c", **FAST)
    assert not out.exists()
    assert list((tmp_path / "c" / "mmaa").glob("*.partial/*.safetensors")), "first batch kept"
    calls["n"] = 10
    mix("digits-std", "digits-pgd", out=out, cache_dir=tmp_path / "c", **FAST)
    assert calls["n"] == 11  # only the missing batch was attacked
    assert out.exists() and not list((tmp_path / "c" / "mmaa").glob("*.partial"))


def test_mix_bad_input(tmp_path):
    with pytest.raises(InputError, match="beta"):
        mix("digits-std", "digits-pgd", beta=1.5, out=tmp_path / "c.toml", cache_dir=tmp_path, **FAST)
    with pytest.raises(UnknownNameError, match="digits-pgd"):
        mix("digits-std", "digits-pdg", out=tmp_path / "c.toml", cache_dir=tmp_path, **FAST)
    with pytest.raises(InputError, match="n-calib"):
        mix("digits-std", "digits-pgd", out=tmp_path / "c.toml", cache_dir=tmp_path,
            **{**FAST, "n_calib": 0})
    with pytest.raises(InputError, match="--batch-size must be positive"):
        mix("digits-std", "digits-pgd", out=tmp_path / "c.toml", cache_dir=tmp_path, **{**FAST, "batch_size": 0})
    with pytest.raises(InputError, match="same input"):
        mix("digits-std", "fmnist-pgd", dataset="fashion-mnist", out=tmp_path / "c.toml", cache_dir=tmp_path, **FAST)
    from mixzoo.zoo.blackbox import load_black_box

    with pytest.raises(InputError, match="transfer-params"):
        mix("digits-std", load_black_box("digits-pgd"), out=tmp_path / "c.toml", cache_dir=tmp_path, **FAST)
    assert not (tmp_path / "c.toml").exists()


@pytest.mark.parametrize("bad", [{"clamp": "gleu"}, {"optimizer": "gird"}, {"objective": "loose"}])
def test_bad_calibration_settings_fail_before_the_attack(tmp_path, bad):
    """A misspelt clamp, optimizer or objective is reported before MMAA runs: nothing cached, no card."""
    with pytest.raises((InputError, UnknownNameError), match=next(iter(bad.values()))):
        mix("digits-std", "digits-pgd", out=tmp_path / "c.toml", cache_dir=tmp_path / "cache", **{**FAST, **bad})
    assert not (tmp_path / "cache").exists() and not (tmp_path / "c.toml").exists()


def test_bench_unknown_attack_fails_before_calibrating(tmp_path):
    from mixzoo.evaluation.bench import bench

    with pytest.raises(UnknownNameError, match="did you mean 'autoattack'"):
        bench(None, abc="digits-std", rbc="digits-pgd", attack="autoatack", n=10, out=tmp_path / "b",
              cache_dir=tmp_path / "cache", progress=False)
    assert not (tmp_path / "cache").exists() and not (tmp_path / "b").exists()
    with pytest.raises(InputError, match="--curve-n must be positive"):
        bench(None, abc="digits-std", rbc="digits-pgd", n=10, curve=CurveSettings(n=0), out=tmp_path / "b",
              cache_dir=tmp_path / "cache", progress=False)
    assert not (tmp_path / "cache").exists() and not (tmp_path / "b").exists()


@pytest.mark.slow
def test_bench_writes_reports_and_plots(tmp_path, shared_cache):
    from mixzoo.evaluation.bench import bench
    from mixzoo.evaluation.report import print_report

    res = mix("digits-std", "digits-pgd", out=tmp_path / "card.toml", cache_dir=shared_cache, **FAST)
    report = bench(tmp_path / "card.toml", attack="apgd", n=60, out=tmp_path / "bench", cache_dir=shared_cache,
                   attack_options={"n_iter": 5, "n_target_classes": 2},
                   curve=CurveSettings(n=30, options={"n_iter": 3, "n_target_classes": 1}),
                   baseline=MatchSettings(options={"n_iter": 3, "n_target_classes": 1}), batch_size=30, progress=False)
    data = json.loads((tmp_path / "bench" / "report.json").read_text())
    kinds = [m["kind"] for m in data["models"]]
    assert sorted(kinds) == ["abc", "linear", "mixednuts", "rbc"]
    for m in data["models"]:
        assert 0.0 <= m["robust_accuracy"] <= m["clean_accuracy"] <= 1.0
        assert m["n"] == 60 and m["attack"] == "apgd" and m["epsilon"] == pytest.approx(0.2)
    assert data["card"]["mixednuts"]["alpha"] == pytest.approx(res.card.params["alpha"])
    assert data["dataset"]["split"] == "evaluation"
    for name in ("report.md", "tradeoff.png", "margins.png", "objective.png"):
        assert (tmp_path / "bench" / name).stat().st_size > 0
    # the ABC alone is not robust; the RBC is; the mixture sits in between on clean accuracy
    assert report.row("abc").robust_accuracy < report.row("rbc").robust_accuracy
    assert report.row("mixednuts").clean_accuracy >= report.row("rbc").clean_accuracy - 0.05
    assert len(data["curve"]["mixednuts"]) >= 5 and len(data["curve"]["linear"]) >= 5
    assert all(m["device"] == "cpu" and not m["cached"] for m in data["models"])
    assert "(cpu)" in (tmp_path / "bench" / "report.md").read_text()
    # what ran where: the run's record, and the machine of every row
    from mixzoo.core.machine import describe_machine, machine_summary

    assert data["run"]["machine"] == describe_machine("cpu") and data["run"]["torch_version"] == torch.__version__
    assert all(m["machine"] == machine_summary("cpu") for m in data["models"])
    md = (tmp_path / "bench" / "report.md").read_text()
    assert f"Every row was attacked on: {machine_summary('cpu')}." in md and "Run on: " in md
    # per-image outcomes and intervals: the accuracies are their means, the comparisons are paired on them
    for m in data["models"]:
        assert len(m["robust_outcomes"]) == 60 and m["robust_outcomes"].count("1") == round(60 * m["robust_accuracy"])
        assert m["clean_outcomes"].count("1") == round(60 * m["clean_accuracy"])
        assert m["robust_ci"][0] <= m["robust_accuracy"] <= m["robust_ci"][1]
    nuts, rbc = report.row("mixednuts"), report.row("rbc")
    assert all(r == "0" or c == "1" for r, c in zip(nuts.robust_outcomes, nuts.clean_outcomes, strict=True))
    vs_rbc = next(c for c in data["comparisons"] if c["b_kind"] == "rbc")
    assert vs_rbc["robust"]["difference"] == pytest.approx(nuts.robust_accuracy - rbc.robust_accuracy)
    assert vs_rbc["clean"]["a_only"] == sum(a == "1" and b == "0" for a, b in zip(nuts.clean_outcomes,
                                                                                rbc.clean_outcomes, strict=True))
    assert vs_rbc["robust"]["low"] <= vs_rbc["robust"]["difference"] <= vs_rbc["robust"]["high"]
    assert {c["b_kind"] for c in data["comparisons"]} == {"rbc", "linear"}
    assert "paired on the same 60 images" in (tmp_path / "bench" / "report.md").read_text()
    # the terminal table fits 80 columns, one line per model with its interval
    term = Console(width=80, record=True, file=io.StringIO())
    print_report(report, to=term)
    lines = term.export_text().splitlines()
    assert max(map(len, lines)) <= 80
    for m, label in zip(report.models, ("ABC digits-std", "RBC digits-pgd", "Linear mix, alpha ", "MixedNUTS, alpha "),
                        strict=True):
        row = next(line for line in lines if line.strip().startswith(label))
        assert f"{100 * m.robust_accuracy:.1f} ({100 * m.robust_ci[0]:.1f}-{100 * m.robust_ci[1]:.1f})" in row
    # the same bench again reads every row from the cache, and says so
    again = bench(tmp_path / "card.toml", attack="apgd", n=60, out=tmp_path / "bench2", cache_dir=shared_cache,
                  attack_options={"n_iter": 5, "n_target_classes": 2}, curve=None,
                  baseline=MatchSettings(options={"n_iter": 3, "n_target_classes": 1}), batch_size=30, progress=False)
    assert all(m.cached and m.device == "cpu" for m in again.models)
    assert [m.robust_accuracy for m in again.models] == [m.robust_accuracy for m in report.models]
    assert "(cpu, cached)" in (tmp_path / "bench2" / "report.md").read_text()


def test_cli_mix_json_and_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("MIXZOO_CACHE", str(tmp_path / "cache"))
    runner = CliRunner()
    card = tmp_path / "card.toml"
    res = runner.invoke(app, ["mix", "--abc", "digits-std", "--rbc", "digits-pgd", "--n-calib", "200", "--n-iter",
                              "4", "--out", str(card), "--json"])
    assert res.exit_code == 0, res.output
    payload = json.loads(res.stdout)
    assert payload["card"] == str(card) and 0.5 <= payload["alpha"] <= 1
    bad = runner.invoke(app, ["mix", "--abc", "digits-std", "--rbc", "digits-pgdd", "--out", str(tmp_path / "x.toml")])
    assert bad.exit_code == 2 and "did you mean 'digits-pgd'" in bad.output
    assert not (tmp_path / "x.toml").exists()
    bad = runner.invoke(app, ["mix", "--abc", "digits-std", "--rbc", "digits-pgd", "--grid", "s=1:2",
                              "--out", str(tmp_path / "y.toml")])
    assert bad.exit_code == 2 and "--grid" in bad.output


def test_cli_list_and_info():
    runner = CliRunner()
    res = runner.invoke(app, ["list", "--json", "--dataset", "digits"])
    assert res.exit_code == 0
    names = {e["name"] for e in json.loads(res.stdout)}
    assert {"digits-std", "digits-pgd"} <= names
    res = runner.invoke(app, ["info", "digits-pgd", "--json"])
    assert json.loads(res.stdout)["epsilon"] == pytest.approx(0.2)
    res = runner.invoke(app, ["list", "--role", "robustt"])
    assert res.exit_code == 2 and "role" in res.output


def test_nan_model_is_reported(tmp_path):
    from mixzoo.zoo.models import load_model

    rbc = load_model("digits-pgd")

    class NaNModel(torch.nn.Module):
        spec = rbc.spec

        def forward(self, x):
            return rbc(x) * float("nan")

    with pytest.raises(InputError, match="NaN"):
        mix("digits-std", NaNModel(), out=tmp_path / "c.toml", cache_dir=tmp_path, **FAST)
    assert not (tmp_path / "c.toml").exists()


@pytest.mark.slow
def test_cli_bench_uses_an_attack_from_a_plugin(tmp_path, monkeypatch, shared_cache):
    """A plugin adds an attack through the hook; `mixzoo bench --attack NAME` runs it on all four models."""
    from mixzoo.attacks.base import Attack, Component
    from mixzoo.core.plugins import hookimpl, register_plugin, unregister_plugin

    class CornerAttack(Attack):
        """Every image pushed to a random corner of the eps-ball (a real, weak attack)."""

        name = "test-corner"
        defaults = {"batch_size": 500}

        def components(self, model, n_classes):
            gen = torch.Generator().manual_seed(self.seed)

            def fn(x, y):
                signs = torch.randint(0, 2, x.shape, generator=gen).to(x) * 2 - 1
                return (x + self.eps * signs).clamp(0, 1)

            return [Component("corner", fn)]

    class AttackPlugin:
        @hookimpl
        def mixzoo_attacks(self):
            return {"test-corner": CornerAttack}

    card = tmp_path / "card.toml"
    mix("digits-std", "digits-pgd", out=card, cache_dir=shared_cache, **FAST)
    monkeypatch.setenv("MIXZOO_CACHE", str(shared_cache))
    register_plugin(AttackPlugin(), name="test-attack-plugin")
    try:
        res = CliRunner().invoke(app, ["bench", str(card), "--attack", "test-corner", "--n", "25", "--no-curve",
                                       "--batch-size", "25", "--out", str(tmp_path / "bench"), "--json"])
    finally:
        unregister_plugin("test-attack-plugin")
    assert res.exit_code == 0, res.output
    payload = json.loads(res.stdout)
    assert payload["settings"]["batch_size"] == 25
    bad = CliRunner().invoke(app, ["bench", str(card), "--n", "40", "--batch-size", "0", "--out",
                                   str(tmp_path / "bad")])
    assert bad.exit_code == 2 and "--batch-size must be positive" in bad.output
    assert not (tmp_path / "bad").exists()
    typo = CliRunner().invoke(app, ["bench", str(card), "--n", "40", "-O", "n_iters=3", "--out", str(tmp_path / "bad"),
                                    "--cache-dir", str(tmp_path / "fresh-cache")])
    assert typo.exit_code == 2 and "did you mean n_iter?" in typo.output and len(typo.output.splitlines()) == 1
    assert not (tmp_path / "bad").exists() and not (tmp_path / "fresh-cache").exists()
    rows = payload["models"]
    assert sorted(r["kind"] for r in rows) == ["abc", "linear", "mixednuts", "rbc"]
    for r in rows:
        extra = ["apgd-bypass"] if r["kind"] == "mixednuts" else []  # MixedNUTS's declared attack (App. B.2.2)
        assert r["attack"] == "test-corner" and [c["name"] for c in r["components"]] == ["corner", *extra]
        assert 0.0 <= r["robust_accuracy"] <= r["clean_accuracy"]


def test_bench_merges_batch_warnings_with_their_counts():
    """Per-batch Square flags add up (two batches of 'broke 1' are 2 examples, not one deduplicated line)."""
    from mixzoo.attacks.base import square_masking_note
    from mixzoo.attacks.runner import merge_warnings

    comps = [{"name": "apgd-ce", "newly_broken": 5}, {"name": "square", "newly_broken": 4}]
    per_batch = [[square_masking_note(1), "fab-t: odd"], [square_masking_note(1)], [square_masking_note(2)], []]
    assert merge_warnings(per_batch, comps) == [square_masking_note(4), "fab-t: odd"]
    assert merge_warnings([["fab-t: odd"], ["fab-t: odd"]], comps[:1]) == ["fab-t: odd (in 2 of 2 batches)"]
    assert merge_warnings([[], []], [{"name": "square", "newly_broken": 3}]) == []  # Square alone: no gradient run


def test_mixture_cache_keys_cover_every_parameter_that_changes_the_attacked_model():
    """A cached MixedNUTS row (main table or trade-off curve) is reused only for the same mixture: ``alpha_d``
    (the attack's gradient, Eq. 8) and ``top_k`` change the result, so they must change the key."""
    from mixzoo.core.cache import content_key
    from mixzoo.zoo.data import load_dataset
    from mixzoo.zoo.models import load_model
    from mixzoo.zoo.pairs import card_key_parts as mixed_key_parts

    abc, rbc = load_model("digits-std"), load_model("digits-pgd")
    data = load_dataset("digits", "evaluation", n=20)
    base = dict(s=2.0, p=2.0, c=-0.5, alpha=0.9, alpha_d=0.9, beta=0.985)

    def replace(_card, **change):
        return nuts_card(**{**base, **change})

    card = replace(None)
    key = content_key(mixed_key_parts(card, abc, rbc, data))
    for change in ({"alpha_d": 0.95}, {"top_k": 3}, {"alpha": 0.91}, {"clamp": "linear"}, {"s": 2.5}):
        assert content_key(mixed_key_parts(replace(card, **change), abc, rbc, data)) != key, change
    assert content_key(mixed_key_parts(replace(card, beta=0.9), abc, rbc, data)) == key  # beta only chose them


@pytest.mark.slow
def test_asking_for_more_images_than_the_split_holds_says_so(tmp_path, shared_cache):
    from mixzoo.evaluation.bench import bench
    from mixzoo.zoo.data import load_dataset, shortfall_note

    calib = load_dataset("digits", "calibration", n=400)
    assert len(calib) == 300
    assert shortfall_note(calib, 300, "--n-calib") is None and shortfall_note(calib, None, "--n-calib") is None
    assert shortfall_note(calib, 400, "--n-calib") == ("--n-calib 400 asked for more images than the digits"
                                                       " calibration split holds; all 300 were used")

    res = mix("digits-std", "digits-pgd", out=tmp_path / "card.toml", cache_dir=shared_cache,
              **{**FAST, "n_calib": 400})
    card = MixCard.load(tmp_path / "card.toml")
    assert card.data["n"] == 300 and any("all 300 were used" in note for note in card.notes)
    assert res.card.notes == card.notes
    report = bench(tmp_path / "card.toml", attack="apgd", n=10_000, out=tmp_path / "bench", cache_dir=shared_cache,
                   attack_options={"n_iter": 2, "n_target_classes": 1}, curve=None, plots=False,
                   baseline=MatchSettings(n=50, options={"n_iter": 2, "n_target_classes": 1}), batch_size=250,
                   progress=False,
                   extra_attacks=False)
    assert report.dataset["n"] == 497
    assert report.notes == ["--n 10000 asked for more images than the digits evaluation split holds; all 497 were"
                            " used"]
    assert json.loads((tmp_path / "bench" / "report.json").read_text())["notes"] == report.notes
    assert "all 497 were used" in (tmp_path / "bench" / "report.md").read_text()


def test_the_default_n_calib_takes_a_smaller_split_whole_without_a_word(tmp_path, shared_cache):
    """--n-calib not given: every image of digits' 300-image calibration split, no "asked for more" note, and no
    "use more calibration images" warning (there are none to use); the CLI passes None when the option is absent."""
    import warnings

    fast = {k: v for k, v in FAST.items() if k != "n_calib"}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = mix("digits-std", "digits-pgd", out=tmp_path / "card.toml", cache_dir=shared_cache, beta=0.0, **fast)
    assert res.card.data["n"] == 300
    assert not any("asked for more" in n for n in res.card.notes)
    assert not [w for w in caught if "calibration images" in str(w.message)], [str(w.message) for w in caught]
    assert any("every image of the calibration split was used" in n for n in res.card.notes)


def test_load_mixed_builds_the_cards_classifier_from_the_recorded_names(tmp_path, shared_cache):
    import mixzoo
    from mixzoo.methods.mixednuts.calibrate import calibrate
    from mixzoo.methods.mixednuts.mixing import MixedClassifier
    from mixzoo.zoo.data import load_dataset
    from mixzoo.zoo.models import load_model

    mix("digits-std", "digits-pgd", out=tmp_path / "card.toml", cache_dir=shared_cache, **FAST)
    model = mixzoo.load_mixed(tmp_path / "card.toml")
    card = MixCard.load(tmp_path / "card.toml")
    assert isinstance(model, MixedClassifier) and not model.training
    assert (model.s, model.p, model.c, model.alpha) == (
        card.params["s"],
        card.params["p"],
        card.params["c"],
        card.params["alpha"],
    )
    x = load_dataset("digits", "evaluation", n=50).images
    reference = MixedClassifier.from_card(card, load_model("digits-std"), load_model("digits-pgd"))
    torch.testing.assert_close(model(x), reference(x), rtol=0, atol=0)
    # a given model replaces the recorded one; a card from bare logits names none
    with pytest.warns(UserWarning, match="calibrated for 'digits-std'") as caught:
        assert mixzoo.load_mixed(card, abc="digits-pgd").abc.spec.name == "digits-pgd"
    assert [w.filename for w in caught] == [__file__]  # the warning points at the caller's line
    h = torch.randn(40, 10)
    bare = calibrate(clean_logits=h, clean_labels=torch.arange(40) % 10, attacked_logits=h,
                     attacked_labels=h.argmax(1), progress=False)
    with pytest.raises(InputError, match="records no ABC name; pass abc="):
        mixzoo.load_mixed(bare)


@pytest.mark.slow
def test_cards_for_unregistered_modules_need_the_modules_and_bench_uses_them(tmp_path, shared_cache):
    from digits_models import train_digits_mlp

    import mixzoo
    from mixzoo.evaluation.bench import bench

    mlp, _, _ = train_digits_mlp()
    mix("digits-std", mlp, eps=0.02, out=tmp_path / "card.toml", cache_dir=shared_cache, **FAST)
    with pytest.raises(InputError, match="RBC 'Sequential' is not a registry name.*pass rbc="):
        mixzoo.load_mixed(tmp_path / "card.toml")
    assert mixzoo.load_mixed(tmp_path / "card.toml", rbc=mlp).rbc is mlp
    # the margin plot reads the calibration margins of the RBC bench evaluated, not one looked up by name
    bench(tmp_path / "card.toml", rbc=mlp, attack="apgd", n=30, out=tmp_path / "bench", cache_dir=shared_cache,
          attack_options={"n_iter": 2, "n_target_classes": 1}, curve=None,
          baseline=MatchSettings(n=30, options={"n_iter": 2, "n_target_classes": 1}), batch_size=30, progress=False,
          extra_attacks=False)
    assert (tmp_path / "bench" / "margins.png").stat().st_size > 0


def test_bench_records_that_a_base_model_is_not_the_one_the_card_was_calibrated_for(tmp_path, shared_cache):
    from mixzoo.evaluation.bench import bench

    mix("digits-std", "digits-pgd", out=tmp_path / "card.toml", cache_dir=shared_cache, **FAST)
    with pytest.warns(UserWarning, match="calibrated for 'digits-std'"):
        report = bench(tmp_path / "card.toml", abc="digits-pgd", attack="apgd", n=30,
        out=tmp_path / "bench",
                       cache_dir=shared_cache, attack_options={"n_iter": 2, "n_target_classes": 1}, curve=None,
                       plots=False, baseline=MatchSettings(n=30, options={"n_iter": 2, "n_target_classes": 1}),
                       batch_size=30,
                       progress=False, extra_attacks=False)
    notes = [n for n in report.notes if "so it is the RBC alone" not in n]  # ABC = RBC here: matched alpha 1.00
    assert len(notes) == 1 and "calibrated for 'digits-std'" in notes[0]
    assert "re-run `mixzoo mix`" in (tmp_path / "bench" / "report.md").read_text()


def test_models_that_cannot_classify_the_data_fail_with_one_line(tmp_path, shared_cache):
    from digits_models import train_digits_mlp

    from mixzoo.evaluation.bench import bench
    from mixzoo.methods.mixednuts.approximation import check_approximation
    from mixzoo.zoo.data import load_dataset
    from mixzoo.zoo.models import load_model
    from mixzoo.zoo.pairs import check_model_fits

    digits = load_dataset("digits", "calibration", n=5)
    mlp, _, _ = train_digits_mlp(steps=1)
    check_model_fits(mlp, digits)
    check_model_fits(load_model("digits-pgd"), digits)
    with pytest.raises(InputError, match=r"RBC 'fmnist-pgd' expects \(1, 28, 28\)"):
        check_model_fits(load_model("fmnist-pgd"), digits, "RBC")
    with pytest.raises(InputError, match=r"ABC 'Sequential' cannot take fashion-mnist images of shape \(1, 28, 28\)"):
        check_model_fits(mlp, load_dataset("fashion-mnist", "calibration", n=2), "ABC")
    five = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 5))
    with pytest.raises(InputError, match="has 5 classes but 'digits' has 10"):
        check_model_fits(five, digits)
    # the commands check before attacking, and write nothing
    mix("digits-std", "digits-pgd", out=tmp_path / "card.toml", cache_dir=shared_cache, **FAST)
    with pytest.raises(InputError, match="expects \\(1, 28, 28\\)"):
        check_approximation(tmp_path / "card.toml", rbc="fmnist-pgd", cache_dir=shared_cache, progress=False)
    with pytest.raises(InputError, match="expects \\(1, 28, 28\\)"), pytest.warns(UserWarning):
        bench(tmp_path / "card.toml", rbc="fmnist-pgd", n=10, out=tmp_path / "b", cache_dir=shared_cache,
              progress=False)
    assert not (tmp_path / "b").exists()
    with pytest.raises(InputError, match="cannot take digits images"):
        mix("digits-std", torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10)), eps=0.1,
            out=tmp_path / "c2.toml", cache_dir=shared_cache, **FAST)
    assert not (tmp_path / "c2.toml").exists()


@pytest.mark.parametrize("items, expected", [
    (["n_iter=200", "n-restarts=2"], {"n_iter": 200, "n_restarts": 2}),
    (["step_size=1e-3", "extra=true", "x=null"], {"step_size": 1e-3, "extra": True, "x": None}),
    (["components=apgd-ce,apgd-t"], {"components": ["apgd-ce", "apgd-t"]}),
    (["components=square"], {"components": "square"}),
    (["components=[\"fab-t\"]"], {"components": ["fab-t"]}),
])
def test_attack_options_from_the_command_line(items, expected):
    from mixzoo.cli.options import parse_attack_options

    assert parse_attack_options(items) == expected


@pytest.mark.parametrize("item", ["n_iter", "=3", "1x=2", "n iter=2"])
def test_malformed_attack_options_name_the_fix(item):
    from mixzoo.cli.options import parse_attack_options
    from mixzoo.core.errors import MixzooError

    with pytest.raises(MixzooError, match="is not KEY=VALUE; write e.g. -O n_iter="):
        parse_attack_options([item])


@pytest.mark.slow
@settings(max_examples=80, deadline=None)
@given(st.dictionaries(st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True),
                       st.one_of(st.integers(-10**6, 10**6), st.floats(allow_nan=False, allow_infinity=False),
                                 st.booleans(), st.lists(st.from_regex(r"[a-z][a-z-]{0,6}", fullmatch=True),
                                                         min_size=2, max_size=4)), min_size=1, max_size=5))
def test_attack_options_round_trip_through_the_command_line(options):
    from mixzoo.cli.options import parse_attack_options

    items = [f"{k}={','.join(v) if isinstance(v, list) else json.dumps(v)}" for k, v in options.items()]
    assert parse_attack_options(items) == options


TINY_MIX = dict(n_calib=120, n_iter=2, n_target_classes=1, batch_size=120, progress=False)


@pytest.fixture()
def mmaa_calls(monkeypatch):
    """Every call of the real MMAA (the pipeline imports it from mixzoo.attacks at call time), with its arguments."""
    real = attacks.mmaa
    calls: list[tuple[torch.Tensor, torch.Tensor, dict]] = []

    def spy(model, images, labels, cfg, **kwargs):  # the settings and the keywords in one flat record
        calls.append((images.detach().clone(), labels.detach().clone(), {**dataclasses.asdict(cfg), **kwargs}))
        return real(model, images, labels, cfg, **kwargs)

    monkeypatch.setattr(attacks, "mmaa", spy)
    return calls


def _card(**changes) -> MixCard:
    fields = dict(s=2.0, p=2.0, c=-0.5, alpha=0.9, beta=0.985, dataset="digits", abc={"name": "digits-std"},
                  rbc={"name": "digits-pgd"})
    return nuts_card(**{**fields, **changes})


# ----------------------------------------------------------------------------------------------------- the cache
@pytest.mark.slow
def test_every_mmaa_setting_the_data_and_the_model_are_part_of_the_cache_key(tmp_path, mmaa_calls):
    """Two runs share a cached MMAA entry only when everything that changes the attack is the same: a second run with
    one setting changed must attack again, the same settings again must not."""
    cache = Cache(tmp_path)
    pgd = load_model("digits-pgd")
    data = load_dataset("digits", "calibration", n=12)
    base = MMAASettings(eps=0.2, norm="Linf", n_iter=1, n_target_classes=1, n_restarts=1, seed=0, top_k=None,
                        batch_size=12)
    cached_mmaa(pgd, data, base, cache=cache, progress=False)
    assert len(mmaa_calls) == 1
    cached_mmaa(pgd, data, base, cache=cache, progress=False)
    assert len(mmaa_calls) == 1  # the same settings: served from the cache
    for change in ({"eps": 0.1}, {"norm": "L2"}, {"n_iter": 2}, {"n_target_classes": 2}, {"n_restarts": 2},
                   {"seed": 1}, {"top_k": 3}, {"batch_size": 6}):
        before = len(mmaa_calls)
        cached_mmaa(pgd, data, dataclasses.replace(base, **change), cache=cache, progress=False)
        assert len(mmaa_calls) > before, f"{change} reused another setting's cached attack"
    for other_data, other_model in ((load_dataset("digits", "evaluation", n=12), pgd),
                                    (data, load_model("digits-std"))):
        before = len(mmaa_calls)
        cached_mmaa(other_model, other_data, base, cache=cache, progress=False)
        assert len(mmaa_calls) > before
    before = len(mmaa_calls)
    cached_mmaa(pgd, data, base, cache=cache, transform=_card(clamp="relu"), progress=False)
    assert len(mmaa_calls) > before, "the attack on h^M reused the attack on LN(h)"
    before = len(mmaa_calls)
    cached_mmaa(pgd, data, base, cache=cache, transform=_card(clamp="relu", s=3.0), progress=False)
    assert len(mmaa_calls) > before, "another transform reused the first transform's attack"


def test_cached_logits_are_keyed_by_model_and_data(tmp_path):
    cache = Cache(tmp_path)
    pgd, std = load_model("digits-pgd"), load_model("digits-std")
    calib = load_dataset("digits", "calibration", n=20)
    evaluation = load_dataset("digits", "evaluation", n=20)
    with torch.no_grad():
        for model, data in ((pgd, calib), (std, calib), (pgd, evaluation), (pgd, calib)):
            got = cached_logits(model, data, cache=cache, progress=False)
            torch.testing.assert_close(got, model(data.images), rtol=0, atol=1e-6)


def test_nan_logits_are_refused_before_they_are_cached(tmp_path):
    pgd = load_model("digits-pgd")

    class HalfNaN(nn.Module):
        def forward(self, x):
            out = pgd(x)
            out[::2] = float("nan")
            return out

    data = load_dataset("digits", "calibration", n=7)
    with pytest.raises(InputError, match="returned NaN logits for 4 images"):
        cached_logits(HalfNaN(), data, cache=Cache(tmp_path), progress=False)
    assert not list(tmp_path.rglob("*.safetensors"))


def test_each_mmaa_batch_gets_the_seed_its_images_indices_the_given_settings_and_its_own_images(tmp_path, mmaa_calls):
    """App. B.1 on LN(RBC); every batch gets the seed and its images' indices, so the starts are drawn per image
    (the same margins for any batch size, and an interrupted run resumes identically); the record holds
    the RBC's raw logits at the perturbed images, which lie in the eps-ball."""
    rbc = load_model("digits-pgd")
    data = load_dataset("digits", "calibration", n=25)
    out = cached_mmaa(rbc, data, MMAASettings(eps=0.15, norm="Linf", n_iter=2, n_target_classes=1, n_restarts=1,
                                              seed=7, top_k=3, batch_size=10), cache=Cache(tmp_path), progress=False)
    assert [kw["seed"] for _, _, kw in mmaa_calls] == [7, 7, 7]
    for (images, labels, kw), (a, b) in zip(mmaa_calls, ((0, 10), (10, 20), (20, 25)), strict=True):
        assert torch.equal(images, data.images[a:b]) and torch.equal(labels, data.labels[a:b])
        assert torch.equal(kw["index"], torch.arange(a, b))
        assert kw["eps"] == 0.15 and kw["norm"] == "Linf" and kw["n_iter"] == 2 and kw["n_target_classes"] == 1
        assert kw["n_restarts"] == 1 and kw["top_k"] == 3 and kw["layer_norm"] is True
    adv = out["adv_images"]
    assert adv.shape == data.images.shape and out["logits"].shape == (25, 10) and out["margins"].shape == (25,)
    assert float((adv - data.images).abs().max()) <= 0.15 + 1e-6
    with torch.no_grad():
        torch.testing.assert_close(out["logits"], rbc(adv), rtol=0, atol=1e-5)


def test_mmaa_on_the_transformed_rbc_attacks_h_m_without_layer_norm_and_records_raw_logits(tmp_path, mmaa_calls):
    """App. D.9: with a transform the attacked model is h^M (its own softmax margins, no extra LN), and the record
    still holds the RBC's raw logits (what Algorithm 1 takes), not h^M's log-probabilities."""
    rbc = load_model("digits-pgd")
    data = load_dataset("digits", "calibration", n=15)
    card = _card(clamp="relu")
    out = cached_mmaa(rbc, data, MMAASettings(eps=0.2, norm="Linf", n_iter=2, n_target_classes=1, batch_size=15),
                      cache=Cache(tmp_path), progress=False, transform=card)
    assert [kw["layer_norm"] for _, _, kw in mmaa_calls] == [False]
    with torch.no_grad():
        raw = rbc(out["adv_images"])
    torch.testing.assert_close(out["logits"], raw, rtol=0, atol=1e-5)
    assert not torch.allclose(out["logits"].log_softmax(1), out["logits"], atol=1e-3)  # raw logits, not log-probs


# ---------------------------------------------------------------------------------------- attack defaults (eps/norm)
def test_attack_defaults_come_from_the_rbc_and_given_values_win():
    pgd = load_model("digits-pgd")  # registry: Linf, eps 0.2
    assert (pgd.spec.epsilon, pgd.spec.threat_model) == (0.2, "Linf")
    assert threat_model_of(pgd, None, None) == (0.2, "Linf")
    assert threat_model_of(pgd, 0.05, None) == (0.05, "Linf")
    assert threat_model_of(pgd, None, "L2") == (0.2, "L2")
    assert threat_model_of(pgd, 0.5, "L2") == (0.5, "L2")
    plain = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    assert threat_model_of(plain, 0.1, None) == (0.1, "Linf")  # the paper's default threat model
    with pytest.raises(InputError, match="records no epsilon; pass --eps"):
        threat_model_of(plain, None, None)
    for bad in (0.0, -0.1, float("inf")):
        with pytest.raises(InputError, match="positive finite"):
            threat_model_of(pgd, bad, None)


# ------------------------------------------------------------------------------------------- calibration_data
def test_calibration_data_passes_top_k_to_mmaa_and_computes_the_abcs_own_logits(tmp_path, mmaa_calls):
    abc, rbc = load_model("digits-std"), load_model("digits-pgd")
    data = load_dataset("digits", "calibration", n=20)
    cdata = calibration_data(abc, rbc, data, MMAASettings(eps=0.2, norm="Linf", n_iter=2, n_target_classes=1,
                                                          top_k=4, batch_size=20), cache=Cache(tmp_path),
                             progress=False)
    assert [kw["top_k"] for _, _, kw in mmaa_calls] == [4]
    with torch.no_grad():
        torch.testing.assert_close(cdata.abc_clean_logits, abc(data.images), rtol=0, atol=1e-6)
        torch.testing.assert_close(cdata.clean_logits, rbc(data.images), rtol=0, atol=1e-6)
    assert cdata.attack["top_k"] == 4 and torch.equal(cdata.labels, data.labels)


def test_an_empty_calibration_set_is_an_input_error(tmp_path):
    empty = load_dataset("digits", "calibration", n=0)
    with pytest.raises(InputError, match="calibration set is empty"):
        calibration_data(None, load_model("digits-pgd"), empty, MMAASettings(eps=0.2, norm="Linf"),
                         cache=Cache(tmp_path), progress=False)


# ----------------------------------------------------------------------------------------- margin_summary (Fig. 6)
def _margin(z: torch.Tensor) -> torch.Tensor:
    """Def. 2.1: top-1 minus top-2 softmax probability."""
    p = z.double().softmax(1).sort(1, descending=True).values
    return p[:, 0] - p[:, 1]


def _ln(z: torch.Tensor, top_k: int | None) -> torch.Tensor:
    """Sec. 4.2 LN (App. D.7: statistics of the top_k largest logits)."""
    ref = z.double() if top_k is None else z.double().sort(1, descending=True).values[:, :top_k]
    mean = ref.mean(1, keepdim=True)
    var = ((ref - mean) ** 2).sum(1, keepdim=True) / (ref.shape[1] - 1)  # unbiased, as the authors' normalize_topk
    return (z.double() - mean) / (var + 1e-8).sqrt()


def _lower_median(v: torch.Tensor) -> float | None:
    if v.numel() == 0:
        return None
    return float(v.sort().values[(v.numel() - 1) // 2])


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 14), top_k=st.sampled_from([None, 3]))
def test_margin_summary_is_fig6s_medians_over_the_right_sets_and_stages(seed, n, top_k):
    gen = torch.Generator().manual_seed(seed)
    clean = torch.randn(n, 6, generator=gen) * 3
    attacked = torch.randn(n, 6, generator=gen) * 3
    labels = torch.randint(0, 6, (n,), generator=gen)
    card = MixCard(
        "mixednuts", {"s": 1.7, "p": 2.5, "c": -0.4, "alpha": 0.9, "beta": 0.985, "clamp": "relu", "top_k": top_k}
    )
    data = CalibrationData(clean, labels, attacked, None, None, {})
    got = margin_summary(data, card)

    clean_wrong = torch.tensor([int(clean[i].argmax()) != int(labels[i]) for i in range(n)])
    adv_right = torch.tensor([int(attacked[i].argmax()) == int(labels[i]) for i in range(n)])
    assert got["n"] == n
    assert got["n_clean_incorrect"] == int(clean_wrong.sum()) and got["n_attacked_correct"] == int(adv_right.sum())
    assert got["rbc_clean_accuracy"] == pytest.approx(1 - float(clean_wrong.double().mean()))
    assert got["rbc_mmaa_accuracy"] == pytest.approx(float(adv_right.double().mean()))
    stages = {"raw": lambda z: z.double(), "layer_norm": lambda z: _ln(z, top_k),
              "transformed": lambda z: rbc_transform(z, 1.7, 2.5, -0.4, clamp="relu", top_k=top_k)}
    assert set(stages) <= set(got)
    for stage, fn in stages.items():
        want_clean = _lower_median(_margin(fn(clean))[clean_wrong])
        want_adv = _lower_median(_margin(fn(attacked))[adv_right])
        for key, want in (("clean_incorrect_median_margin", want_clean), ("attacked_correct_median_margin", want_adv)):
            value = got[stage][key]
            assert (value is None) == (want is None), (stage, key)
            if want is not None:
                assert value == pytest.approx(want, abs=1e-5), (stage, key)


def test_margin_summary_stages_differ_where_the_transform_matters():
    """A fixed case where LN, the clamp and top_k all move the medians, so that no stage can stand in for another."""
    gen = torch.Generator().manual_seed(3)
    clean, attacked = torch.randn(9, 6, generator=gen) * 3, torch.randn(9, 6, generator=gen) * 3
    labels = attacked.argmax(1)
    labels[:4] = (clean[:4].argmax(1) + 1) % 6  # four clean mistakes, and those four attacked-incorrect
    data = CalibrationData(clean, labels, attacked, None, None, {})
    got = margin_summary(
        data,
        MixCard("mixednuts", {"s": 1.7, "p": 2.5, "c": -0.4, "alpha": 0.9, "beta": 0.985, "clamp": "relu", "top_k": 3}),
    )
    gelu = margin_summary(
        data,
        MixCard("mixednuts", {"s": 1.7, "p": 2.5, "c": -0.4, "alpha": 0.9, "beta": 0.985, "clamp": "gelu", "top_k": 3}),
    )
    all_k = margin_summary(
        data, MixCard("mixednuts", {"s": 1.7, "p": 2.5, "c": -0.4, "alpha": 0.9, "beta": 0.985, "clamp": "relu"})
    )
    key = "clean_incorrect_median_margin"
    assert len({got["raw"][key], got["layer_norm"][key], got["transformed"][key]}) == 3
    assert got["transformed"][key] != pytest.approx(gelu["transformed"][key], abs=1e-4)
    assert got["layer_norm"][key] != pytest.approx(all_k["layer_norm"][key], abs=1e-4)


# -------------------------------------------------------------------------------------------------------- mix
def test_mix_is_algorithm_1_on_the_rbcs_clean_logits_and_its_mmaa_logits(tmp_path):
    """mix() = clean logits of the RBC + MMAA on LN(RBC) (seed as given, starts per image index) + Algorithm 1 with
    every setting passed on; the reference composes mixzoo.attacks.mmaa and mixzoo.methods.mixednuts.calibrate
    directly."""
    n, seed, grid = 120, 4, Grid(s_n=3, p_n=2, c_n=3, c_min=-1.0)
    abc, rbc = load_model("digits-std"), load_model("digits-pgd")
    data = load_dataset("digits", "calibration", n=n)
    with torch.no_grad():
        clean = rbc(data.images)
        abc_correct = abc(data.images).argmax(1) == data.labels
    adv = attacks.mmaa(rbc, data.images, data.labels,
                       ApgdSettings(eps=0.2, norm="Linf", n_iter=3, n_target_classes=2, n_restarts=1, seed=seed),
                       top_k=3, batch_size=n, progress=False, attack_all=False, index=torch.arange(n))
    settings_ = dict(beta=0.9, clamp="relu", top_k=3, grid=grid, objective="relaxed", optimizer="refine")
    ref = calibrate(clean_logits=clean, clean_labels=data.labels, attacked_logits=adv.logits,
                    attacked_labels=data.labels, abc_clean_correct=abc_correct, **settings_)
    res = mix("digits-std", "digits-pgd", n_calib=n, n_iter=3, n_target_classes=2, seed=seed, batch_size=n,
              cache_dir=tmp_path, progress=False, **settings_)
    card = res.card
    assert (card.params["s"], card.params["p"], card.params["c"]) == pytest.approx(
        (ref.params["s"], ref.params["p"], ref.params["c"])
    )
    assert card.params["alpha"] == pytest.approx(ref.params["alpha"]) and card.params["objective"] == pytest.approx(
        ref.params["objective"]
    )
    assert (card.params["beta"], card.params["clamp"], card.params["top_k"]) == (0.9, "relu", 3)
    assert card.params["grid"]["optimizer"] == "refine" and card.params["grid"]["s_values"] == pytest.approx(
        ref.params["grid"]["s_values"]
    )
    assert len(card.params["grid"]["c_values"]) == 3 and card.data["objective_kind"] == "relaxed"
    assert card.data["n_clean_incorrect_abc_correct"] == ref.data["n_clean_incorrect_abc_correct"] > 0
    assert card.attack == {"name": "mmaa", "eps": 0.2, "norm": "Linf", "n_iter": 3, "n_target_classes": 2,
                           "n_restarts": 1, "seed": seed, "top_k": 3, "batch_size": n}
    # the calibration split, first n images: never the evaluation split
    assert card.data["split"] == "calibration" and card.data["fingerprint"] == data.fingerprint
    assert card.data["fingerprint"] != load_dataset("digits", "evaluation", n=n).fingerprint
    assert card.dataset == "digits" and card.provenance["seed"] == seed


def test_mix_passes_seed_and_restarts_to_the_attack(tmp_path, mmaa_calls):
    card = mix("digits-std", "digits-pgd", seed=11, n_restarts=2, cache_dir=tmp_path, **TINY_MIX).card
    assert [(kw["seed"], kw["n_restarts"]) for _, _, kw in mmaa_calls] == [(11, 2)]
    assert card.attack["seed"] == 11 and card.attack["n_restarts"] == 2


def test_mmaa_from_cache_is_about_the_attack_not_the_clean_logits(tmp_path):
    first = mix("digits-std", "digits-pgd", cache_dir=tmp_path, **TINY_MIX)
    more_iters = mix("digits-std", "digits-pgd", cache_dir=tmp_path, **{**TINY_MIX, "n_iter": 3})
    assert first.cache_hits == {"rbc_logits": False, "mmaa": False}
    assert more_iters.cache_hits == {"rbc_logits": True, "mmaa": False}  # same clean logits, a new attack
    assert more_iters.card.provenance["mmaa_from_cache"] is False
    again = mix("digits-std", "digits-pgd", cache_dir=tmp_path, **{**TINY_MIX, "n_iter": 3})
    assert again.cache_hits == {"rbc_logits": True, "mmaa": True} and again.card.provenance["mmaa_from_cache"]


def test_mix_without_the_cache_writes_nothing_there(tmp_path):
    for _ in range(2):
        res = mix("digits-std", "digits-pgd", cache_dir=tmp_path / "cache", use_cache=False, **TINY_MIX)
        assert res.cache_hits == {"rbc_logits": False, "mmaa": False}
    assert not (tmp_path / "cache").exists()


def test_top_k_equal_to_the_class_count_is_allowed(tmp_path):
    assert mix("digits-std", "digits-pgd", top_k=10, cache_dir=tmp_path, **FAST).card.params["top_k"] == 10


def _relabelled(name: str, **spec_changes) -> BaseClassifier:
    """A registered model under a changed registry entry (the weights untouched; the registry's object unchanged)."""
    model = load_model(name)
    return BaseClassifier(model.network, replace(model.spec, **spec_changes))


def test_the_dataset_argument_wins_over_the_models_registry_entries(tmp_path):
    rbc = _relabelled("digits-pgd", dataset="digits-elsewhere")
    with pytest.raises(InputError, match="pass --dataset to choose the calibration data"):
        mix("digits-std", rbc, cache_dir=tmp_path / "c1", **TINY_MIX)
    assert not (tmp_path / "c1").exists()
    res = mix("digits-std", rbc, dataset="digits", cache_dir=tmp_path / "c2", **TINY_MIX)
    assert res.card.dataset == "digits"
    assert res.card.data["fingerprint"] == load_dataset("digits", "calibration", n=120).fingerprint


def test_the_threat_model_defaults_to_the_rbcs_not_the_abcs(tmp_path):
    """MMAA attacks the RBC at its own epsilon and norm, whatever an ABC's registry entry says."""
    abc = _relabelled("digits-std", epsilon=0.05, threat_model="L2")
    card = mix(abc, "digits-pgd", cache_dir=tmp_path, **TINY_MIX).card
    assert (card.attack["eps"], card.attack["norm"]) == (0.2, "Linf")


def test_models_of_different_tasks_are_refused_before_the_attack(tmp_path):
    with pytest.raises(InputError, match="pick models of the same task"):
        mix(_relabelled("digits-std", num_classes=5), "digits-pgd", cache_dir=tmp_path / "c", **TINY_MIX)
    five = nn.Sequential(nn.Flatten(), nn.Linear(64, 5))
    with pytest.raises(InputError, match="ABC 'Sequential' has 5 classes but 'digits' has 10"):
        mix(five, "digits-pgd", cache_dir=tmp_path / "c", **TINY_MIX)  # a standard objective never runs the ABC
    with pytest.raises(InputError, match="--n-calib must be positive, got 0"):
        mix("digits-std", "digits-pgd", cache_dir=tmp_path / "c", **{**TINY_MIX, "n_calib": 0})
    assert not (tmp_path / "c").exists()


# ------------------------------------------------------------------------------ cards: their models and dataset
def test_card_models_load_the_recorded_names_with_the_callers_device_and_unsafe_flag(monkeypatch):
    seen = []

    def fake_load(name, device="cpu", allow_unsafe=False):
        seen.append((name, device, allow_unsafe))
        return nn.Identity()

    monkeypatch.setattr(mixzoo.zoo.pairs, "load_model", fake_load)
    card_models(_card(), device="meta", allow_unsafe=True)
    assert seen == [("digits-std", "meta", True), ("digits-pgd", "meta", True)]
    seen.clear()
    card_models(_card(), abc="other-abc")
    assert seen == [("other-abc", "cpu", False), ("digits-pgd", "cpu", False)]


def test_load_mixed_keeps_the_recorded_rbc_when_only_the_abc_is_given_and_passes_the_gradient_mode():
    mlp = nn.Sequential(nn.Flatten(), nn.Linear(64, 10)).eval()
    model = load_mixed(_card(), abc=mlp, gradient="bypass")
    assert model.abc is mlp and model.rbc.spec.name == "digits-pgd" and model.gradient == "bypass"
    with pytest.raises(UnknownNameError, match="digits-std"):  # a mistyped given name: its suggestions, not the card's
        load_mixed(_card(), abc="digits-sdt")
    with pytest.raises(InputError, match="not a torch device"):
        load_mixed(_card(), device="cpuu")


def test_the_cards_dataset_wins_over_the_rbcs():
    assert card_dataset(_card(dataset="fashion-mnist"), load_model("digits-pgd")) == "fashion-mnist"
    assert card_dataset(_card(dataset=None), load_model("digits-pgd")) == "digits"


def test_refit_alpha_keeps_the_relaxed_objective_of_the_first_pass(tmp_path):
    """--refit-alpha with --objective relaxed: the second pass of Algorithm 1 counts, like the first, only the RBC's
    clean mistakes that the ABC gets right (the reference runs the second pass directly on the same pieces)."""
    from mixzoo.methods.mixednuts.approximation import refit_alpha

    abc, rbc = load_model("digits-std"), load_model("digits-pgd")
    settings_ = dict(objective="relaxed", beta=0.9, cache_dir=tmp_path, **TINY_MIX)  # an objective strictly in (0, 1)
    refit = mix("digits-std", "digits-pgd", refit_alpha=True, **settings_).card
    data = load_dataset("digits", "calibration", n=TINY_MIX["n_calib"])
    cache = Cache(tmp_path)
    cdata = calibration_data(None, rbc, data, MMAASettings(eps=0.2, norm="Linf", n_iter=TINY_MIX["n_iter"],
                                                           n_target_classes=TINY_MIX["n_target_classes"],
                                                           batch_size=TINY_MIX["batch_size"]),
                             cache=cache, progress=False)
    with torch.no_grad():
        abc_correct = abc(data.images).argmax(1) == data.labels
    passes = {}
    for kind, correct in (("relaxed", abc_correct), ("standard", None)):
        first = mix("digits-std", "digits-pgd", **settings_).card
        passes[kind] = refit_alpha(first, rbc, cdata, cache=cache, progress=False,
                                   abc_clean_correct=correct).data["alpha_refit"]
    assert passes["relaxed"]["objective_second_pass"] != passes["standard"]["objective_second_pass"]  # it matters
    assert refit.data["alpha_refit"] == pytest.approx(passes["relaxed"])


def test_the_same_weights_behind_another_normalisation_get_their_own_cached_logits_and_mmaa(tmp_path, mmaa_calls):
    """Cache keys cover the preprocessing a BaseClassifier applies, not only its network's weights: the same
    network behind another mean/std is another function of the image. The card still records the weight hash."""
    cache = Cache(tmp_path)
    pgd = load_model("digits-pgd")
    shifted = BaseClassifier(pgd.network, replace(pgd.spec, mean=(0.5,), std=(0.25,)))
    data = load_dataset("digits", "calibration", n=12)
    pairs = mixzoo.zoo.pairs
    assert pairs.model_hash(shifted) == pairs.model_hash(pgd), "the card's weight hash is the network's"
    assert pairs.model_key(shifted) != pairs.model_key(pgd)
    with torch.no_grad():
        first = cached_logits(pgd, data, cache=cache, progress=False)
        second = cached_logits(shifted, data, cache=cache, progress=False)
        torch.testing.assert_close(second, shifted(data.images), rtol=0, atol=1e-6)
    assert not torch.allclose(first, second)
    cached_mmaa(pgd, data, MMAASettings(eps=0.1, norm="Linf", n_iter=2), cache=cache, progress=False)
    before = len(mmaa_calls)
    cached_mmaa(shifted, data, MMAASettings(eps=0.1, norm="Linf", n_iter=2), cache=cache, progress=False)
    assert len(mmaa_calls) > before, "the shifted model reused the first model's attack"


def test_mix_takes_the_request_and_the_keyword_form_warns_and_gives_the_same_card(tmp_path, shared_cache):
    """``mix(FitRequest)`` is the form MixedNUTS.fit uses; the keyword form of 0.1 still works, with a
    DeprecationWarning, and gives the same card, number for number."""
    import warnings

    from mixzoo.methods import FitRequest

    options = {"n_iter": 8, "n_target_classes": 2, "beta": 0.9}
    request = FitRequest("digits-std", "digits-pgd", options=options, n_calib=120, batch_size=60, progress=False,
                         cache_dir=shared_cache, out=tmp_path / "new.toml")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        new = mix(request)
    with pytest.warns(DeprecationWarning, match=r"mix\(FitRequest\(abc, rbc, options="):
        old = mix("digits-std", "digits-pgd", beta=0.9, out=tmp_path / "old.toml", cache_dir=shared_cache, **FAST)
    assert new.card.params == old.card.params and new.card.attack == old.card.attack
    assert new.card.data == old.card.data and new.summary == old.summary
    with pytest.raises(TypeError, match="unexpected keyword argument 'betta'"), pytest.warns(DeprecationWarning):
        mix("digits-std", "digits-pgd", betta=0.9)
    with pytest.raises(TypeError, match="FitRequest alone"):
        mix(request, beta=0.9)
    with pytest.raises(InputError, match="takes no option 'betta'"):
        mix(FitRequest("digits-std", "digits-pgd", options={"betta": 0.9}))


def test_mixednuts_fit_hands_its_request_to_mix(monkeypatch, tmp_path):
    """MixedNUTS.fit passes its FitRequest through (no unpacking into keywords and repacking)."""
    from mixzoo.core.plugins import lookup
    from mixzoo.methods import FitRequest

    seen = []

    def spy(request, rbc=None, **keywords):
        seen.append((request, rbc, keywords))
        return pipeline.MixResult(None, None, {}, {}, {})

    monkeypatch.setattr(pipeline, "mix", spy)
    request = FitRequest("digits-std", "digits-pgd", options={"beta": 0.9}, batch_size=None)
    lookup("method", "mixednuts").fit(request)
    assert seen == [(request, None, {})]


def test_mix_settings_defaults_are_the_documented_option_defaults():
    """MixSettings (what mix applies) and MixedNUTS.options (what --show-options prints) agree on every default
    that is a value."""
    from dataclasses import fields

    from mixzoo.core.plugins import lookup

    specs = lookup("method", "mixednuts").option_specs()
    defaults = {f.name: f.default for f in fields(pipeline.MixSettings)}
    assert set(specs) == set(defaults)
    for name, spec in specs.items():
        if not isinstance(spec.default, str) or spec.type is str:
            assert spec.default == defaults[name], name
