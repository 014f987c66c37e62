"""Mutation audit of mixzoo/pipeline.py: each test pins down one behaviour of the library layer that a plausible bug
(a cache key missing a setting, a setting not passed on, the wrong mask or stage in Fig. 6's numbers, a given model or
dataset ignored) would change. Expected values come from the definitions (Def. 2.1 margins, Sec. 4.2 LN, Algorithm 1
on independently computed logits), never from a previous run's output. Digits models, a few dozen images, a few
MMAA iterations: every test takes about a second."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import mixzoo.attacks as attacks
import mixzoo.pipeline as pipeline
import mixzoo.zoo.pairs
from mixzoo.cache import Cache
from mixzoo.calibrate import Grid, calibrate
from mixzoo.card import MixCard
from mixzoo.data import load_dataset
from mixzoo.errors import InputError, UnknownNameError
from mixzoo.models import BaseClassifier, load_model
from mixzoo.pipeline import (
    CalibrationData,
    _default_attack_setting,
    cached_logits,
    cached_mmaa,
    calibration_data,
    card_dataset,
    card_models,
    load_mixed,
    margin_summary,
    mix,
)
from mixzoo.transforms import rbc_transform

FAST = dict(n_calib=120, n_iter=2, n_target_classes=1, batch_size=120, progress=False)


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny models: one intra-op thread (conftest's one_thread) for every test here."""


@pytest.fixture()
def mmaa_calls(monkeypatch):
    """Every call of the real MMAA (the pipeline imports it from mixzoo.attacks at call time), with its arguments."""
    real = attacks.mmaa
    calls: list[tuple[torch.Tensor, torch.Tensor, dict]] = []

    def spy(model, images, labels, **kwargs):
        calls.append((images.detach().clone(), labels.detach().clone(), kwargs))
        return real(model, images, labels, **kwargs)

    monkeypatch.setattr(attacks, "mmaa", spy)
    return calls


def _card(**changes) -> MixCard:
    fields = dict(s=2.0, p=2.0, c=-0.5, alpha=0.9, beta=0.985, dataset="digits", abc={"name": "digits-std"},
                  rbc={"name": "digits-pgd"})
    return MixCard(**{**fields, **changes})


# ----------------------------------------------------------------------------------------------------- the cache
def test_every_mmaa_setting_the_data_and_the_model_are_part_of_the_cache_key(tmp_path, mmaa_calls):
    """Two runs share a cached MMAA entry only when everything that changes the attack is the same: a second run with
    one setting changed must attack again, the same settings again must not."""
    cache = Cache(tmp_path)
    pgd = load_model("digits-pgd")
    data = load_dataset("digits", "calibration", n=12)
    base = dict(eps=0.2, norm="Linf", n_iter=1, n_target_classes=1, n_restarts=1, seed=0, top_k=None,
                batch_size=12, progress=False)
    cached_mmaa(pgd, data, cache=cache, **base)
    assert len(mmaa_calls) == 1
    cached_mmaa(pgd, data, cache=cache, **base)
    assert len(mmaa_calls) == 1  # the same settings: served from the cache
    for change in ({"eps": 0.1}, {"norm": "L2"}, {"n_iter": 2}, {"n_target_classes": 2}, {"n_restarts": 2},
                   {"seed": 1}, {"top_k": 3}, {"batch_size": 6}):
        before = len(mmaa_calls)
        cached_mmaa(pgd, data, cache=cache, **{**base, **change})
        assert len(mmaa_calls) > before, f"{change} reused another setting's cached attack"
    for other_data, other_model in ((load_dataset("digits", "evaluation", n=12), pgd),
                                    (data, load_model("digits-std"))):
        before = len(mmaa_calls)
        cached_mmaa(other_model, other_data, cache=cache, **base)
        assert len(mmaa_calls) > before
    before = len(mmaa_calls)
    cached_mmaa(pgd, data, cache=cache, transform=_card(clamp="relu"), **base)
    assert len(mmaa_calls) > before, "the attack on h^M reused the attack on LN(h)"
    before = len(mmaa_calls)
    cached_mmaa(pgd, data, cache=cache, transform=_card(clamp="relu", s=3.0), **base)
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
    (issue 29: the same margins for any batch size, and an interrupted run resumes identically); the record holds
    the RBC's raw logits at the perturbed images, which lie in the eps-ball."""
    rbc = load_model("digits-pgd")
    data = load_dataset("digits", "calibration", n=25)
    out = cached_mmaa(rbc, data, eps=0.15, norm="Linf", cache=Cache(tmp_path), n_iter=2, n_target_classes=1,
                      n_restarts=1, seed=7, top_k=3, batch_size=10, progress=False)
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
    out = cached_mmaa(rbc, data, eps=0.2, norm="Linf", cache=Cache(tmp_path), n_iter=2, n_target_classes=1,
                      batch_size=15, progress=False, transform=card)
    assert [kw["layer_norm"] for _, _, kw in mmaa_calls] == [False]
    with torch.no_grad():
        raw = rbc(out["adv_images"])
    torch.testing.assert_close(out["logits"], raw, rtol=0, atol=1e-5)
    assert not torch.allclose(out["logits"].log_softmax(1), out["logits"], atol=1e-3)  # raw logits, not log-probs


# ---------------------------------------------------------------------------------------- attack defaults (eps/norm)
def test_attack_defaults_come_from_the_rbc_and_given_values_win():
    pgd = load_model("digits-pgd")  # registry: Linf, eps 0.2
    assert (pgd.spec.epsilon, pgd.spec.threat_model) == (0.2, "Linf")
    assert _default_attack_setting(pgd, None, None) == (0.2, "Linf")
    assert _default_attack_setting(pgd, 0.05, None) == (0.05, "Linf")
    assert _default_attack_setting(pgd, None, "L2") == (0.2, "L2")
    assert _default_attack_setting(pgd, 0.5, "L2") == (0.5, "L2")
    plain = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    assert _default_attack_setting(plain, 0.1, None) == (0.1, "Linf")  # the paper's default threat model
    with pytest.raises(InputError, match="records no epsilon; pass --eps"):
        _default_attack_setting(plain, None, None)
    for bad in (0.0, -0.1, float("inf")):
        with pytest.raises(InputError, match="positive finite"):
            _default_attack_setting(pgd, bad, None)


# ------------------------------------------------------------------------------------------- calibration_data
def test_calibration_data_passes_top_k_to_mmaa_and_computes_the_abcs_own_logits(tmp_path, mmaa_calls):
    abc, rbc = load_model("digits-std"), load_model("digits-pgd")
    data = load_dataset("digits", "calibration", n=20)
    cdata = calibration_data(abc, rbc, data, eps=0.2, norm="Linf", cache=Cache(tmp_path), n_iter=2,
                             n_target_classes=1, top_k=4, batch_size=20, progress=False)
    assert [kw["top_k"] for _, _, kw in mmaa_calls] == [4]
    with torch.no_grad():
        torch.testing.assert_close(cdata.abc_clean_logits, abc(data.images), rtol=0, atol=1e-6)
        torch.testing.assert_close(cdata.clean_logits, rbc(data.images), rtol=0, atol=1e-6)
    assert cdata.attack["top_k"] == 4 and torch.equal(cdata.labels, data.labels)


def test_an_empty_calibration_set_is_an_input_error(tmp_path):
    empty = load_dataset("digits", "calibration", n=0)
    with pytest.raises(InputError, match="calibration set is empty"):
        calibration_data(None, load_model("digits-pgd"), empty, eps=0.2, norm="Linf", cache=Cache(tmp_path),
                         progress=False)


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
    card = MixCard(s=1.7, p=2.5, c=-0.4, alpha=0.9, beta=0.985, clamp="relu", top_k=top_k)
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
    got = margin_summary(data, MixCard(s=1.7, p=2.5, c=-0.4, alpha=0.9, beta=0.985, clamp="relu", top_k=3))
    gelu = margin_summary(data, MixCard(s=1.7, p=2.5, c=-0.4, alpha=0.9, beta=0.985, clamp="gelu", top_k=3))
    all_k = margin_summary(data, MixCard(s=1.7, p=2.5, c=-0.4, alpha=0.9, beta=0.985, clamp="relu"))
    key = "clean_incorrect_median_margin"
    assert len({got["raw"][key], got["layer_norm"][key], got["transformed"][key]}) == 3
    assert got["transformed"][key] != pytest.approx(gelu["transformed"][key], abs=1e-4)
    assert got["layer_norm"][key] != pytest.approx(all_k["layer_norm"][key], abs=1e-4)


# -------------------------------------------------------------------------------------------------------- mix
def test_mix_is_algorithm_1_on_the_rbcs_clean_logits_and_its_mmaa_logits(tmp_path):
    """mix() = clean logits of the RBC + MMAA on LN(RBC) (seed as given, starts per image index) + Algorithm 1 with
    every setting passed on; the reference composes mixzoo.attacks.mmaa and mixzoo.calibrate directly."""
    n, seed, grid = 120, 4, Grid(s_n=3, p_n=2, c_n=3, c_min=-1.0)
    abc, rbc = load_model("digits-std"), load_model("digits-pgd")
    data = load_dataset("digits", "calibration", n=n)
    with torch.no_grad():
        clean = rbc(data.images)
        abc_correct = abc(data.images).argmax(1) == data.labels
    adv = attacks.mmaa(rbc, data.images, data.labels, eps=0.2, norm="Linf", n_iter=3, n_target_classes=2,
                       n_restarts=1, seed=seed, top_k=3, batch_size=n, progress=False, attack_all=False,
                       index=torch.arange(n))
    settings_ = dict(beta=0.9, clamp="relu", top_k=3, grid=grid, objective="relaxed", optimizer="refine")
    ref = calibrate(clean_logits=clean, clean_labels=data.labels, attacked_logits=adv.logits,
                    attacked_labels=data.labels, abc_clean_correct=abc_correct, **settings_)
    res = mix("digits-std", "digits-pgd", n_calib=n, n_iter=3, n_target_classes=2, seed=seed, batch_size=n,
              cache_dir=tmp_path, progress=False, **settings_)
    card = res.card
    assert (card.s, card.p, card.c) == pytest.approx((ref.s, ref.p, ref.c))
    assert card.alpha == pytest.approx(ref.alpha) and card.objective == pytest.approx(ref.objective)
    assert (card.beta, card.clamp, card.top_k) == (0.9, "relu", 3)
    assert card.grid["optimizer"] == "refine" and card.grid["s_values"] == pytest.approx(ref.grid["s_values"])
    assert len(card.grid["c_values"]) == 3 and card.data["objective_kind"] == "relaxed"
    assert card.data["n_clean_incorrect_abc_correct"] == ref.data["n_clean_incorrect_abc_correct"] > 0
    assert card.attack == {"name": "mmaa", "eps": 0.2, "norm": "Linf", "n_iter": 3, "n_target_classes": 2,
                           "n_restarts": 1, "seed": seed, "top_k": 3, "batch_size": n}
    # the calibration split, first n images: never the evaluation split
    assert card.data["split"] == "calibration" and card.data["fingerprint"] == data.fingerprint
    assert card.data["fingerprint"] != load_dataset("digits", "evaluation", n=n).fingerprint
    assert card.dataset == "digits" and card.provenance["seed"] == seed


def test_mix_passes_seed_and_restarts_to_the_attack(tmp_path, mmaa_calls):
    card = mix("digits-std", "digits-pgd", seed=11, n_restarts=2, cache_dir=tmp_path, **FAST).card
    assert [(kw["seed"], kw["n_restarts"]) for _, _, kw in mmaa_calls] == [(11, 2)]
    assert card.attack["seed"] == 11 and card.attack["n_restarts"] == 2


def test_mmaa_from_cache_is_about_the_attack_not_the_clean_logits(tmp_path):
    first = mix("digits-std", "digits-pgd", cache_dir=tmp_path, **FAST)
    more_iters = mix("digits-std", "digits-pgd", cache_dir=tmp_path, **{**FAST, "n_iter": 3})
    assert first.cache_hits == {"rbc_logits": False, "mmaa": False}
    assert more_iters.cache_hits == {"rbc_logits": True, "mmaa": False}  # same clean logits, a new attack
    assert more_iters.card.provenance["mmaa_from_cache"] is False
    again = mix("digits-std", "digits-pgd", cache_dir=tmp_path, **{**FAST, "n_iter": 3})
    assert again.cache_hits == {"rbc_logits": True, "mmaa": True} and again.card.provenance["mmaa_from_cache"]


def test_mix_without_the_cache_writes_nothing_there(tmp_path):
    for _ in range(2):
        res = mix("digits-std", "digits-pgd", cache_dir=tmp_path / "cache", use_cache=False, **FAST)
        assert res.cache_hits == {"rbc_logits": False, "mmaa": False}
    assert not (tmp_path / "cache").exists()


def test_top_k_equal_to_the_class_count_is_allowed(tmp_path):
    assert mix("digits-std", "digits-pgd", top_k=10, cache_dir=tmp_path, **FAST).card.top_k == 10


def _relabelled(name: str, **spec_changes) -> BaseClassifier:
    """A registered model under a changed registry entry (the weights untouched; the registry's object unchanged)."""
    model = load_model(name)
    return BaseClassifier(model.network, replace(model.spec, **spec_changes))


def test_the_dataset_argument_wins_over_the_models_registry_entries(tmp_path):
    rbc = _relabelled("digits-pgd", dataset="digits-elsewhere")
    with pytest.raises(InputError, match="pass --dataset to choose the calibration data"):
        mix("digits-std", rbc, cache_dir=tmp_path / "c1", **FAST)
    assert not (tmp_path / "c1").exists()
    res = mix("digits-std", rbc, dataset="digits", cache_dir=tmp_path / "c2", **FAST)
    assert res.card.dataset == "digits"
    assert res.card.data["fingerprint"] == load_dataset("digits", "calibration", n=120).fingerprint


def test_the_threat_model_defaults_to_the_rbcs_not_the_abcs(tmp_path):
    """MMAA attacks the RBC at its own epsilon and norm, whatever an ABC's registry entry says."""
    abc = _relabelled("digits-std", epsilon=0.05, threat_model="L2")
    card = mix(abc, "digits-pgd", cache_dir=tmp_path, **FAST).card
    assert (card.attack["eps"], card.attack["norm"]) == (0.2, "Linf")


def test_models_of_different_tasks_are_refused_before_the_attack(tmp_path):
    with pytest.raises(InputError, match="pick models of the same task"):
        mix(_relabelled("digits-std", num_classes=5), "digits-pgd", cache_dir=tmp_path / "c", **FAST)
    five = nn.Sequential(nn.Flatten(), nn.Linear(64, 5))
    with pytest.raises(InputError, match="ABC 'Sequential' has 5 classes but 'digits' has 10"):
        mix(five, "digits-pgd", cache_dir=tmp_path / "c", **FAST)  # a standard objective never runs the ABC
    with pytest.raises(InputError, match="--n-calib must be positive, got 0"):
        mix("digits-std", "digits-pgd", cache_dir=tmp_path / "c", **{**FAST, "n_calib": 0})
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
    from mixzoo.approximation import refit_alpha

    abc, rbc = load_model("digits-std"), load_model("digits-pgd")
    settings_ = dict(objective="relaxed", beta=0.9, cache_dir=tmp_path, **FAST)  # an objective strictly in (0, 1)
    refit = mix("digits-std", "digits-pgd", refit_alpha=True, **settings_).card
    data = load_dataset("digits", "calibration", n=FAST["n_calib"])
    cache = Cache(tmp_path)
    cdata = calibration_data(None, rbc, data, eps=0.2, norm="Linf", cache=cache, n_iter=FAST["n_iter"],
                             n_target_classes=FAST["n_target_classes"], batch_size=FAST["batch_size"], progress=False)
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
    assert pipeline.model_hash(shifted) == pipeline.model_hash(pgd), "the card's weight hash is the network's"
    assert pipeline.model_key(shifted) != pipeline.model_key(pgd)
    with torch.no_grad():
        first = cached_logits(pgd, data, cache=cache, progress=False)
        second = cached_logits(shifted, data, cache=cache, progress=False)
        torch.testing.assert_close(second, shifted(data.images), rtol=0, atol=1e-6)
    assert not torch.allclose(first, second)
    cached_mmaa(pgd, data, eps=0.1, norm="Linf", cache=cache, n_iter=2, progress=False)
    before = len(mmaa_calls)
    cached_mmaa(shifted, data, eps=0.1, norm="Linf", cache=cache, n_iter=2, progress=False)
    assert len(mmaa_calls) > before, "the shifted model reused the first model's attack"
