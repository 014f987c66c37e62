"""End to end on the digits zoo: mix (cached MMAA + Algorithm 1), bench, reports, resume, CLI errors."""

from __future__ import annotations

import io
import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from typer.testing import CliRunner

from mixzoo.card import MixCard
from mixzoo.cli import app
from mixzoo.errors import InputError, UnknownNameError
from mixzoo.pipeline import mix

FAST = dict(n_calib=120, n_iter=8, n_target_classes=2, batch_size=60, progress=False)


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


def test_mix_writes_card_and_reuses_cached_mmaa(tmp_path, shared_cache):
    first = mix("digits-std", "digits-pgd", out=tmp_path / "card.toml", cache_dir=shared_cache, **FAST)
    card = MixCard.load(tmp_path / "card.toml")
    assert 0.5 <= card.alpha <= 1.0 and card.beta == 0.985
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
    assert card2.beta == 0.9 and card2.clamp == "relu"
    from mixzoo.machine import machine_summary  # where it ran, and whether MMAA is this run's or the cache's

    assert card.provenance["machine"] == card2.provenance["machine"] == machine_summary("cpu")
    assert card.provenance["mmaa_from_cache"] is False and card2.provenance["mmaa_from_cache"] is True
    # a lower beta never needs a larger alpha (the constraint is looser)
    assert card2.alpha <= card.alpha + 1e-9 or card2.clamp != card.clamp


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
    from mixzoo.blackbox import load_black_box

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
    from mixzoo.bench import bench

    with pytest.raises(UnknownNameError, match="did you mean 'autoattack'"):
        bench(None, abc="digits-std", rbc="digits-pgd", attack="autoatack", n=10, out=tmp_path / "b",
              cache_dir=tmp_path / "cache", progress=False)
    assert not (tmp_path / "cache").exists() and not (tmp_path / "b").exists()
    with pytest.raises(InputError, match="--curve-n must be positive"):
        bench(None, abc="digits-std", rbc="digits-pgd", n=10, curve_n=0, out=tmp_path / "b",
              cache_dir=tmp_path / "cache", progress=False)
    assert not (tmp_path / "cache").exists() and not (tmp_path / "b").exists()


def test_bench_writes_reports_and_plots(tmp_path, shared_cache):
    from mixzoo.bench import bench, print_report

    res = mix("digits-std", "digits-pgd", out=tmp_path / "card.toml", cache_dir=shared_cache, **FAST)
    report = bench(tmp_path / "card.toml", attack="apgd", n=60, out=tmp_path / "bench", cache_dir=shared_cache,
                   attack_options={"n_iter": 5, "n_target_classes": 2}, curve=True, curve_n=30,
                   curve_options={"n_iter": 3, "n_target_classes": 1},
                   match_options={"n_iter": 3, "n_target_classes": 1}, batch_size=30, progress=False)
    data = json.loads((tmp_path / "bench" / "report.json").read_text())
    kinds = [m["kind"] for m in data["models"]]
    assert sorted(kinds) == ["abc", "linear", "mixednuts", "rbc"]
    for m in data["models"]:
        assert 0.0 <= m["robust_accuracy"] <= m["clean_accuracy"] <= 1.0
        assert m["n"] == 60 and m["attack"] == "apgd" and m["epsilon"] == pytest.approx(0.2)
    assert data["card"]["mixednuts"]["alpha"] == pytest.approx(res.card.alpha)
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
    from mixzoo.machine import describe_machine, machine_summary

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
    for m, label in zip(report.models, ("ABC digits-std", "RBC digits-pgd", "Linear mix (alpha=", "MixedNUTS, α"),
                        strict=True):
        row = next(line for line in lines if line.strip().startswith(label))
        assert f"{100 * m.robust_accuracy:.1f} ({100 * m.robust_ci[0]:.1f}-{100 * m.robust_ci[1]:.1f})" in row
    # the same bench again reads every row from the cache, and says so
    again = bench(tmp_path / "card.toml", attack="apgd", n=60, out=tmp_path / "bench2", cache_dir=shared_cache,
                  attack_options={"n_iter": 5, "n_target_classes": 2}, curve=False,
                  match_options={"n_iter": 3, "n_target_classes": 1}, batch_size=30, progress=False)
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
    from mixzoo.models import load_model

    rbc = load_model("digits-pgd")

    class NaNModel(torch.nn.Module):
        spec = rbc.spec

        def forward(self, x):
            return rbc(x) * float("nan")

    with pytest.raises(InputError, match="NaN"):
        mix("digits-std", NaNModel(), out=tmp_path / "c.toml", cache_dir=tmp_path, **FAST)
    assert not (tmp_path / "c.toml").exists()


def test_cli_bench_uses_an_attack_from_a_plugin(tmp_path, monkeypatch, shared_cache):
    """A plugin adds an attack through the hook; `mixzoo bench --attack NAME` runs it on all four models."""
    from mixzoo.attacks.evaluation import Attack, Component
    from mixzoo.plugins import hookimpl, register_plugin, unregister_plugin

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
        res = CliRunner().invoke(app, ["bench", str(card), "--attack", "test-corner", "--n", "40", "--no-curve",
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
    from mixzoo.attacks.evaluation import square_masking_note
    from mixzoo.bench import merge_warnings

    comps = [{"name": "apgd-ce", "newly_broken": 5}, {"name": "square", "newly_broken": 4}]
    per_batch = [[square_masking_note(1), "fab-t: odd"], [square_masking_note(1)], [square_masking_note(2)], []]
    assert merge_warnings(per_batch, comps) == [square_masking_note(4), "fab-t: odd"]
    assert merge_warnings([["fab-t: odd"], ["fab-t: odd"]], comps[:1]) == ["fab-t: odd (in 2 of 2 batches)"]
    assert merge_warnings([[], []], [{"name": "square", "newly_broken": 3}]) == []  # Square alone: no gradient run


def test_mixture_cache_keys_cover_every_parameter_that_changes_the_attacked_model():
    """A cached MixedNUTS row (main table or trade-off curve) is reused only for the same mixture: ``alpha_d``
    (the attack's gradient, Eq. 8) and ``top_k`` change the result, so they must change the key."""
    from mixzoo.bench import mixed_key_parts
    from mixzoo.cache import content_key
    from mixzoo.data import load_dataset
    from mixzoo.models import load_model

    abc, rbc = load_model("digits-std"), load_model("digits-pgd")
    data = load_dataset("digits", "evaluation", n=20)
    base = dict(s=2.0, p=2.0, c=-0.5, alpha=0.9, alpha_d=0.9, beta=0.985)

    def replace(_card, **change):
        return MixCard(**{**base, **change})

    card = replace(None)
    key = content_key(mixed_key_parts(card, abc, rbc, data))
    for change in ({"alpha_d": 0.95}, {"top_k": 3}, {"alpha": 0.91}, {"clamp": "linear"}, {"s": 2.5}):
        assert content_key(mixed_key_parts(replace(card, **change), abc, rbc, data)) != key, change
    assert content_key(mixed_key_parts(replace(card, beta=0.9), abc, rbc, data)) == key  # beta only chose them


def test_asking_for_more_images_than_the_split_holds_says_so(tmp_path, shared_cache):
    from mixzoo.bench import bench
    from mixzoo.data import load_dataset, shortfall_note

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
                   attack_options={"n_iter": 2, "n_target_classes": 1}, curve=False, plots=False,
                   match_n=50, match_options={"n_iter": 2, "n_target_classes": 1}, batch_size=250, progress=False)
    assert report.dataset["n"] == 497
    assert report.notes == ["--n 10000 asked for more images than the digits evaluation split holds; all 497 were"
                            " used"]
    assert json.loads((tmp_path / "bench" / "report.json").read_text())["notes"] == report.notes
    assert "all 497 were used" in (tmp_path / "bench" / "report.md").read_text()


def test_load_mixed_builds_the_cards_classifier_from_the_recorded_names(tmp_path, shared_cache):
    import mixzoo
    from mixzoo.calibrate import calibrate
    from mixzoo.data import load_dataset
    from mixzoo.mixing import MixedClassifier
    from mixzoo.models import load_model

    mix("digits-std", "digits-pgd", out=tmp_path / "card.toml", cache_dir=shared_cache, **FAST)
    model = mixzoo.load_mixed(tmp_path / "card.toml")
    card = MixCard.load(tmp_path / "card.toml")
    assert isinstance(model, MixedClassifier) and not model.training
    assert (model.s, model.p, model.c, model.alpha) == (card.s, card.p, card.c, card.alpha)
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


def test_cards_for_unregistered_modules_need_the_modules_and_bench_uses_them(tmp_path, shared_cache):
    from digits_models import train_digits_mlp

    import mixzoo
    from mixzoo.bench import bench

    mlp, _, _ = train_digits_mlp()
    mix("digits-std", mlp, eps=0.02, out=tmp_path / "card.toml", cache_dir=shared_cache, **FAST)
    with pytest.raises(InputError, match="RBC 'Sequential' is not a registry name.*pass rbc="):
        mixzoo.load_mixed(tmp_path / "card.toml")
    assert mixzoo.load_mixed(tmp_path / "card.toml", rbc=mlp).rbc is mlp
    # the margin plot reads the calibration margins of the RBC bench evaluated, not one looked up by name
    bench(tmp_path / "card.toml", rbc=mlp, attack="apgd", n=30, out=tmp_path / "bench", cache_dir=shared_cache,
          attack_options={"n_iter": 2, "n_target_classes": 1}, curve=False, match_n=30,
          match_options={"n_iter": 2, "n_target_classes": 1}, batch_size=30, progress=False)
    assert (tmp_path / "bench" / "margins.png").stat().st_size > 0


def test_bench_records_that_a_base_model_is_not_the_one_the_card_was_calibrated_for(tmp_path, shared_cache):
    from mixzoo.bench import bench

    mix("digits-std", "digits-pgd", out=tmp_path / "card.toml", cache_dir=shared_cache, **FAST)
    with pytest.warns(UserWarning, match="calibrated for 'digits-std'"):
        report = bench(tmp_path / "card.toml", abc="digits-pgd", attack="apgd", n=30, out=tmp_path / "bench",
                       cache_dir=shared_cache, attack_options={"n_iter": 2, "n_target_classes": 1}, curve=False,
                       plots=False, match_n=30, match_options={"n_iter": 2, "n_target_classes": 1}, batch_size=30,
                       progress=False)
    assert len(report.notes) == 1 and "calibrated for 'digits-std'" in report.notes[0]
    assert "re-run `mixzoo mix`" in (tmp_path / "bench" / "report.md").read_text()


def test_models_that_cannot_classify_the_data_fail_with_one_line(tmp_path, shared_cache):
    from digits_models import train_digits_mlp

    from mixzoo.approximation import check_approximation
    from mixzoo.bench import bench
    from mixzoo.data import load_dataset
    from mixzoo.models import load_model
    from mixzoo.pipeline import check_model_fits

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
    from mixzoo.cli import parse_attack_options

    assert parse_attack_options(items) == expected


@pytest.mark.parametrize("item", ["n_iter", "=3", "1x=2", "n iter=2"])
def test_malformed_attack_options_name_the_fix(item):
    from mixzoo.cli import parse_attack_options
    from mixzoo.errors import MixzooError

    with pytest.raises(MixzooError, match="is not KEY=VALUE; write e.g. -O n_iter=200"):
        parse_attack_options([item])


@settings(max_examples=80, deadline=None)
@given(st.dictionaries(st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True),
                       st.one_of(st.integers(-10**6, 10**6), st.floats(allow_nan=False, allow_infinity=False),
                                 st.booleans(), st.lists(st.from_regex(r"[a-z][a-z-]{0,6}", fullmatch=True),
                                                         min_size=2, max_size=4)), min_size=1, max_size=5))
def test_attack_options_round_trip_through_the_command_line(options):
    from mixzoo.cli import parse_attack_options

    items = [f"{k}={','.join(v) if isinstance(v, list) else json.dumps(v)}" for k, v in options.items()]
    assert parse_attack_options(items) == options
