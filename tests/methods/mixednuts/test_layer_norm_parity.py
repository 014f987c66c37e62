"""Issue 25, section 3: mixzoo's layer norm is the authors' ``normalize_topk`` (unbiased variance + 1e-8), and
nothing computed with the old one (population variance) is reused silently: cache entries of the attacks and of the
benchmark are keyed by a new code version, and a card made before the fix loads with a one-line warning.

The expected values are written out here in float64 NumPy from the definition in the authors' code
(``models/output_maps.py`` of github.com/Bai-YT/MixedNUTS), independently of
:mod:`mixzoo.methods.mixednuts.transforms`."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from eval_requests import ask
from torch import nn

from mixzoo.core.cache import Cache
from mixzoo.core.card import MixCard, provenance
from mixzoo.methods.mixednuts.transforms import layer_norm


def authors_normalize_topk(z: np.ndarray, k: int | None = None) -> np.ndarray:
    """``normalize_topk``: clip to +-1e15, mean and unbiased variance of the top-k logits, applied to all."""
    z = np.clip(np.asarray(z, dtype=np.float64), -1e15, 1e15)
    ref = z if k is None or k >= z.shape[1] else -np.sort(-z, axis=1)[:, :k]
    mean = ref.mean(axis=1, keepdims=True)
    var = ((ref - mean) ** 2).sum(axis=1, keepdims=True) / (ref.shape[1] - 1)
    return (z - mean) / np.sqrt(var + 1e-8)


@pytest.mark.parametrize(("k", "top_k"), [(10, None), (100, None), (100, 250), (1000, 250), (7, 3)])
def test_layer_norm_is_the_authors_normalize_topk(k, top_k):
    g = torch.Generator().manual_seed(k)
    z = torch.randn(64, k, generator=g, dtype=torch.float64) * torch.logspace(-3, 2, 64, dtype=torch.float64)[:, None]
    want = authors_normalize_topk(z.numpy(), top_k)
    np.testing.assert_allclose(layer_norm(z, top_k).numpy(), want, rtol=1e-12, atol=1e-12)


def test_the_population_variance_is_off_by_sqrt_k_over_k_minus_1():
    """The old layer norm divided by the population std: on 10 classes its output is sqrt(10/9) = 1.054 times the
    authors'. A constant row maps to 0 (the 1e-8 keeps it finite)."""
    z = torch.randn(5, 10, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    population = (z - z.mean(1, keepdim=True)) / z.var(1, unbiased=False, keepdim=True).sqrt()
    ratio = population / layer_norm(z)
    assert ratio.numpy() == pytest.approx(math.sqrt(10 / 9), rel=1e-6)
    assert layer_norm(torch.full((2, 4), 3.0, dtype=torch.float64)).abs().max() == 0


# ------------------------------------------------------------------------------------------------------- caches
def test_an_mmaa_entry_written_before_the_layer_norm_fix_is_not_reused(tmp_path, monkeypatch):
    """MMAA attacks LN(RBC); an entry cached under the old code version ("mmaa-2") must be attacked again."""
    import mixzoo.attacks
    import mixzoo.methods.mixednuts.calibration_data as calibration_data
    from mixzoo.zoo.data import load_dataset
    from mixzoo.zoo.models import load_model

    calls = []
    real = mixzoo.attacks.mmaa

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(mixzoo.attacks, "mmaa", spy)
    rbc, data, cache = load_model("digits-pgd"), load_dataset("digits", "calibration", n=6), Cache(tmp_path)
    mmaa = calibration_data.MMAASettings(eps=0.1, norm="Linf", n_iter=1, n_target_classes=1, batch_size=6)
    settings = dict(cache=cache, progress=False)
    with monkeypatch.context() as m:
        m.setattr(calibration_data, "ATTACK_CODE_VERSION", "mmaa-2")  # the version before the fix
        calibration_data.cached_mmaa(rbc, data, mmaa, **settings)
    assert len(calls) == 1
    calibration_data.cached_mmaa(rbc, data, mmaa, **settings)
    assert len(calls) == 2, "an MMAA result computed with the old layer norm was reused"
    calibration_data.cached_mmaa(rbc, data, mmaa, **settings)
    assert len(calls) == 2  # the new entry itself is reused


def test_a_bench_entry_written_before_the_layer_norm_fix_is_not_reused(tmp_path, monkeypatch):
    import mixzoo.attacks.runner

    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 3))
    images = torch.rand(5, 3, 2, 2, generator=torch.Generator().manual_seed(0))
    labels = torch.tensor([0, 1, 2, 0, 1])

    def run() -> dict:
        return mixzoo.attacks.runner.evaluate(model, images, labels, ask(
            attack="pgd", eps=0.05, norm="Linf", seed=0, batch_size=5, cache=Cache(tmp_path), key_parts={"model": "m"},
            label="m", attack_options={"n_iter": 1}, progress=False))

    with monkeypatch.context() as m:
        m.setattr(mixzoo.attacks.runner, "BENCH_CODE_VERSION", "bench-3")  # the version before the fix
        assert not run().get("cached")
    assert not run().get("cached"), "a benchmark row computed with the old layer norm was reused"
    assert run().get("cached")


# --------------------------------------------------------------------------------------------------------- cards
def _saved_card(tmp_path, prov: dict) -> str:
    card = MixCard("mixednuts", {"s": 2.0, "p": 2.0, "c": -0.5, "alpha": 0.9, "beta": 0.985}, provenance=prov)
    return str(card.save(tmp_path / "card.toml"))


def _saved_schema1_card(tmp_path, prov: dict) -> str:
    """A card file as a mixzoo before the method plugins wrote it (schema 1: MixedNUTS's fields at the top level,
    ``method`` = how it was fitted)."""
    import tomli_w

    text = tomli_w.dumps({"schema_version": 1, "method": "mmaa", "s": 2.0, "p": 2.0, "c": -0.5, "alpha": 0.9,
                          "beta": 0.985, "clamp": "gelu", "temperature": 0.0, "provenance": prov})
    path = tmp_path / "card-v1.toml"
    path.write_text(text)
    return str(path)


def test_a_card_made_before_the_fix_loads_with_a_one_line_warning(tmp_path):
    old = provenance()
    assert "layer_norm" not in old  # MixedNUTS's calibrate adds it, and every mixzoo before the fix left it out
    path = _saved_schema1_card(tmp_path, old)
    with pytest.warns(UserWarning, match=r"older layer norm .*run `mixzoo mix` again") as rec:
        card = MixCard.load(path)
    assert card.params["s"] == 2.0 and card.method == "mixednuts" and card.params["fit"] == "mmaa"
    assert len(rec) == 1 and "\n" not in str(rec[0].message)
    assert rec[0].filename == __file__  # it points at the caller's line
    # a schema-1 card that records the current layer norm (made after the fix, before the plugins) loads silently
    from mixzoo.attacks.margins import LAYER_NORM_VERSION

    path = _saved_schema1_card(tmp_path, {**old, "layer_norm": LAYER_NORM_VERSION})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert MixCard.load(path).params["alpha"] == 0.9


@pytest.mark.parametrize("prov", [None, {}], ids=["made-now", "hand-written"])
def test_a_card_made_now_or_by_hand_loads_silently(tmp_path, prov):
    path = _saved_card(tmp_path, provenance() if prov is None else prov)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        MixCard.load(path)


def test_a_hand_written_schema1_card_loads_silently(tmp_path):
    """A schema-1 file without a mixzoo provenance (written by hand, e.g. published parameters) is not checked:
    nothing says which layer norm its numbers were fitted for."""
    path = _saved_schema1_card(tmp_path, {})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert MixCard.load(path).params["s"] == 2.0
