"""The mixed classifier: Eq. 1 / Eq. 5 in log space, baselines, gradient modes (App. B.2), cards."""

from __future__ import annotations

import inspect
import math
import warnings
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from mixzoo.core.card import MixCard
from mixzoo.core.errors import InputError
from mixzoo.methods.mixednuts.mixing import (
    MixedClassifier,
    MixingParams,
    auxiliary_log_probs,
    mix_log_probs,
    weight_mismatches,
)
from mixzoo.methods.mixednuts.transforms import rbc_transform
from mixzoo.zoo.models import weight_hash

K = 5


class Counting(nn.Module):
    """A small real classifier on 1x4x4 images that counts its forward passes."""

    def __init__(self, seed: int, scale: float = 1.0):
        super().__init__()
        torch.manual_seed(seed)
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(16, 12), nn.Tanh(), nn.Linear(12, K))
        self.scale = scale
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.net(x) * self.scale


class NaNModel(nn.Module):
    def forward(self, x):
        out = torch.zeros(len(x), K)
        out[0, 0] = float("nan")
        return out


def images(n=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 1, 4, 4, generator=g)


def prob_space_mix(g, h, s, p, c, alpha, temperature, clamp="gelu", transform=True):
    """The same mixture computed naively in probability space (float64), as a reference."""
    g, h = g.double(), h.double()
    if temperature == 0:
        pg = torch.nn.functional.one_hot(g.argmax(-1), g.shape[-1]).double()
    else:
        pg = torch.softmax(g / temperature, -1)
    ph = torch.softmax(rbc_transform(h, s, p, c, clamp=clamp) if transform else h, -1)
    return torch.log((1 - alpha) * pg + alpha * ph)


logit_rows = st.integers(0, 10_000).map(lambda seed: torch.randn(4, K, generator=torch.Generator().manual_seed(seed))
                                        * 4)


@settings(max_examples=60, deadline=None)
@given(logit_rows, logit_rows, st.sampled_from([0.5, 0.73, 0.999, 1.0]), st.sampled_from([0.0, 0.5, 1.0]),
       st.floats(0.05, 10), st.floats(0.5, 4), st.floats(-2, 0.5), st.booleans())
def test_mix_log_probs_are_valid_and_match_probability_space(g, h, alpha, temperature, s, p, c, transform):
    out = mix_log_probs(g, h, s=s, p=p, c=c, alpha=alpha, temperature=temperature, transform=transform)
    assert not torch.isnan(out).any()
    assert torch.allclose(torch.logsumexp(out, -1), torch.zeros(4), atol=1e-5)
    ref = prob_space_mix(g, h, s, p, c, alpha, temperature, transform=transform)
    finite = torch.isfinite(ref)
    assert torch.equal(finite, torch.isfinite(out))  # -inf exactly where the mixed probability is 0
    assert torch.allclose(out[finite].double(), ref[finite], atol=1e-4)


@pytest.mark.parametrize("alpha", [0.0, 0.5, 0.8, 1.0])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_gradients_are_finite_for_extreme_alpha_and_hard_max(alpha, temperature):
    g = (torch.randn(3, K) * 5).requires_grad_()
    h = (torch.randn(3, K) * 5).requires_grad_()
    out = mix_log_probs(g, h, s=2.0, p=0.5, c=-1.0, alpha=alpha, temperature=temperature, clamp="relu")
    assert out.requires_grad
    out[:, 0].sum().backward()
    used = [h] if alpha == 1 else [g] if alpha == 0 else [g, h]
    for t in used:
        assert t.grad is not None and torch.isfinite(t.grad).all()
    if temperature == 0 and alpha < 1:
        assert torch.equal(g.grad, torch.zeros_like(g))  # the hard-max ABC has no gradient (Sec. 3.1)


def test_alpha_zero_hard_max_is_the_exact_one_hot_log():
    g, h = torch.tensor([[0.1, 2.0, -1.0, 0.0, 0.0]]), torch.randn(1, K)
    out = mix_log_probs(g, h, s=1, p=1, c=0, alpha=0.0, temperature=0.0)
    assert out.tolist() == [[-math.inf, 0.0, -math.inf, -math.inf, -math.inf]]
    with pytest.raises(InputError, match="abc_logits is None"):
        mix_log_probs(None, h, s=1, p=1, c=0, alpha=0.5)
    assert torch.allclose(mix_log_probs(None, h, s=1, p=1, c=0, alpha=1.0, transform=False),
                          torch.log_softmax(h, -1))


def test_mixed_classifier_forward_equals_formula_and_validates():
    abc, rbc = Counting(0, 3.0), Counting(1)
    x = images()
    model = MixedClassifier(abc, rbc, MixingParams(s=2.0, p=3.0, c=-0.5, alpha=0.8))
    out = model(x)
    expected = mix_log_probs(abc(x), rbc(x), s=2.0, p=3.0, c=-0.5, alpha=0.8)
    assert torch.allclose(out, expected)
    with pytest.raises(InputError, match="below 1/2"):
        MixedClassifier(abc, rbc, MixingParams(alpha=0.3))
    assert MixedClassifier(abc, rbc, MixingParams(alpha=0.3), allow_any_alpha=True).alpha == 0.3
    with pytest.raises(InputError, match="abc is None"):
        MixedClassifier(None, rbc, MixingParams(alpha=0.9))
    with pytest.raises(InputError, match="rbc is None"):
        MixedClassifier(abc, None, MixingParams(alpha=0.5))
    assert torch.allclose(MixedClassifier(abc, None, MixingParams(alpha=0.0, temperature=1.0), allow_any_alpha=True)(x),
                          torch.log_softmax(abc(x), -1))
    with pytest.raises(InputError, match="needs alpha"):
        MixedClassifier(abc, rbc)
    with pytest.raises(InputError, match="gradient"):
        MixedClassifier(abc, rbc, MixingParams(alpha=0.9), gradient="magic")


def test_nan_logits_name_the_model():
    with pytest.raises(InputError, match="ABC"):
        MixedClassifier(NaNModel(), Counting(1), MixingParams(alpha=0.9))(images())
    with pytest.raises(InputError, match="RBC"):
        MixedClassifier(Counting(0), NaNModel(), MixingParams(alpha=0.9))(images())


def test_bypass_has_mixednuts_values_and_auxiliary_gradients():
    abc, rbc = Counting(0, 3.0), Counting(1)
    exact = MixedClassifier(abc, rbc, MixingParams(s=1.5, p=2.0, c=-0.3, alpha=0.9, alpha_d=0.7))
    bypass = MixedClassifier(abc, rbc, MixingParams(s=1.5, p=2.0, c=-0.3, alpha=0.9, alpha_d=0.7), gradient="bypass")
    weights = torch.randn(6, K)

    def value_and_grad(fn):
        x = images().requires_grad_()
        out = fn(x)
        (out * weights).sum().backward()
        return out.detach(), x.grad

    v_exact, _ = value_and_grad(exact)
    v_bypass, g_bypass = value_and_grad(bypass)
    v_aux, g_aux = value_and_grad(exact.auxiliary)
    assert torch.allclose(v_bypass, v_exact, atol=1e-6)
    assert torch.allclose(g_bypass, g_aux, atol=1e-6)
    assert not torch.allclose(v_aux, v_exact, atol=1e-3)


def test_auxiliary_is_equation_8():
    g, h = torch.randn(4, K, dtype=torch.float64), torch.randn(4, K, dtype=torch.float64)
    a, r = 0.8, 0.9
    out = auxiliary_log_probs(g, h, s=2.0, p=2.0, c=-0.5, alpha_d=a, r_d=r)
    ref = torch.log((1 - a) * torch.softmax(g, -1) + a * r * torch.softmax(h, -1)
                    + a * (1 - r) * torch.softmax(rbc_transform(h, 2.0, 2.0, -0.5), -1))
    assert torch.allclose(out, ref)


def test_forward_pair_runs_each_model_once():
    abc, rbc = Counting(0, 3.0), Counting(1)
    model = MixedClassifier(abc, rbc, MixingParams(s=1.5, p=2.0, c=-0.3, alpha=0.9))
    x = images()
    mixed, aux = model.forward_pair(x)
    assert (abc.calls, rbc.calls) == (1, 1)
    assert torch.allclose(mixed, model(x)) and torch.allclose(aux, model.auxiliary(x))


def test_exact_mode_gives_no_gradient_to_the_hard_max_abc():
    abc, rbc = Counting(0, 3.0), Counting(1)
    model = MixedClassifier(abc, rbc, MixingParams(s=1.5, p=2.0, c=-0.3, alpha=0.9))
    model(images())[:, 1].sum().backward()
    assert all(p.grad is None or torch.count_nonzero(p.grad) == 0 for p in abc.parameters())
    assert any(p.grad is not None and torch.count_nonzero(p.grad) > 0 for p in rbc.parameters())


def test_baseline_constructors():
    abc, rbc = Counting(0, 3.0), Counting(1)
    x = images()
    assert torch.allclose(MixedClassifier.rbc_only(rbc)(x), torch.log_softmax(rbc(x), -1))
    assert torch.allclose(MixedClassifier.abc_only(abc)(x), torch.log_softmax(abc(x), -1))
    lin = MixedClassifier.linear(abc, rbc, alpha=0.7)(x)
    ref = torch.log(0.3 * torch.softmax(abc(x), -1) + 0.7 * torch.softmax(rbc(x), -1))
    assert torch.allclose(lin, ref, atol=1e-6)
    assert MixedClassifier.rbc_only(rbc).abc is None


def test_from_card_builds_the_card_and_warns_on_hash_mismatch(tmp_path):
    abc, rbc = Counting(0, 3.0), Counting(1)
    card = MixCard(
        "mixednuts",
        {"s": 2.0, "p": 3.0, "c": -0.5, "alpha": 0.85, "beta": 0.98, "alpha_d": 0.75},
        abc={"name": "a", "weight_hash": weight_hash(abc)},
        rbc={"name": "r", "weight_hash": weight_hash(rbc)},
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = MixedClassifier.from_card(card, abc, rbc)
    assert (model.s, model.p, model.c, model.alpha, model.alpha_d) == (2.0, 3.0, -0.5, 0.85, 0.75)
    assert model.temperature == 0.0 and model.transform
    path = card.save(tmp_path / "card.toml")
    other = Counting(7)
    with pytest.warns(UserWarning, match="weight hash"):
        MixedClassifier.from_card(path, abc, other)
    linear_card = MixCard("linear", {"alpha": 0.9, "beta": 0.98, "temperature": 1.0, "fit": "linear"})
    x = images()
    assert torch.allclose(MixedClassifier.from_card(linear_card, abc, rbc)(x),
                          MixedClassifier.linear(abc, rbc, 0.9)(x))


def test_from_card_keeps_the_cards_clamp_and_top_k():
    """A card calibrated with another clamp or LN over the top-k logits (App. D.7) is served as calibrated."""
    abc, rbc = Counting(0, 3.0), Counting(1)
    x = images()
    g, h = abc(x), rbc(x)
    for clamp, top_k in (("relu", 3), ("softplus", None), ("gelu", 2)):
        card = MixCard(
            "mixednuts", {"s": 2.0, "p": 1.5, "c": -0.4, "alpha": 0.8, "beta": 0.98, "clamp": clamp, "top_k": top_k}
        )
        model = MixedClassifier.from_card(card, abc, rbc, warn=False)
        ref = mix_log_probs(g, h, s=2.0, p=1.5, c=-0.4, alpha=0.8, clamp=clamp, top_k=top_k)
        assert torch.allclose(model(x), ref, atol=1e-6)
        default = mix_log_probs(g, h, s=2.0, p=1.5, c=-0.4, alpha=0.8)
        assert not torch.allclose(model(x), default, atol=1e-4)  # the settings matter for these logits


@pytest.mark.parametrize(("field", "value", "match"), [
    ("s", 0.0, "s must be"), ("s", -1.0, "s must be"), ("p", 0.0, "p must be"), ("s", math.nan, "s must be"),
    ("c", math.nan, "c must be"), ("c", math.inf, "c must be"), ("temperature", -1.0, "temperature"),
    ("r_d", 1.5, "r_d"), ("r_d", -0.1, "r_d"), ("s", True, "s must be"), ("c", False, "c must be"),
    ("temperature", True, "temperature"), ("temperature", math.inf, "temperature"), ("top_k", 1, "top_k"),
    ("top_k", True, "top_k"), ("top_k", 2.5, "top_k"), ("top_k", "3", "top_k"),
])
def test_mixed_classifier_refuses_invalid_parameters(field, value, match):
    kwargs = {"s": 1.0, "p": 1.0, "c": 0.0, "alpha": 0.9, field: value}
    with pytest.raises(InputError, match=match):
        MixedClassifier(Counting(0), Counting(1), MixingParams(**kwargs))


def test_attack_through_the_mixed_classifier():
    """Drop-in check: the repository's PGD runs on MixedNUTS in both gradient modes."""
    from mixzoo.attacks.pgd import pgd

    abc, rbc = Counting(0, 3.0), Counting(1)
    x, y = images(8), torch.arange(8) % K
    for mode in ("exact", "bypass"):
        model = MixedClassifier(abc, rbc, MixingParams(s=1.5, p=2.0, c=-0.3, alpha=0.9), gradient=mode)
        adv = pgd(model, x, y, eps=0.1, steps=3)
        assert adv.shape == x.shape and (adv - x).abs().max() <= 0.1 + 1e-6
        with torch.no_grad():  # the attack made progress on the true MixedNUTS output, in either gradient mode
            before = -model(x).gather(1, y.view(-1, 1)).sum()
            after = -model(adv).gather(1, y.view(-1, 1)).sum()
        assert after > before


K4 = 4


# ----------------------------------------------------------------------------------------- independent references
def hand_transform(h: torch.Tensor, s: float, p: float, c: float) -> torch.Tensor:
    """Paper Eq. 4 written out: LN over classes (unbiased variance + 1e-8, the authors' normalize_topk), GELU (erf
    form) clamp, signed power, scale."""
    h = h.double()
    mean = h.mean(-1, keepdim=True)
    std = (((h - mean) ** 2).sum(-1, keepdim=True) / (h.shape[-1] - 1) + 1e-8).sqrt()
    u = (h - mean) / std + c
    clamped = 0.5 * u * (1 + torch.erf(u / math.sqrt(2)))
    return s * clamped.abs() ** p * torch.sign(clamped)


def softmax(z: torch.Tensor) -> torch.Tensor:
    e = torch.exp(z - z.max(-1, keepdim=True).values)
    return e / e.sum(-1, keepdim=True)


def hand_mixture(g, h, s, p, c, alpha, temperature):
    """Eq. 5: (1 - alpha) * softmax(g / T) + alpha * softmax(M(s, p, c)(h)), T = 0 meaning the one-hot argmax."""
    g = g.double()
    if temperature == 0:
        pg = torch.zeros_like(g)
        pg[torch.arange(len(g)), g.argmax(-1)] = 1.0
    else:
        pg = softmax(g / temperature)
    return (1 - alpha) * pg + alpha * softmax(hand_transform(h, s, p, c))


class Net(nn.Module):
    """A tiny real classifier on 1x2x2 images."""

    def __init__(self, seed: int, scale: float = 1.0):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.lin = nn.Linear(4, K4)
        with torch.no_grad():
            self.lin.weight.copy_(torch.randn(K4, 4, generator=gen) * scale)
            self.lin.bias.copy_(torch.randn(K4, generator=gen))

    def forward(self, x):
        return self.lin(x.flatten(1))


def images_2x2(n=5, seed=0):
    return torch.rand(n, 1, 2, 2, generator=torch.Generator().manual_seed(seed))


# -------------------------------------------------------------------------------------------------- mixing.py
G = torch.tensor([[2.0, 0.5, -1.0, 0.0], [0.1, 0.3, 3.0, -2.0], [-1.0, -1.0, 0.5, 0.4]])
H = torch.tensor([[0.2, 1.5, -0.3, 0.7], [1.0, -0.5, 0.0, 2.5], [0.3, 0.2, 0.1, -0.4]])


@pytest.mark.parametrize(("alpha", "temperature"), [(0.5, 0.0), (0.73, 0.0), (0.8, 0.5), (0.6, 2.0)])
def test_mixture_equals_equation_5_written_out(alpha, temperature):
    out = mix_log_probs(G, H, s=1.7, p=1.5, c=-0.4, alpha=alpha, temperature=temperature)
    ref = hand_mixture(G, H, 1.7, 1.5, -0.4, alpha, temperature)
    assert torch.allclose(out.double().exp(), ref, atol=1e-6)
    # each row is a distribution on its own (classes, not the batch, are normalised)
    assert torch.allclose(out.double().exp().sum(-1), torch.ones(len(G), dtype=torch.float64), atol=1e-6)


def test_single_row_mixture_does_not_depend_on_the_rest_of_the_batch():
    full = mix_log_probs(G, H, s=2.0, p=1.0, c=0.0, alpha=0.7, temperature=1.0)
    for i in range(len(G)):
        alone = mix_log_probs(G[i:i + 1], H[i:i + 1], s=2.0, p=1.0, c=0.0, alpha=0.7, temperature=1.0)
        assert torch.allclose(alone[0], full[i], atol=1e-6)


@pytest.mark.parametrize("bad", [True, False, "0.7", math.nan, -0.01, 1.01])
def test_alpha_that_is_not_a_number_in_the_unit_interval_is_refused(bad):
    with pytest.raises(InputError, match=r"alpha must be a number in \[0, 1\]"):
        mix_log_probs(G, H, s=1, p=1, c=0, alpha=bad)
    with pytest.raises(InputError, match=r"alpha must be a number in \[0, 1\]"):
        MixedClassifier(Net(0), Net(1), MixingParams(alpha=bad), allow_any_alpha=True)


def test_alpha_of_exactly_one_half_is_allowed_without_allow_any_alpha():
    # footnote 1: below 1/2 is refused, 1/2 is not
    assert MixedClassifier(Net(0), Net(1), MixingParams(alpha=0.5)).alpha == 0.5


def test_missing_rbc_logits_with_positive_alpha_is_an_input_error():
    with pytest.raises(InputError, match="rbc_logits is None"):
        mix_log_probs(G, None, s=1, p=1, c=0, alpha=0.6)
    assert torch.equal(mix_log_probs(G, None, s=1, p=1, c=0, alpha=0.0, temperature=1.0),
                       torch.log_softmax(G, -1))


def test_logits_of_different_batch_sizes_are_refused_not_broadcast():
    with pytest.raises(InputError, match="differ in shape"):
        mix_log_probs(G, H[:1], s=1, p=1, c=0, alpha=0.7)
    with pytest.raises(InputError, match="differ in shape"):
        mix_log_probs(G[:1], H, s=1, p=1, c=0, alpha=0.7)


def hand_auxiliary(g, h, s, p, c, a, r):
    """Eq. 8: (1 - a) softmax(g) + a r softmax(h) + a (1 - r) softmax(M(s, p, c)(h))."""
    return (1 - a) * softmax(g.double()) + a * r * softmax(h.double()) + a * (1 - r) * softmax(
        hand_transform(h, s, p, c))


@pytest.mark.parametrize("r_d", [0.0, 0.35, 1.0])
def test_auxiliary_mixture_is_equation_8_including_the_r_d_endpoints(r_d):
    out = auxiliary_log_probs(G, H, s=1.7, p=1.5, c=-0.4, alpha_d=0.8, r_d=r_d)
    assert torch.allclose(out.double().exp(), hand_auxiliary(G, H, 1.7, 1.5, -0.4, 0.8, r_d), atol=1e-6)


def test_auxiliary_with_a_missing_model_uses_the_other_one_alone():
    rbc_only = auxiliary_log_probs(None, H, s=1.7, p=1.5, c=-0.4, alpha_d=0.3, r_d=0.6)
    assert torch.allclose(rbc_only.double().exp(), hand_auxiliary(G, H, 1.7, 1.5, -0.4, 1.0, 0.6), atol=1e-6)
    abc_only = auxiliary_log_probs(G, None, s=1.7, p=1.5, c=-0.4, alpha_d=0.7, r_d=0.6)
    assert torch.allclose(abc_only.double().exp(), softmax(G.double()), atol=1e-6)


@pytest.mark.parametrize("r_d", [0.0, 1.0])
def test_mixed_classifier_accepts_the_r_d_endpoints(r_d):
    abc, rbc = Net(0, 3.0), Net(1)
    model = MixedClassifier(abc, rbc, MixingParams(s=1.7, p=1.5, c=-0.4, alpha=0.8, r_d=r_d), gradient="bypass")
    x = images_2x2()
    with torch.no_grad():
        g, h = abc(x), rbc(x)
        assert torch.allclose(model.auxiliary(x).double().exp(), hand_auxiliary(g, h, 1.7, 1.5, -0.4, 0.8, r_d),
                              atol=1e-6)


@pytest.mark.parametrize("bad", [1.5, -0.2, math.nan, True])
def test_alpha_d_is_validated(bad):
    with pytest.raises(InputError, match="alpha_d"):
        MixedClassifier(Net(0), Net(1), MixingParams(alpha=0.8, alpha_d=bad))


def input_gradient(fn, weights, n=5):
    x = images_2x2(n).requires_grad_()
    out = fn(x)
    (out * weights).sum().backward()
    return out.detach(), x.grad


def test_bypass_with_alpha_one_still_takes_the_auxiliary_gradient_through_the_abc():
    """alpha = 1 serves the RBC values, but App. B.2.2's bypass gradient is that of Eq. 8 with alpha_d < 1, which
    involves the ABC."""
    abc, rbc = Net(0, 3.0), Net(1)
    model = MixedClassifier(abc, rbc, MixingParams(s=1.5, p=2.0, c=-0.3, alpha=1.0, alpha_d=0.6), gradient="bypass")
    weights = torch.randn(5, K4, generator=torch.Generator().manual_seed(3))
    values, grad = input_gradient(model, weights)
    _, aux_grad = input_gradient(model.auxiliary, weights)
    with torch.no_grad():
        x = images_2x2()
        ref = softmax(hand_transform(rbc(x), 1.5, 2.0, -0.3))
    assert torch.allclose(values.double().exp(), ref, atol=1e-6)
    assert torch.allclose(grad, aux_grad, atol=1e-6)


def test_forward_pair_in_bypass_mode_gives_the_bypass_gradient():
    abc, rbc = Net(0, 3.0), Net(1)
    model = MixedClassifier(abc, rbc, MixingParams(s=1.5, p=2.0, c=-0.3, alpha=0.9, alpha_d=0.7), gradient="bypass")
    weights = torch.randn(5, K4, generator=torch.Generator().manual_seed(4))
    v_pair, g_pair = input_gradient(lambda x: model.forward_pair(x)[0], weights)
    v_fwd, g_fwd = input_gradient(model, weights)
    assert torch.allclose(v_pair, v_fwd, atol=1e-6)
    assert torch.allclose(g_pair, g_fwd, atol=1e-6)
    _, g_aux = input_gradient(model.auxiliary, weights)
    assert torch.allclose(g_pair, g_aux, atol=1e-6)


def test_linear_baseline_keeps_the_gradient_mode():
    abc, rbc = Net(0, 3.0), Net(1)
    model = MixedClassifier.linear(abc, rbc, 0.7, gradient="bypass")
    assert model.gradient == "bypass"
    x = images_2x2()
    with torch.no_grad():
        ref = 0.3 * softmax(abc(x).double()) + 0.7 * softmax(rbc(x).double())
        assert torch.allclose(model(x).double().exp(), ref, atol=1e-6)


class RowNaN(nn.Module):
    """Whole rows of NaN logits for the first ``bad`` images."""

    def __init__(self, bad: int):
        super().__init__()
        self.bad = bad

    def forward(self, x):
        out = torch.zeros(len(x), K4)
        out[: self.bad] = float("nan")
        return out


def test_non_finite_logits_are_counted_per_image():
    with pytest.raises(InputError, match="for 2 of 5 images"):
        MixedClassifier(RowNaN(2), Net(1), MixingParams(alpha=0.9))(images_2x2())


def card_for(abc_hash: str | None, rbc_hash: str | None) -> MixCard:
    return MixCard(
        "mixednuts",
        {"s": 1.5, "p": 2.0, "c": -0.3, "alpha": 0.9, "beta": 0.98},
        abc={"name": "a", "weight_hash": abc_hash} if abc_hash else {},
        rbc={"name": "r", "weight_hash": rbc_hash} if rbc_hash else {},
    )


def test_weight_mismatch_message_names_the_right_model_and_both_hashes():
    abc, rbc, other = Net(0), Net(1), Net(2)
    card = card_for(weight_hash(abc), weight_hash(rbc))
    assert weight_mismatches(card, abc, rbc) == []
    (message,) = weight_mismatches(card, abc, other)
    assert message.startswith("RBC ") and "'r'" in message
    assert f"has weight hash {weight_hash(other)} " in message
    assert f"with hash {weight_hash(rbc)};" in message
    (message,) = weight_mismatches(card, other, rbc)
    assert message.startswith("ABC ") and "'a'" in message


def test_a_missing_model_is_not_checked_against_the_card():
    rbc = Net(1)
    card = card_for(weight_hash(Net(0)), weight_hash(rbc))
    assert weight_mismatches(card, None, rbc) == []
    rbc_alone = MixCard(
        "mixednuts",
        {"s": 1.5, "p": 2.0, "c": -0.3, "alpha": 1.0, "beta": 0.98},
        abc={"name": "a", "weight_hash": "0" * 16},
        rbc={"name": "r", "weight_hash": weight_hash(rbc)},
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = MixedClassifier.from_card(rbc_alone, None, rbc)
    assert model.abc is None


def test_from_card_warn_false_is_silent_even_on_a_mismatch():
    card = card_for(weight_hash(Net(0)), weight_hash(Net(1)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        MixedClassifier.from_card(card, Net(0), Net(5), warn=False)


def wrapper(card, abc, rbc):
    return MixedClassifier.from_card(card, abc, rbc, stacklevel=3)


def test_from_card_warning_points_at_the_callers_line():
    card = card_for(weight_hash(Net(0)), weight_hash(Net(1)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = inspect.currentframe().f_lineno + 1
        wrapper(card, Net(0), Net(5))
    (w,) = caught
    assert Path(w.filename).resolve() == Path(__file__).resolve() and w.lineno == line


def test_the_keyword_form_before_mixing_params_still_works_with_a_deprecation_warning():
    """``MixedClassifier(abc, rbc, s=..., alpha=...)`` and the old positional order give the same classifier as
    ``MixingParams``, with a DeprecationWarning naming the new form; an unknown keyword is still a TypeError."""
    abc, rbc, x = Net(0), Net(1), images_2x2()
    new = MixedClassifier(abc, rbc, MixingParams(s=1.5, p=2.0, c=-0.3, alpha=0.9, alpha_d=0.7), gradient="bypass")
    with pytest.warns(DeprecationWarning, match=r"use MixedClassifier\(abc, rbc, MixingParams\(alpha=\.\.\."):
        old = MixedClassifier(abc, rbc, s=1.5, p=2.0, c=-0.3, alpha=0.9, alpha_d=0.7, gradient="bypass")
    with pytest.warns(DeprecationWarning):
        positional = MixedClassifier(abc, rbc, 1.5, 2.0, -0.3, 0.9, "gelu", 0.0, None, "bypass", 0.9, 0.7)
    for model in (old, positional):
        assert model.params == new.params and model.gradient == "bypass"
        assert torch.equal(model(x), new(x)) and torch.equal(model.auxiliary(x), new.auxiliary(x))
    with pytest.warns(DeprecationWarning), pytest.raises(InputError, match="below 1/2"):
        MixedClassifier(abc, rbc, alpha=0.3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'beta'"):
        MixedClassifier(abc, rbc, alpha=0.9, beta=0.5)
    with pytest.raises(TypeError, match="give the mixing parameters in params alone"):
        MixedClassifier(abc, rbc, MixingParams(alpha=0.9), s=2.0)
