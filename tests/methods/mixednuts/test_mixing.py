"""The mixed classifier: Eq. 1 / Eq. 5 in log space, baselines, gradient modes (App. B.2), cards."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from mixzoo.card import MixCard
from mixzoo.errors import InputError
from mixzoo.mixing import MixedClassifier, auxiliary_log_probs, mix_log_probs
from mixzoo.models import weight_hash
from mixzoo.transforms import rbc_transform

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
    model = MixedClassifier(abc, rbc, s=2.0, p=3.0, c=-0.5, alpha=0.8)
    out = model(x)
    expected = mix_log_probs(abc(x), rbc(x), s=2.0, p=3.0, c=-0.5, alpha=0.8)
    assert torch.allclose(out, expected)
    with pytest.raises(InputError, match="below 1/2"):
        MixedClassifier(abc, rbc, alpha=0.3)
    assert MixedClassifier(abc, rbc, alpha=0.3, allow_any_alpha=True).alpha == 0.3
    with pytest.raises(InputError, match="abc is None"):
        MixedClassifier(None, rbc, alpha=0.9)
    with pytest.raises(InputError, match="rbc is None"):
        MixedClassifier(abc, None, alpha=0.5)
    assert torch.allclose(MixedClassifier(abc, None, alpha=0.0, allow_any_alpha=True, temperature=1.0)(x),
                          torch.log_softmax(abc(x), -1))
    with pytest.raises(InputError, match="needs alpha"):
        MixedClassifier(abc, rbc)
    with pytest.raises(InputError, match="gradient"):
        MixedClassifier(abc, rbc, alpha=0.9, gradient="magic")


def test_nan_logits_name_the_model():
    with pytest.raises(InputError, match="ABC"):
        MixedClassifier(NaNModel(), Counting(1), alpha=0.9)(images())
    with pytest.raises(InputError, match="RBC"):
        MixedClassifier(Counting(0), NaNModel(), alpha=0.9)(images())


def test_bypass_has_mixednuts_values_and_auxiliary_gradients():
    abc, rbc = Counting(0, 3.0), Counting(1)
    exact = MixedClassifier(abc, rbc, s=1.5, p=2.0, c=-0.3, alpha=0.9, alpha_d=0.7)
    bypass = MixedClassifier(abc, rbc, s=1.5, p=2.0, c=-0.3, alpha=0.9, alpha_d=0.7, gradient="bypass")
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
    model = MixedClassifier(abc, rbc, s=1.5, p=2.0, c=-0.3, alpha=0.9)
    x = images()
    mixed, aux = model.forward_pair(x)
    assert (abc.calls, rbc.calls) == (1, 1)
    assert torch.allclose(mixed, model(x)) and torch.allclose(aux, model.auxiliary(x))


def test_exact_mode_gives_no_gradient_to_the_hard_max_abc():
    abc, rbc = Counting(0, 3.0), Counting(1)
    model = MixedClassifier(abc, rbc, s=1.5, p=2.0, c=-0.3, alpha=0.9)
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
    card = MixCard(s=2.0, p=3.0, c=-0.5, alpha=0.85, beta=0.98, alpha_d=0.75,
                   abc={"name": "a", "weight_hash": weight_hash(abc)},
                   rbc={"name": "r", "weight_hash": weight_hash(rbc)})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = MixedClassifier.from_card(card, abc, rbc)
    assert (model.s, model.p, model.c, model.alpha, model.alpha_d) == (2.0, 3.0, -0.5, 0.85, 0.75)
    assert model.temperature == 0.0 and model.transform
    path = card.save(tmp_path / "card.toml")
    other = Counting(7)
    with pytest.warns(UserWarning, match="weight hash"):
        MixedClassifier.from_card(path, abc, other)
    linear_card = MixCard(s=1.0, p=1.0, c=0.0, alpha=0.9, beta=0.98, clamp="linear", temperature=1.0,
                          method="linear")
    x = images()
    assert torch.allclose(MixedClassifier.from_card(linear_card, abc, rbc)(x),
                          MixedClassifier.linear(abc, rbc, 0.9)(x))


def test_from_card_keeps_the_cards_clamp_and_top_k():
    """A card calibrated with another clamp or LN over the top-k logits (App. D.7) is served as calibrated."""
    abc, rbc = Counting(0, 3.0), Counting(1)
    x = images()
    g, h = abc(x), rbc(x)
    for clamp, top_k in (("relu", 3), ("softplus", None), ("gelu", 2)):
        card = MixCard(s=2.0, p=1.5, c=-0.4, alpha=0.8, beta=0.98, clamp=clamp, top_k=top_k)
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
        MixedClassifier(Counting(0), Counting(1), **kwargs)


def test_attack_through_the_mixed_classifier():
    """Drop-in check: the repository's PGD runs on MixedNUTS in both gradient modes."""
    from mixzoo.attacks.pgd import pgd

    abc, rbc = Counting(0, 3.0), Counting(1)
    x, y = images(8), torch.arange(8) % K
    for mode in ("exact", "bypass"):
        model = MixedClassifier(abc, rbc, s=1.5, p=2.0, c=-0.3, alpha=0.9, gradient=mode)
        adv = pgd(model, x, y, eps=0.1, steps=3)
        assert adv.shape == x.shape and (adv - x).abs().max() <= 0.1 + 1e-6
        with torch.no_grad():  # the attack made progress on the true MixedNUTS output, in either gradient mode
            before = -model(x).gather(1, y.view(-1, 1)).sum()
            after = -model(adv).gather(1, y.view(-1, 1)).sum()
        assert after > before
