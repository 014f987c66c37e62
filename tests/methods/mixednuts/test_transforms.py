"""Transforms of MixedNUTS: LN (App. D.7), M(s, p, c) (Eq. 4), hard-max ABC (Sec. 3.1), margin (Def. 2.1)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mixzoo.core.errors import InputError, UnknownNameError
from mixzoo.methods.mixednuts.transforms import (
    abc_log_probs,
    confidence_margin,
    get_clamp,
    layer_norm,
    rbc_transform,
    signed_power,
)


def _gelu(x: float) -> float:
    return 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0)))


def _softmax_margin(v: list[float]) -> float:
    e = sorted((math.exp(x) for x in v), reverse=True)
    return (e[0] - e[1]) / sum(e)


def test_three_class_transform_matches_hand_computation():
    """Eq. 4 on a 3-class logit vector, checked against plain-math arithmetic."""
    h = [2.0, 0.5, -1.0]
    s, p, c = 1.7, 2.5, -0.4
    mean = sum(h) / 3
    # unbiased variance (divide by k - 1) plus 1e-8, as the authors' normalize_topk (Sec. 4.2, App. D.7)
    std = math.sqrt(sum((x - mean) ** 2 for x in h) / 2 + 1e-8)
    ln = [(x - mean) / std for x in h]
    clamped = [_gelu(x + c) for x in ln]
    expected = [s * abs(v) ** p * math.copysign(1.0, v) for v in clamped]
    got = rbc_transform(torch.tensor([h], dtype=torch.float64), s, p, c, clamp="gelu")[0]
    assert got.tolist() == pytest.approx(expected, rel=1e-12, abs=1e-12)
    assert layer_norm(torch.tensor([h], dtype=torch.float64))[0].tolist() == pytest.approx(ln, rel=1e-12)
    # the negative GELU output keeps its sign through the power
    assert clamped[2] < 0 and got[2] < 0
    margin = confidence_margin(got.unsqueeze(0))[0].item()
    assert margin == pytest.approx(_softmax_margin(expected), rel=1e-12)


def test_layer_norm_changes_margins_as_in_appendix_d7():
    """App. D.7: LN scales up the unconfident (0.9, 1, 1.1) and scales down the competing (-2, 1, 1.1)."""
    logits = torch.tensor([[0.9, 1.0, 1.1], [-2.0, 1.0, 1.1]], dtype=torch.float64)
    raw, normed = confidence_margin(logits), confidence_margin(layer_norm(logits))
    assert normed[0] > raw[0]
    assert normed[1] < raw[1]


def test_layer_norm_top_k_uses_top_statistics_for_all_logits():
    h = [4.0, 2.0, -5.0, -9.0]
    top = [4.0, 2.0]
    mean, std = 3.0, math.sqrt(sum((x - 3.0) ** 2 for x in top) / (2 - 1) + 1e-8)  # unbiased, + 1e-8
    got = layer_norm(torch.tensor([h], dtype=torch.float64), top_k=2)[0].tolist()
    assert got == pytest.approx([(x - mean) / std for x in h], rel=1e-12)
    assert layer_norm(torch.tensor([h]), top_k=10).tolist() == layer_norm(torch.tensor([h])).tolist()
    with pytest.raises(InputError, match="top_k"):
        layer_norm(torch.tensor([h]), top_k=1)


def test_layer_norm_of_constant_row_is_zero_not_nan():
    out = layer_norm(torch.full((2, 5), 3.0))
    assert torch.equal(out, torch.zeros(2, 5))


def test_signed_power_gradient_is_finite_at_zero():
    x = torch.tensor([-2.0, -0.0, 0.0, 1e-12, 3.0], requires_grad=True)
    y = signed_power(x, 0.5)
    y.sum().backward()
    assert torch.isfinite(x.grad).all()
    assert y.detach().tolist()[:3] == pytest.approx([-math.sqrt(2.0), 0.0, 0.0], rel=1e-6)


@pytest.mark.parametrize("clamp", ["relu", "gelu", "elu", "softplus", "linear"])
def test_rbc_transform_gradient_finite_with_small_p(clamp):
    torch.manual_seed(0)
    logits = torch.randn(16, 10, requires_grad=True)
    # relu with c = -1 makes many exact zeros, where |x|^0.3 has an infinite derivative
    out = rbc_transform(logits, 2.0, 0.3, -1.0, clamp=clamp)
    torch.log_softmax(out, -1)[:, 0].sum().backward()
    assert torch.isfinite(logits.grad).all()


def test_rbc_transform_broadcasts_grid_parameters():
    torch.manual_seed(1)
    logits = torch.randn(5, 7, dtype=torch.float64)
    s = torch.tensor([0.5, 2.0], dtype=torch.float64).view(2, 1, 1, 1)
    p = torch.tensor([1.0, 3.0, 4.0], dtype=torch.float64).view(1, 3, 1, 1)
    out = rbc_transform(logits, s, p, -0.5)
    assert out.shape == (2, 3, 5, 7)
    assert torch.allclose(out[1, 2], rbc_transform(logits, 2.0, 4.0, -0.5))
    for s_bad, p_bad in ((1.0, 0.0), (0.0, 1.0), (-2.0, 1.0), (1.0, -1.0)):
        with pytest.raises(InputError, match="positive"):
            rbc_transform(logits, s_bad, p_bad, 0.0)
    with pytest.raises(InputError, match="positive"):  # one bad grid value among good ones
        rbc_transform(logits, torch.tensor([0.5, 0.0], dtype=torch.float64).view(2, 1, 1), 1.0, 0.0)


def test_clamps_come_from_the_plugin_hook():
    x = torch.tensor([-1.0, 0.5])
    assert get_clamp("relu")(x).tolist() == [0.0, 0.5]
    assert get_clamp("linear")(x).tolist() == x.tolist()
    assert get_clamp("elu")(x)[0].item() == pytest.approx(math.exp(-1) - 1)
    assert get_clamp("softplus")(x)[0].item() == pytest.approx(math.log1p(math.exp(-1)))
    fn = lambda t: t * 3  # noqa: E731
    assert get_clamp(fn) is fn
    with pytest.raises(UnknownNameError, match="gelu"):
        get_clamp("gleu")


def test_abc_log_probs_hard_max_and_temperature():
    logits = torch.tensor([[1.0, 3.0, 2.0], [5.0, -1.0, 0.0]], requires_grad=True)
    hard = abc_log_probs(logits, 0.0)
    assert hard.tolist() == [[-math.inf, 0.0, -math.inf], [0.0, -math.inf, -math.inf]]
    hard[:, 1].sum().backward()  # attached to the graph, zero gradient
    assert torch.equal(logits.grad, torch.zeros_like(logits))
    soft = abc_log_probs(logits.detach(), 0.5)
    assert torch.allclose(soft, torch.log_softmax(logits.detach() / 0.5, -1))
    with pytest.raises(InputError, match="temperature"):
        abc_log_probs(logits, -1.0)


def test_confidence_margin_handles_minus_infinity_and_matches_softmax():
    logits = torch.tensor([[0.0, -math.inf, -math.inf], [math.log(0.7), math.log(0.2), math.log(0.1)]])
    m = confidence_margin(logits)
    assert m.tolist() == pytest.approx([1.0, 0.5])
    assert confidence_margin(torch.zeros(3, 1)).tolist() == [1.0, 1.0, 1.0]


rows = st.lists(st.floats(-30, 30, allow_nan=False), min_size=2, max_size=12, unique=True)


@settings(max_examples=80, deadline=None)
@given(rows, st.sampled_from(["relu", "elu", "softplus", "linear", "gelu"]), st.floats(0.05, 10),
       st.floats(0.3, 4), st.floats(-2, 1))
def test_monotone_clamps_preserve_the_argmax(row, clamp, s, p, c):
    """Assumption 4.2: M keeps the predicted class when Clamp is strictly increasing where the top logit lands.

    elu, softplus and linear are strictly increasing everywhere; relu only above 0 and GELU only above about
    -0.75 (below, GELU is non-monotone and relu flat), so for those two we need LN(h)_max + c > 0.
    """
    logits = torch.tensor([row], dtype=torch.float64)
    ln = layer_norm(logits)
    top2 = ln.topk(2).values[0]
    if float(top2[0] - top2[1]) < 1e-6:
        return  # numerically tied logits: any argmax is right
    if clamp in ("relu", "gelu") and float(top2[0]) + c <= 0:
        return
    if clamp == "softplus" and float(top2[0]) + c < -30:
        return  # softplus underflows to 0 in float64 far left of 0
    out = rbc_transform(logits, s, p, c, clamp=clamp)
    assert int(out.argmax()) == int(logits.argmax())


def test_gelu_can_change_the_argmax_below_its_minimum():
    """The caveat of Sec. 4.2: GELU is not monotone left of about -0.75. Shift the top class to -1.5 (GELU ~ -0.1):
    the bottom class lands near -3.6, where GELU is ~ -0.0005, and becomes the largest."""
    logits = torch.tensor([[0.0, -0.1, -6.0]], dtype=torch.float64)
    c = -1.5 - float(layer_norm(logits)[0, 0])
    assert int(rbc_transform(logits, 1.0, 1.0, c, clamp="gelu").argmax()) == 2
    assert int(rbc_transform(logits, 1.0, 1.0, c, clamp="elu").argmax()) == 0


# ------------------------------------------------------------------------------------------------ clamps
def test_builtin_clamps_match_their_definitions_in_float64():
    """Eq. 4 clamps: GELU is the exact x * Phi(x) (not the tanh approximation); softplus is log(1 + e^x)
    everywhere, including x well above 1."""
    from mixzoo.methods.mixednuts.transforms import get_clamp

    xs = [-4.0, -2.0, -0.75, -0.1, 0.0, 0.3, 1.0, 2.5, 6.0, 15.0]
    x = torch.tensor(xs, dtype=torch.float64)
    gelu = get_clamp("gelu")(x).tolist()
    softplus = get_clamp("softplus")(x).tolist()
    elu = get_clamp("elu")(x).tolist()
    for v, g, sp, e in zip(xs, gelu, softplus, elu, strict=True):
        assert g == pytest.approx(0.5 * v * (1 + math.erf(v / math.sqrt(2))), abs=1e-12)
        assert sp == pytest.approx(math.log1p(math.exp(v)), abs=1e-9)
        assert e == pytest.approx(v if v > 0 else math.expm1(v), abs=1e-12)
    assert get_clamp("linear")(x).tolist() == xs
