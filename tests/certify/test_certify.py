"""Tests of ``mixzoo.certify``: certified radii of constant-alpha mixtures (paper 001, Bai et al., Lemma 3.2,
Thm 3.5 / Eq. 3.5, Thm A.2, App. C.3).

1. the radius formulas against direct float64 computations (explicit loops, scipy's normal quantile);
2. Lemma 3.2 itself on random probability vectors;
3. soundness of the provable Lipschitz bounds: convolutions against power iteration / the exact matrix norm, each
   layer type against its Jacobian, whole zoo networks against gradient ascent and random pairs;
4. soundness of Lipschitz certificates by attack (a small network trained here, the real digits-std ABC), and the
   same attack finding violations when the constant is deliberately wrong;
5. the same for randomized-smoothing certificates (digits-rs050, sigma 0.5) and a wrong sigma;
6. Monte Carlo: independent of the batch size and of which images are certified together; Clopper-Pearson and
   Hoeffding bounds; ``minimum_samples``;
7. one-line errors that write nothing; 8. the ``mixzoo certify`` command and its files; 9. the gaussian recipes
   and the registry's ``smoothing_sigma``.

Everything runs on CPU with the 8x8 digits models, in one thread (``one_thread``, conftest.py).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from scipy import stats
from torch import nn
from typer.testing import CliRunner

from mixzoo.certify import SmoothingSettings, certify
from mixzoo.certify import run as certify_run
from mixzoo.certify.lipschitz import LAYER_BOUNDS, SOFTMAX_CLASS_LIPSCHITZ, conv2d_operator_norm, lipschitz_bound
from mixzoo.certify.radii import (
    certified_accuracy,
    lipschitz_radius,
    smoothing_lipschitz_constant,
    smoothing_radius,
)
from mixzoo.certify.smoothing import confidence_bounds, minimum_samples, monte_carlo_means, smoothed_estimate
from mixzoo.cli import app
from mixzoo.core.card import MixCard
from mixzoo.core.errors import InputError, RegistryError
from mixzoo.zoo.data import load_dataset
from mixzoo.zoo.models import load_model

pytestmark = pytest.mark.usefixtures("one_thread")

F64 = torch.float64
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@functools.cache
def frozen(name: str) -> nn.Module:
    """A zoo model in eval mode without parameter gradients (attacks only need input gradients)."""
    model = load_model(name).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def digits(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    data = load_dataset("digits", "evaluation", n=n)
    return data.images, data.labels


# ================================================================================================ 1. the formulas
def eq35_loops(probs: list[list[float]], lip: list[list[float]], alpha: float, top: list[int]) -> list[float]:
    """001 Eq. 3.5, one example and one class at a time."""
    out = []
    for row, lrow, y in zip(probs, lip, top, strict=True):
        best = math.inf
        for i in range(len(row)):
            if i != y:
                best = min(best, (alpha * (row[y] - row[i]) + alpha - 1) / (alpha * (lrow[y] + lrow[i])))
        out.append(best)
    return out


@st.composite
def radius_inputs(draw):
    """Random (n, c) probabilities, a Lipschitz constant (scalar, per class or per example and class), alphas in
    [1/2, 1] and a certified class per example (sometimes not the argmax)."""
    c, n = draw(st.integers(2, 6)), draw(st.integers(1, 4))
    raw = [[draw(st.floats(1e-3, 1.0)) for _ in range(c)] for _ in range(n)]
    probs = [[v / sum(row) for v in row] for row in raw]
    kind = draw(st.sampled_from(["scalar", "class", "example"]))
    pos = st.floats(0.05, 20.0)
    if kind == "scalar":
        lip = draw(pos)
        lip_rows, lip_arg = [[lip] * c for _ in range(n)], lip
    elif kind == "class":
        per = [draw(pos) for _ in range(c)]
        lip_rows, lip_arg = [per] * n, torch.tensor(per, dtype=F64)
    else:
        lip_rows = [[draw(pos) for _ in range(c)] for _ in range(n)]
        lip_arg = torch.tensor(lip_rows, dtype=F64)
    alphas = draw(st.lists(st.floats(0.5, 1.0), min_size=1, max_size=3))
    top = draw(st.one_of(st.none(), st.lists(st.integers(0, c - 1), min_size=n, max_size=n)))
    return probs, lip_rows, lip_arg, alphas, top


@FAST
@given(radius_inputs())
def test_lipschitz_radius_is_eq_3_5_computed_class_by_class(inputs):
    probs, lip_rows, lip_arg, alphas, top = inputs
    got = lipschitz_radius(torch.tensor(probs, dtype=F64), lip_arg, alphas,
                           top=None if top is None else torch.tensor(top))
    assert got.shape == (len(alphas), len(probs)) and got.dtype == F64
    y = top if top is not None else [max(range(len(row)), key=row.__getitem__) for row in probs]
    for k, a in enumerate(alphas):
        want = eq35_loops(probs, lip_rows, a, y)
        assert got[k].tolist() == pytest.approx(want, rel=1e-12, abs=1e-14)


@FAST
@given(radius_inputs())
def test_at_alpha_1_eq_3_5_is_the_plain_lipschitz_margin_radius(inputs):
    probs, lip_rows, lip_arg, _, _ = inputs
    got = lipschitz_radius(torch.tensor(probs, dtype=F64), lip_arg, 1.0)[0]
    for j, (row, lrow) in enumerate(zip(probs, lip_rows, strict=True)):
        y = max(range(len(row)), key=row.__getitem__)
        want = min((row[y] - row[i]) / (lrow[y] + lrow[i]) for i in range(len(row)) if i != y)
        assert got[j].item() == pytest.approx(want, rel=1e-12, abs=1e-14)


@FAST
@given(radius_inputs())
def test_radius_is_negative_exactly_when_the_margin_condition_fails(inputs):
    """r < 0 iff alpha (p_y - p_i) + alpha - 1 < 0 for some i (r <= 0 iff <= 0 for some i); equivalently
    (001 after Thm 3.5) alpha <= 1 / (1 + p_y - p_i) for some i gives no certificate."""
    probs, _, lip_arg, alphas, top = inputs
    p = torch.tensor(probs, dtype=F64)
    y = p.argmax(1) if top is None else torch.tensor(top)
    r = lipschitz_radius(p, lip_arg, alphas, top=y)
    for k, a in enumerate(alphas):
        for j, row in enumerate(probs):
            nums = [a * (row[y[j]] - row[i]) + a - 1 for i in range(len(row)) if i != y[j]]
            assert (r[k, j].item() < 0) == any(v < 0 for v in nums)
            assert (r[k, j].item() <= 0) == any(v <= 0 for v in nums)
            thresholds = [1 / (1 + row[y[j]] - row[i]) for i in range(len(row)) if i != y[j]]
            if all(abs(a - t) > 1e-9 for t in thresholds):
                assert (r[k, j].item() <= 0) == any(a <= t for t in thresholds)


@FAST
@given(p_a=st.floats(0.01, 0.999), frac=st.floats(0.0, 1.0), sigma=st.floats(0.05, 3.0),
       alphas=st.lists(st.floats(0.5, 1.0), min_size=1, max_size=3))
def test_smoothing_radius_is_thm_a2_and_cohen_at_alpha_1(p_a, frac, sigma, alphas):
    p_b = frac * (1 - p_a)
    lo, hi = torch.tensor([p_a], dtype=F64), torch.tensor([p_b], dtype=F64)
    got = smoothing_radius(lo, hi, sigma, alphas)[:, 0]
    ppf = stats.norm.ppf
    for k, a in enumerate(alphas):
        want = sigma / 2 * (ppf(a * p_a) - ppf(a * p_b + (1 - a)))
        if want == math.inf:  # p_b = 0 at alpha = 1: Phi^-1(0) = -inf, any radius (stored as the largest float)
            assert got[k].item() >= 1e300
        elif want == -math.inf:  # a * p_b + 1 - a == 1: Phi^-1(1) = inf, nothing certified
            assert got[k].item() == -math.inf
        else:  # also in the tails (p_b ~ 1e-50), where erfinv(2p - 1) would round to -inf
            assert got[k].item() == pytest.approx(want, rel=1e-9, abs=1e-9)
        assert (got[k].item() > 0) == (a * p_a > a * p_b + (1 - a))
    cohen = smoothing_radius(lo, hi, sigma, 1.0)[0, 0].item()
    if p_b > 0:
        assert cohen == pytest.approx(sigma / 2 * (ppf(p_a) - ppf(p_b)), rel=1e-9, abs=1e-9)
    two_class = smoothing_radius(lo, 1 - lo, sigma, 1.0)[0, 0].item()  # p_B = 1 - p_A: Cohen's sigma Phi^-1(p_A)
    assert two_class == pytest.approx(sigma * ppf(p_a), rel=1e-9, abs=1e-9)


@FAST
@given(p_a=st.floats(0.01, 0.999), frac=st.floats(0.0, 1.0), sigma=st.floats(0.05, 3.0), alpha=st.floats(0.5, 1.0))
def test_thm_a2_is_at_least_thm_3_5_with_the_smoothed_models_constant(p_a, frac, sigma, alpha):
    """Phi^-1 has slope >= sqrt(2 pi), so Thm A.2 certifies at least what Thm 3.5 does with sqrt(2/(pi sigma^2))
    (001 App. A.3: "the RS-based bounds certify larger radii")."""
    p_b = frac * (1 - p_a)
    lip = smoothing_lipschitz_constant(sigma)
    assert lip == pytest.approx(math.sqrt(2 / math.pi) / sigma, rel=1e-12)
    r_rs = smoothing_radius(torch.tensor([p_a], dtype=F64), torch.tensor([p_b], dtype=F64), sigma, alpha)[0, 0]
    r_lip = lipschitz_radius(torch.tensor([[p_a, p_b]], dtype=F64), lip, alpha, top=torch.tensor([0]))[0, 0]
    if r_lip > 0:
        assert r_rs.item() >= r_lip.item() * (1 - 1e-9)


@FAST
@given(data=st.data())
def test_certified_accuracy_counts_correct_and_certified_and_never_increases_with_the_radius(data):
    a, n, m = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 12)), data.draw(st.integers(1, 8))
    rad = st.one_of(st.floats(-2.0, 3.0), st.just(-math.inf), st.just(0.0))
    radius = torch.tensor([[data.draw(rad) for _ in range(n)] for _ in range(a)], dtype=F64)
    correct = torch.tensor([data.draw(st.booleans()) for _ in range(n)])
    grid = torch.tensor(sorted(data.draw(st.floats(0.0, 3.0)) for _ in range(m)), dtype=F64)
    acc = certified_accuracy(radius, correct, grid)
    assert acc.shape == (a, m)
    for k in range(a):
        for g in range(m):
            want = sum(bool(correct[j]) and radius[k, j].item() >= grid[g].item() for j in range(n)) / n
            assert acc[k, g].item() == pytest.approx(want, abs=1e-15)
        assert bool((acc[k, :-1] >= acc[k, 1:]).all())  # the grid is sorted up: accuracy never goes up
    grown = radius + torch.tensor([[data.draw(st.floats(0.0, 1.0)) for _ in range(n)] for _ in range(a)], dtype=F64)
    assert bool((certified_accuracy(grown, correct, grid) >= acc).all())  # larger radii never lower it


# =============================================================================================== 2. Lemma 3.2
@st.composite
def lemma_inputs(draw):
    """alpha in [1/2, 1), g any probabilities, h with top class y ahead of every other class by at least
    (1 - alpha) / alpha (plus ``slack``)."""
    c = draw(st.integers(2, 8))
    alpha = draw(st.floats(0.5, 0.999))
    mu = (1 - alpha) / alpha
    y = draw(st.integers(0, c - 1))
    q = [draw(st.floats(0.0, 1.0)) for _ in range(c - 1)]
    q = [v / sum(q) for v in q] if sum(q) > 0 else [1 / (c - 1)] * (c - 1)
    s_max = (1 - mu) / (1 + max(q))  # other mass s: 1 - s >= s max(q) + mu
    s = draw(st.floats(0.0, 1.0)) * s_max
    h = [s * v for v in q]
    h.insert(y, 1 - s)
    g = [draw(st.floats(0.0, 1.0)) for _ in range(c)]
    g = [v / sum(g) for v in g] if sum(g) > 0 else [1 / c] * c
    return alpha, torch.tensor(g, dtype=F64), torch.tensor(h, dtype=F64), y


@FAST
@given(lemma_inputs())
def test_lemma_3_2_the_mixture_follows_an_rbc_with_margin(inputs):
    alpha, g, h, y = inputs
    mu = (1 - alpha) / alpha
    margin = min(h[y] - h[i] for i in range(len(h)) if i != y)
    assert margin >= mu - 1e-12
    for gg in [g, *torch.eye(len(h), dtype=F64)]:  # random ABC, and every one-hot (worst-case) ABC
        mix = torch.log((1 - alpha) * gg + alpha * h)  # 001 Eq. 3.4
        assert bool((mix[y] >= mix - 1e-12).all())
        if margin > mu + 1e-9:
            assert int(mix.argmax()) == y


@FAST
@given(c=st.integers(2, 8), alpha=st.floats(0.5, 0.999), y=st.integers(0, 7), fraction=st.floats(0.0, 0.999))
def test_lemma_3_2_is_tight_a_smaller_margin_lets_some_abc_win(c, alpha, y, fraction):
    """001 after Lemma 3.2: with a margin below (1 - alpha) / alpha, an ABC voting for the runner-up flips it."""
    mu = (1 - alpha) / alpha
    y = y % c
    i, m = (y + 1) % c, fraction * mu
    assume(mu - m > 1e-9)
    h2 = torch.zeros(c, dtype=F64)  # margin m < mu over class i
    h2[y], h2[i] = (1 + m) / 2, (1 - m) / 2
    gi = torch.nn.functional.one_hot(torch.tensor(i), c).to(F64)
    mix = (1 - alpha) * gi + alpha * h2
    assert mix[i] > mix[y]


# ====================================================================================== 3. the Lipschitz bounds
def conv_norm_by_power_iteration(conv: nn.Conv2d, shape: tuple[int, ...], scale=None, iters: int = 80) -> float:
    """||A|| of the real zero-padded conv (float64) by power iteration on A^T A, A^T by autograd."""
    w = conv.weight.detach().double()
    if scale is not None:
        w = w * scale[:, None, None, None]

    def a(x):
        return F.conv2d(x, w, None, conv.stride, conv.padding)

    x = torch.randn(shape, dtype=F64, generator=torch.Generator().manual_seed(1))
    for _ in range(iters):
        x = x.detach().requires_grad_(True)
        out = a(x)
        (ata,) = torch.autograd.grad(out, x, grad_outputs=out)
        if float(ata.norm()) == 0:  # the conv only ever reads padding (e.g. 1x1, stride 2, padding 1 on 1x1)
            return 0.0
        x = ata / ata.norm()
    with torch.no_grad():
        return float(a(x).norm() / x.norm())


def conv_norm_exact(conv: nn.Conv2d, shape: tuple[int, ...], scale=None) -> float:
    """The largest singular value of the conv's explicit matrix (small inputs only)."""
    w = conv.weight.detach().double()
    if scale is not None:
        w = w * scale[:, None, None, None]
    jac = torch.autograd.functional.jacobian(lambda x: F.conv2d(x, w, None, conv.stride, conv.padding),
                                             torch.zeros(shape, dtype=F64), vectorize=True)
    return float(torch.linalg.matrix_norm(jac.reshape(-1, math.prod(shape)), ord=2))


@st.composite
def convs(draw):
    c_in, c_out = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    k = draw(st.sampled_from([1, 3, 5]))
    pad = draw(st.integers(0, k + 1))
    stride = draw(st.sampled_from([1, 2]))
    low = max(1, k - 2 * pad)
    h, w = draw(st.integers(low, 9)), draw(st.integers(low, 9))
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    conv = nn.Conv2d(c_in, c_out, k, stride=stride, padding=pad, bias=draw(st.booleans()))
    with torch.no_grad():
        conv.weight.copy_(torch.randn(conv.weight.shape, generator=gen))
    scale = torch.randn(c_out, generator=gen, dtype=F64) if draw(st.booleans()) else None
    return conv, (1, c_in, h, w), scale


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(convs())
def test_conv_bound_is_at_least_the_true_operator_norm(case):
    conv, shape, scale = case
    bound = conv2d_operator_norm(conv, shape[-2:], scale)
    exact = conv_norm_exact(conv, shape, scale)
    power = conv_norm_by_power_iteration(conv, shape, scale)
    assert power <= exact * (1 + 1e-9)  # the power iteration is a lower bound of the exact norm ...
    assert bound >= exact * (1 - 1e-9)  # ... and the certified bound an upper one
    assert bound >= power * (1 - 1e-9)
    w = conv.weight.detach().double() * (1 if scale is None else scale[:, None, None, None])
    taps = sum(float(torch.linalg.matrix_norm(w[:, :, i, j], ord=2))
               for i in range(w.shape[2]) for j in range(w.shape[3]))
    assert bound <= taps * (1 + 1e-9)  # triangle inequality over kernel taps: the bound is not gratuitous


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(c_in=st.integers(1, 6), c_out=st.integers(1, 6), hw=st.integers(1, 7), pad=st.integers(0, 2),
       stride=st.sampled_from([1, 2]), seed=st.integers(0, 2**31 - 1))
def test_1x1_conv_bound_is_the_channel_matrix_norm(c_in, c_out, hw, pad, stride, seed):
    conv = nn.Conv2d(c_in, c_out, 1, stride=stride, padding=pad)
    with torch.no_grad():
        conv.weight.copy_(torch.randn(conv.weight.shape, generator=torch.Generator().manual_seed(seed)))
    want = float(torch.linalg.svdvals(conv.weight.detach().double()[:, :, 0, 0])[0])
    assert conv2d_operator_norm(conv, (hw, hw)) == pytest.approx(want, rel=1e-6)
    out = (hw + 2 * pad - 1) // stride + 1
    if any(0 <= o * stride - pad < hw for o in range(out)):  # some output reads a pixel, not only padding
        assert conv_norm_exact(conv, (1, c_in, hw, hw)) == pytest.approx(want, rel=1e-6)


def test_conv_bound_is_tight_for_a_nonnegative_kernel():
    """A nonnegative kernel's largest frequency response is at frequency 0 (the sum of its weights), and a
    fully padded conv on a large image comes close to it: the bound is not a constant factor too large."""
    conv = nn.Conv2d(1, 1, 3, padding=2, bias=False)
    with torch.no_grad():
        conv.weight.copy_(torch.rand(conv.weight.shape, generator=torch.Generator().manual_seed(3)))
    total = float(conv.weight.detach().double().sum())
    assert conv2d_operator_norm(conv, (24, 24)) == pytest.approx(total, rel=1e-9)
    assert conv_norm_by_power_iteration(conv, (1, 1, 24, 24), iters=200) >= 0.95 * total


def layer_lipschitz_estimate(layer: nn.Module, shape: tuple[int, ...], tries: int = 60) -> float:
    """The largest Jacobian spectral norm of ``layer`` over random inputs (a lower bound of its l2 constant)."""
    gen = torch.Generator().manual_seed(0)
    best = 0.0
    for k in range(tries):
        x = torch.randn(shape, generator=gen, dtype=F64) * (0.02 if k % 2 else 3.0)  # near 0 and spread out
        jac = torch.autograd.functional.jacobian(layer, x).reshape(-1, x.numel())
        best = max(best, float(torch.linalg.matrix_norm(jac, ord=2)))
    return best


def _bn2d() -> nn.BatchNorm2d:
    bn = nn.BatchNorm2d(3).double().eval()
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        bn.running_var.copy_(torch.rand(3, generator=gen, dtype=F64) + 0.05)
        bn.running_mean.copy_(torch.randn(3, generator=gen, dtype=F64))
        bn.weight.copy_(torch.randn(3, generator=gen, dtype=F64) * 2)
    return bn


LAYERS = [
    (nn.ReLU(), (1, 12)), (nn.Tanh(), (1, 12)), (nn.ELU(), (1, 12)), (nn.ELU(alpha=2.5), (1, 12)),
    (nn.LeakyReLU(), (1, 12)), (nn.LeakyReLU(negative_slope=3.0), (1, 12)), (nn.LeakyReLU(-2.0), (1, 12)),
    (nn.Linear(7, 5).double(), (1, 7)), (_bn2d(), (1, 3, 2, 2)),
    (nn.MaxPool2d(2), (1, 2, 6, 6)), (nn.MaxPool2d(3, stride=1, padding=1), (1, 1, 5, 5)),
    (nn.MaxPool2d(3, stride=2, dilation=2), (1, 1, 9, 9)), (nn.MaxPool2d(2, ceil_mode=True), (1, 1, 5, 5)),
    (nn.AvgPool2d(2), (1, 2, 6, 6)), (nn.AvgPool2d(3, stride=1, padding=1), (1, 1, 5, 5)),
    (nn.AvgPool2d(2, padding=1, count_include_pad=False), (1, 1, 4, 4)),
    (nn.AvgPool2d(2, ceil_mode=True), (1, 1, 3, 3)), (nn.AvgPool2d(2, divisor_override=1), (1, 1, 4, 4)),
]


@pytest.mark.parametrize(("layer", "shape"), LAYERS, ids=[repr(m) for m, _ in LAYERS])
def test_every_layer_bound_is_at_least_the_layers_jacobian_norm(layer, shape):
    """LAYER_BOUNDS entries are certificates too: no input may have a Jacobian larger than the layer's bound
    (leaky slopes and ELU alphas above 1, pooling windows that average fewer values or overlap more)."""
    bound = LAYER_BOUNDS[type(layer)](layer)
    assert layer_lipschitz_estimate(layer, shape) <= bound * (1 + 1e-9)


def test_a_single_linear_layer_attains_the_softmax_constant():
    """Two classes with logits w.x and -w.x: at x = 0 both probabilities are 1/2 and the gradient of each is w/2,
    norm ||w|| / 2, which is the bound sqrt(2)/4 ||W||_2 exactly (W = [w; -w] has norm sqrt(2) ||w||): the softmax
    factor sqrt(2)/4 cannot be made smaller."""
    lin = nn.Linear(64, 2, bias=False)
    w = torch.randn(64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        lin.weight.copy_(torch.stack([w, -w]))
    model = nn.Sequential(nn.Flatten(), lin)
    bound = lipschitz_bound(model, (1, 8, 8))
    x = torch.zeros(1, 1, 8, 8, requires_grad=True)
    (grad,) = torch.autograd.grad(model(x).softmax(1)[0, 0], x)
    assert bound.probs == pytest.approx(float(grad.norm()), rel=1e-5)
    assert bound.probs == pytest.approx(float(w.norm()) / 2, rel=1e-5)
    assert SOFTMAX_CLASS_LIPSCHITZ == pytest.approx(math.sqrt(2) / 4)


@pytest.mark.parametrize("name", ["digits-pgd", "digits-rs050"])
def test_whole_network_bound_exceeds_every_gradient_and_difference_quotient_found(name):
    model = frozen(name)
    bound = lipschitz_bound(model, (1, 8, 8))
    assert bound.probs == pytest.approx(SOFTMAX_CLASS_LIPSCHITZ * math.prod(f for _, f in bound.layers), rel=1e-9)
    assert lipschitz_bound(model, (1, 8, 8), "linf").probs == pytest.approx(8 * bound.probs, rel=1e-12)
    gen = torch.Generator().manual_seed(0)
    images, _ = digits(12)
    x0 = torch.cat([images, torch.rand(12, 1, 8, 8, generator=gen), torch.randn(12, 1, 8, 8, generator=gen) * 2])
    c = 10
    x = x0.repeat_interleave(c, 0)
    cls = torch.arange(c).repeat(len(x0))
    best = 0.0
    for _ in range(40):  # gradient ascent on ||grad_x p_i(x)||, every class from every start
        x = x.detach().requires_grad_(True)
        p = model(x).softmax(1).gather(1, cls[:, None]).sum()
        (grad,) = torch.autograd.grad(p, x, create_graph=True)
        norms = grad.flatten(1).norm(dim=1)
        best = max(best, float(norms.detach().max()))
        (step,) = torch.autograd.grad(norms.sum(), x)
        with torch.no_grad():
            x = x + 0.05 * step / step.flatten(1).norm(dim=1).clamp_min(1e-12).view(-1, 1, 1, 1)
    assert 0 < best <= bound.probs
    xa = torch.rand(1000, 1, 8, 8, generator=gen) * 1.5 - 0.25
    xb = xa + torch.randn(xa.shape, generator=gen) * torch.rand(1000, 1, 1, 1, generator=gen) * 0.5
    with torch.no_grad():
        diff = (model(xa).softmax(1).double() - model(xb).softmax(1).double()).abs().amax(1)
    quotient = diff / (xa - xb).double().flatten(1).norm(dim=1)
    assert 0 < float(quotient.max()) <= bound.probs


# ================================================================== 4. Lipschitz certificates against an attack
@pytest.fixture(scope="module")
def tiny_rbc():
    """A one-hidden-layer network on digits, weight decay for a small provable constant (seconds to train)."""
    train = load_dataset("digits", "train")
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
        opt = torch.optim.Adam(model.parameters(), lr=0.05)
        for _ in range(300):
            loss = F.cross_entropy(model(train.images), train.labels)
            loss = loss + 1e-3 * sum((p**2).sum() for p in model.parameters() if p.dim() > 1)
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def l2_pgd_flips(mixture, x: torch.Tensor, y: torch.Tensor, radius: torch.Tensor, steps: int = 50,
                 restarts: int = 3, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """l2 PGD on the margin ``max_{i != y} q_i - q_y`` of ``mixture(x) -> probabilities``, each example within its
    own radius (no [0, 1] clipping: the certificates hold in all of R^d). Returns whether any iterate changed the
    prediction, the best margin and the point with the best margin."""
    gen = torch.Generator().manual_seed(seed)
    r = radius.to(x.dtype).view(-1, 1, 1, 1)
    flipped = torch.zeros(len(x), dtype=torch.bool)
    best = torch.full((len(x),), -math.inf)
    best_x = x.clone()
    for k in range(restarts):
        d = torch.randn(x.shape, generator=gen)
        d = d / d.flatten(1).norm(dim=1).view(-1, 1, 1, 1) * r * (0.5 if k else 0.0)
        for s in range(steps + 1):
            d = d.detach().requires_grad_(True)
            q = mixture(x + d)
            margin = q.scatter(1, y[:, None], -1.0).amax(1) - q.gather(1, y[:, None]).squeeze(1)
            with torch.no_grad():
                flipped |= q.argmax(1) != y
                better = margin > best
                best = torch.where(better, margin, best)
                best_x[better] = (x + d)[better]
            if s == steps:
                break
            (grad,) = torch.autograd.grad(margin.sum(), d)
            with torch.no_grad():
                d = d + 2.5 * r / steps * grad / grad.flatten(1).norm(dim=1).clamp_min(1e-12).view(-1, 1, 1, 1)
                d = d * (r / d.flatten(1).norm(dim=1).clamp_min(1e-12).view(-1, 1, 1, 1)).clamp(max=1.0)
    return flipped, best, best_x.detach()


def certified_points(result, alpha: float, bounds: tuple[str, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices certified with a positive radius at ``alpha`` and the largest radius any of ``bounds`` gives."""
    curves = [c for c in result.certified_curves if c.alpha == alpha and c.bound in bounds]
    assert curves
    radius = torch.tensor([max((c.radius[j] or 0.0) for c in curves) for j in range(len(curves[0].radius))],
                          dtype=F64)
    idx = torch.nonzero(radius > 0).flatten()
    return idx, radius[idx]


@pytest.mark.parametrize(("divisor", "least_flips"), [(1, 0), (5, 3), (20, 20)])
def test_lipschitz_certificates_survive_l2_pgd_and_a_wrong_constant_does_not(tiny_rbc, monkeypatch, divisor,
                                                                            least_flips):
    """001 Thm 3.5 with the provable bound: no attack within a certified radius changes the mixture's prediction
    (the real digits-std ABC, softmax at temperature 1: Lemma 3.2 holds for any ABC). With the constant divided
    by ``divisor`` the radii are wrong, and the same attack must find violations (so this test can fail). This
    network's bound is only ~3x loose (the attack breaks bound / 3 at alpha 1), so the attack is a sharp check."""
    if divisor != 1:
        real = certify_run.lipschitz_bound
        monkeypatch.setattr(certify_run, "lipschitz_bound",
                            lambda *a, **k: dataclasses.replace(real(*a, **k), probs=real(*a, **k).probs / divisor))
    images, labels = digits(40)
    result = certify(rbc=tiny_rbc, abc="digits-std", alphas=[0.8], n=40, dataset="digits", progress=False)
    abc = frozen("digits-std")
    for alpha in (1.0, 0.8):
        idx, radius = certified_points(result, alpha, ("lipschitz",))
        assert len(idx) >= 20 and float(radius.median()) > 0.05 * divisor  # non-trivial radii

        def mixture(x, alpha=alpha):
            return (1 - alpha) * abc(x).softmax(1) + alpha * tiny_rbc(x).softmax(1)

        flipped, best, _ = l2_pgd_flips(mixture, images[idx], labels[idx], radius)
        if divisor == 1:
            assert not bool(flipped.any()), f"alpha {alpha}: certified images {idx[flipped].tolist()} attacked"
            assert float(best.max()) < 0
        else:
            assert int(flipped.sum()) >= least_flips, f"alpha {alpha}: a constant {divisor}x too small went unnoticed"


# ========================================================= 5. randomized-smoothing certificates against an attack
@pytest.mark.slow
@pytest.mark.parametrize("sigma_factor", [1, 5])
def test_smoothing_certificates_survive_l2_pgd_and_a_wrong_sigma_does_not(monkeypatch, sigma_factor):
    """digits-rs050 (sigma 0.5), 2,000 samples: PGD on the Monte Carlo mixture (fixed noise draws, l2 ball of the
    larger of the Thm A.2 / Thm 3.5 radii), then 20,000 fresh samples at the attacked point: the smoothed mixture
    still predicts the certified class. Radii computed for sigma x 5 must be broken on some image."""
    if sigma_factor != 1:
        monkeypatch.setattr(certify_run, "smoothing_radius",
                            lambda lo, hi, sigma, alphas: smoothing_radius(lo, hi, sigma * sigma_factor, alphas))
    alpha, sigma, n = 0.8, 0.5, 10
    images, labels = digits(n)
    result = certify(rbc="digits-rs050", abc="digits-std", alphas=[alpha], n=n,
                     smoothing=SmoothingSettings(samples=2000, selection_samples=100),
                     progress=False)
    assert result.settings["sigma"] == sigma
    idx, radius = certified_points(result, alpha, ("smoothing", "smoothing-lipschitz"))
    assert len(idx) >= 5
    rbc, abc = frozen("digits-rs050"), frozen("digits-std")
    x, y = images[idx], labels[idx]  # a curve certifies only correct images: the certified class is the label
    draws = 128
    noise = torch.randn((len(x), draws, 1, 8, 8), generator=torch.Generator().manual_seed(7)) * sigma

    def smoothed_mixture(z):
        smooth = rbc((z[:, None] + noise).flatten(0, 1)).softmax(1).view(len(z), draws, -1).mean(1)
        return (1 - alpha) * abc(z).softmax(1) + alpha * smooth

    _, _, attacked = l2_pgd_flips(smoothed_mixture, x, y, radius, steps=40, restarts=2, seed=1)
    assert bool(((attacked - x).flatten(1).norm(dim=1).double() <= radius * (1 + 1e-5)).all())
    fresh = monte_carlo_means(rbc, attacked, sigma, 20_000, kinds=("soft",), seed=12345, progress=False)["soft"]
    with torch.no_grad():
        mix = (1 - alpha) * abc(attacked).softmax(1).double() + alpha * fresh
    changed = mix.argmax(1) != y
    if sigma_factor == 1:
        assert not bool(changed.any()), f"certified images {idx[changed].tolist()} attacked"
    else:
        assert bool(changed.any()), "radii for a sigma 5x too large went unnoticed"


def half_space_rbc() -> tuple[nn.Module, torch.Tensor, float]:
    """A 10-class linear model whose hard prediction is the half-space ``w.x + b > 0`` (class 0, else class 1;
    the other classes never win): its Gaussian smoothing is known exactly, p_0(x) = Phi((w.x + b) / (sigma ||w||)),
    and Cohen's / Thm A.2's radius at alpha 1 is then the distance to the hyperplane (tight)."""
    train = load_dataset("digits", "train")
    m0 = train.images[train.labels == 0].mean(0).flatten()
    m1 = train.images[train.labels == 1].mean(0).flatten()
    w = m0 - m1
    b = -float(w @ (m0 + m1) / 2)
    lin = nn.Linear(64, 10)
    with torch.no_grad():
        lin.weight.zero_()
        lin.bias.fill_(-1e4)
        lin.weight[0], lin.weight[1] = w, -w
        lin.bias[0], lin.bias[1] = b, -b
    return nn.Sequential(nn.Flatten(), lin), w, b


@pytest.mark.parametrize("sigma_factor", [1.0, 1.1])
def test_smoothing_radii_against_the_exact_radius_of_a_half_space(monkeypatch, sigma_factor):
    """Sharp, deterministic soundness check of the whole smoothing pipeline (hard votes, Clopper-Pearson): the
    certified radius never exceeds the exact one (the distance d to the hyperplane at alpha 1; for the mixture,
    d - sigma Phi^-1(1 / (2 alpha)), where the smoothed p_0 falls to 1 / (2 alpha) and an ABC voting for class 1
    wins), and Thm A.2 at alpha 1 reaches over 90% of d with 20,000 samples. A sigma only 10% too large in the
    radius formula must already be caught."""
    if sigma_factor != 1.0:
        monkeypatch.setattr(certify_run, "smoothing_radius",
                            lambda lo, hi, sigma, alphas: smoothing_radius(lo, hi, sigma * sigma_factor, alphas))
    model, w, b = half_space_rbc()
    sigma, n = 1.0, 60
    images, labels = digits(n)
    dist = ((images.flatten(1) @ w + b) / w.norm()).double().abs()
    mc = monte_carlo_means(model, images[:10], sigma, 20_000, kinds=("hard",), seed=3, progress=False)["hard"][:, 0]
    exact = torch.from_numpy(stats.norm.cdf(((images[:10].flatten(1) @ w + b) / (sigma * w.norm())).numpy()))
    assert torch.allclose(mc, exact.double(), atol=0.015)  # the smoothed model is what the formulas assume
    result = certify(rbc=model, abc="digits-std", dataset="digits",
                     smoothing=SmoothingSettings(sigma=sigma, samples=20_000, kind="hard"), alphas=[0.8], n=n,
                     progress=False)
    over = []
    for c in result.certified_curves:
        idx = [j for j, r in enumerate(c.radius) if r is not None]
        assert len(idx) >= 8 and all(int(labels[j]) in (0, 1) for j in idx)
        radius = torch.tensor([c.radius[j] for j in idx], dtype=F64)
        exact_radius = dist[idx] - sigma * stats.norm.ppf(1 / (2 * c.alpha))
        over += [(c.label, j) for j, r, e in zip(idx, radius.tolist(), exact_radius.tolist(), strict=True)
                 if r > e * (1 + 1e-9)]
        if c.alpha == 1.0 and c.bound == "smoothing" and sigma_factor == 1.0:
            assert float((radius / exact_radius).min()) > 0.9
    if sigma_factor == 1.0:
        assert not over, f"certified radii beyond the exact ones: {over}"
    else:
        assert over, "radii from a sigma 10% too large went unnoticed"


# ================================================================================================ 6. Monte Carlo
@pytest.mark.parametrize("kind", ["hard", "soft"])
def test_monte_carlo_does_not_depend_on_batch_size_or_on_the_other_images(kind):
    rbc = frozen("digits-rs050")
    images, _ = digits(20)
    settings = SmoothingSettings(sigma=0.5, samples=300, selection_samples=50, kind=kind)
    small = smoothed_estimate(rbc, images[:10], settings, batch_size=64, progress=False)
    large = smoothed_estimate(rbc, images[:10], settings, batch_size=1000, progress=False)
    wide = smoothed_estimate(rbc, images, settings, batch_size=1000, progress=False)
    tail = smoothed_estimate(rbc, images[5:10], settings, batch_size=64, first_index=5, progress=False)
    pairs = [(small, slice(None), slice(None)), (wide, slice(0, 10), slice(None)), (tail, slice(None), slice(5, 10))]
    for est, own, ref in pairs:  # each against batch_size 1000 on images 0..9
        assert torch.equal(est.top[own], large.top[ref])
        for field in ("mean", "p_top_lower", "p_other_upper"):
            got, want = getattr(est, field)[own], getattr(large, field)[ref]
            if kind == "hard":
                assert torch.equal(got, want), field
            else:
                assert torch.allclose(got, want, rtol=0, atol=1e-9), field
    other_seed = smoothed_estimate(rbc, images[:10], settings, seed=1, progress=False)
    assert not torch.equal(other_seed.mean, large.mean)  # the seed does change the draws


def test_certify_gives_each_image_the_same_radius_whatever_n_and_batch_size():
    common = dict(rbc="digits-rs050", abc="digits-std", alphas=[0.8],
                  smoothing=SmoothingSettings(samples=300, selection_samples=30),
                  progress=False)
    ten = certify(n=10, batch_size=64, **common)
    twenty = certify(n=20, batch_size=1000, **common)
    assert len(ten.curves) == len(twenty.curves) == 4
    for a, b in zip(ten.curves, twenty.curves, strict=True):
        assert (a.label, a.bound) == (b.label, b.bound)
        assert a.radius == b.radius[:10]
    assert any(r is not None for c in ten.curves for r in c.radius)


@FAST
@given(data=st.data())
def test_clopper_pearson_bounds_match_scipy(data):
    c = data.draw(st.integers(2, 10))
    samples = data.draw(st.integers(1, 400))
    cuts = sorted(data.draw(st.integers(0, samples)) for _ in range(c - 1))
    counts = [b - a for a, b in zip([0, *cuts], [*cuts, samples], strict=True)]
    top = data.draw(st.integers(0, c - 1))
    confidence = data.draw(st.sampled_from([0.9, 0.99, 0.999]))
    mean = torch.tensor([counts], dtype=F64) / samples
    lo, hi = confidence_bounds(mean, torch.tensor([top]), samples, confidence, "hard")
    delta = 1 - confidence
    d_top, d_other = delta / 2, delta / (2 * (c - 1))
    k = counts[top]
    want_lo = stats.binomtest(k, samples).proportion_ci(1 - 2 * d_top, method="exact").low
    assert lo.item() == pytest.approx(want_lo, abs=1e-9)
    if 0 < k:  # the definition: P(Bin(n, lo) >= k) = d_top
        assert stats.binom.sf(k - 1, samples, lo.item()) == pytest.approx(d_top, rel=1e-6)
    uppers = [stats.binomtest(v, samples).proportion_ci(1 - 2 * d_other, method="exact").high
              for i, v in enumerate(counts) if i != top]
    assert hi.item() == pytest.approx(min(max(uppers), 1 - want_lo), abs=1e-9)
    j = max((i for i in range(c) if i != top), key=lambda i: counts[i])
    if counts[j] < samples and max(uppers) < 1 - want_lo:  # P(Bin(n, hi) <= k_j) = d_other
        assert stats.binom.cdf(counts[j], samples, hi.item()) == pytest.approx(d_other, rel=1e-6)


@FAST
@given(data=st.data())
def test_hoeffding_bounds_formula(data):
    c = data.draw(st.integers(2, 10))
    n = data.draw(st.integers(1, 3))
    samples = data.draw(st.integers(1, 100_000))
    confidence = data.draw(st.floats(0.5, 0.99999))
    raw = torch.tensor([[data.draw(st.floats(0.0, 1.0)) for _ in range(c)] for _ in range(n)], dtype=F64) + 1e-9
    mean = raw / raw.sum(1, keepdim=True)
    top = torch.tensor([data.draw(st.integers(0, c - 1)) for _ in range(n)])
    lo, hi = confidence_bounds(mean, top, samples, confidence, "soft")
    delta = 1 - confidence
    for j in range(n):
        row, y = mean[j].tolist(), int(top[j])
        want_lo = min(1.0, max(0.0, row[y] - math.sqrt(math.log(2 / delta) / (2 * samples))))
        other = max(v for i, v in enumerate(row) if i != y)
        want_hi = min(1.0, max(0.0, other + math.sqrt(math.log(2 * (c - 1) / delta) / (2 * samples))), 1 - want_lo)
        assert lo[j].item() == pytest.approx(want_lo, abs=1e-12)
        assert hi[j].item() == pytest.approx(want_hi, abs=1e-12)


@pytest.mark.parametrize("kind", ["hard", "soft"])
def test_confidence_bounds_cover_the_true_probabilities(kind):
    """Direct check by simulation: Bernoulli(0.7) votes for the top class, 0.2 and 0.1 for two others; the lower
    bound misses 0.7 no more often than its share d_top of the error budget."""
    gen = torch.Generator().manual_seed(0)
    trials, samples, confidence = 20_000, 60, 0.9
    votes = torch.multinomial(torch.tensor([0.7, 0.2, 0.1]), trials * samples, replacement=True, generator=gen)
    counts = F.one_hot(votes.view(trials, samples), 3).sum(1).to(F64)
    lo, hi = confidence_bounds(counts / samples, torch.zeros(trials, dtype=torch.long), samples, confidence, kind)
    d_top = (1 - confidence) / 2
    assert float((lo > 0.7).double().mean()) <= d_top + 0.005
    assert float((hi < 0.2).double().mean()) <= (1 - confidence) / 2 + 0.005
    assert float(((lo > 0.7) | (hi < 0.2)).double().mean()) <= 1 - confidence


def _certifies(m: int, classes: int, confidence: float, kind: str, alpha: float) -> bool:
    """A unanimous vote over ``m`` samples certifies something at ``alpha`` (closed-form bounds)."""
    delta = 1 - confidence
    d_top, d_other = delta / 2, delta / (2 * (classes - 1))
    if kind == "soft":
        lo = max(0.0, 1 - math.sqrt(math.log(1 / d_top) / (2 * m)))
        hi = min(1.0, math.sqrt(math.log(1 / d_other) / (2 * m)))
    else:  # Clopper-Pearson with k = m (top) and k = 0 (others)
        lo = d_top ** (1 / m)
        hi = 1 - d_other ** (1 / m)
    hi = min(hi, 1 - lo)
    return alpha * lo > alpha * hi + 1 - alpha


@pytest.mark.parametrize("kind", ["soft", "hard"])
@pytest.mark.parametrize(("classes", "confidence", "alpha"),
                         [(10, 0.999, 0.8), (10, 0.999, 1.0), (2, 0.9, 0.6), (100, 0.99999, 0.75), (10, 0.999, 0.55)])
def test_minimum_samples_is_the_smallest_that_certifies(kind, classes, confidence, alpha):
    m = minimum_samples(classes, confidence, kind, alpha)
    assert isinstance(m, int) and m >= 1
    assert _certifies(m, classes, confidence, kind, alpha)
    assert m == 1 or not _certifies(m - 1, classes, confidence, kind, alpha)


def test_minimum_samples_at_alpha_one_half_is_infinite():
    assert minimum_samples(10, 0.999, "hard", 0.5) == math.inf
    assert minimum_samples(10, 0.999, "soft", 0.5) == math.inf


# ===================================================================================================== 7. errors
def one_line_error(result) -> str:
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


MIXEDNUTS_CARD = str(Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "cards" / "fmnist_mixednuts.toml")


@pytest.mark.parametrize(("args", "expected"), [
    (["--rbc", "digits-pgd", "--abc", "digits-std", "--alpha", "0.4"], "alpha 0.4 is outside [1/2, 1]"),
    (["--rbc", "digits-rs050", "--sigma", "0", "--n", "5"], "sigma must be a positive number"),
    (["--rbc", "digits-rs050", "--sigma=-0.5", "--n", "5"], "sigma must be a positive number"),
    (["--rbc", "digits-rs050", "--norm", "linf", "--n", "5"], "randomized smoothing certifies l2 radii"),
    (["--rbc", "digits-rs050", "--abc", "digits-std", "--alpha", "0.8", "--smoothing", "soft", "--samples", "27",
          "--n", "5"],
     f"use --samples {minimum_samples(10, 0.999, 'soft', 0.8)} or more"),
    (["--rbc", "digits-rs050", "--smoothing", "hard", "--samples", "10", "--n", "5"],
     f"use --samples {minimum_samples(10, 0.999, 'hard', 1.0)} or more"),
    (["--rbc", "digits-pgd", "--norm", "l1", "--n", "5"], "unknown norm 'l1'"),
    ([MIXEDNUTS_CARD, "--n", "5"], "no certified radius"),
    (["--rbc", "digits-rs050", "--confidence", "1.5", "--n", "5"], "confidence must be in (0, 1)"),
    (["--rbc", "digits-rs050", "--abc", "digits-std", "--alpha", "0.5", "--n", "5"], "alpha 0.5 certifies nothing"),
    (["--rbc", "digits-pgd", "--n", "0"], "n must be a positive number"),
], ids=["alpha", "sigma0", "sigma-neg", "linf-smoothing", "samples-soft", "samples-hard", "norm", "mixednuts",
        "confidence", "alpha-half-smoothing", "n0"])
def test_cli_errors_are_one_line_and_write_nothing(tmp_path, args, expected):
    out = tmp_path / "out"
    message = one_line_error(CliRunner().invoke(app, ["certify", *args, "--out", str(out)]))
    assert expected in message
    assert not out.exists()


def test_an_output_path_that_is_a_file_is_refused_before_any_work(tmp_path):
    target = tmp_path / "taken"
    target.write_text("keep")
    message = one_line_error(CliRunner().invoke(app, ["certify", "--rbc", "digits-pgd", "--out", str(target)]))
    assert "is a file; pass a directory path" in message and target.read_text() == "keep"


def test_the_minimum_samples_message_is_exact():
    """28 samples (the minimum at alpha 0.8, soft, confidence 0.999) are accepted, 27 refused."""
    need = minimum_samples(10, 0.999, "soft", 0.8)
    assert need == 28
    common = dict(rbc="digits-rs050", abc="digits-std", alphas=[0.8], n=2, progress=False)
    certify(smoothing=SmoothingSettings(samples=need, kind="soft"), **common)
    with pytest.raises(InputError, match=f"--samples {need} or more"):
        certify(smoothing=SmoothingSettings(samples=need - 1, kind="soft"), **common)


class ChainLiar(nn.Module):
    """Its forward doubles the logits its lipschitz_layers() compute."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))

    def lipschitz_layers(self):
        return list(self.net)

    def forward(self, x):
        return 2 * self.net(x)


@pytest.mark.parametrize(("model", "expected"), [
    (nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.Softplus(), nn.Linear(16, 10)),
     "no Lipschitz bound for layer Softplus; add its l2 operator norm to mixzoo.certify.lipschitz.LAYER_BOUNDS"),
    (ChainLiar(), "do not compose to its forward"),
], ids=["unknown-layer", "wrong-chain"])
def test_unboundable_networks_are_refused_in_one_line(tmp_path, model, expected):
    out = tmp_path / "out"
    with pytest.raises(InputError) as err:
        certify(rbc=model, dataset="digits", n=5, out=out, progress=False)
    assert expected in str(err.value) and "\n" not in str(err.value)
    assert not out.exists()


# ==================================================================================================== 8. the CLI
def _is_png(path) -> bool:
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_certifies_a_smoothed_rbc_and_writes_json_markdown_png(tmp_path):
    out = tmp_path / "rs"
    result = CliRunner().invoke(app, ["certify", "--rbc", "digits-rs050", "--abc", "digits-std", "--alpha", "0.8",
                                      "--n", "20", "--samples", "500", "--out", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads((out / "certify.json").read_text())
    assert data["estimated"] == []
    assert data["settings"]["mode"] == "randomized smoothing" and data["settings"]["sigma"] == 0.5
    assert data["settings"]["samples"] == 500 and data["settings"]["n"] == 20
    curves = data["certified"]
    assert {(c["alpha"], c["bound"]) for c in curves} == {(a, b) for a in (1.0, 0.8)
                                                          for b in ("smoothing", "smoothing-lipschitz")}
    for c in curves:
        assert c["certified"] is True and len(c["radius"]) == 20 and len(c["accuracy"]) == len(c["radii"])
        assert all(x >= y for x, y in zip(c["accuracy"][:-1], c["accuracy"][1:], strict=True))
        assert any(r is not None and r > 0 for r in c["radius"])
    assert "Thm A.2" in (out / "certify.md").read_text()
    assert _is_png(out / "certify.png") and not (out / "estimated.png").exists()


def test_cli_certifies_a_linear_card_at_its_alpha(tmp_path):
    card = MixCard("linear", {"alpha": 0.8, "temperature": 1.0, "fit": "given"}, abc={"name": "digits-std"},
                   rbc={"name": "digits-pgd"}, dataset="digits").save(tmp_path / "lin.toml")
    out = tmp_path / "lin"
    result = CliRunner().invoke(app, ["certify", str(card), "--n", "20", "--out", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads((out / "certify.json").read_text())
    s = data["settings"]
    assert s["alphas"] == [1.0, 0.8] and s["abc"] == "digits-std" and s["rbc"] == "digits-pgd"
    assert s["card"].endswith("lin.toml") and s["abc_temperature"] == 1.0 and s["mode"] == "Lipschitz"
    assert {(c["alpha"], c["bound"]) for c in data["certified"]} == {(1.0, "lipschitz"), (0.8, "lipschitz")}
    assert s["lipschitz"]["kind"] == "provable upper bound"
    assert s["lipschitz"]["probs"] == pytest.approx(lipschitz_bound(frozen("digits-pgd"), (1, 8, 8)).probs)


def test_cli_estimates_are_kept_out_of_the_certified_results(tmp_path):
    out = tmp_path / "est"
    result = CliRunner().invoke(app, ["certify", "--rbc", "digits-pgd", "--norm", "linf", "--estimate", "0.05,0.1",
                                      "--n", "20", "--out", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads((out / "certify.json").read_text())
    assert data["certified"] and data["estimated"]
    assert all(c["bound"] == "lipschitz" and c["certified"] is True for c in data["certified"])
    assert all(c["bound"] == "estimated" and c["certified"] is False for c in data["estimated"])
    assert all("estimated" not in c["label"] for c in data["certified"])
    assert all(c["radii"] == [0.0, 0.05, 0.1] for c in data["estimated"])
    assert _is_png(out / "estimated.png") and _is_png(out / "certify.png")
    assert "ESTIMATED" in (out / "certify.md").read_text()


def test_certify_png_draws_only_certified_curves():
    result = certify(rbc="digits-pgd", norm="linf", estimate=[0.05, 0.1], n=10, progress=False)
    assert result.estimated_curves
    figure = result.figure()
    labels = figure.axes[0].get_legend_handles_labels()[1]
    assert labels == [c.label for c in result.certified_curves]
    assert not any("estimated" in label for label in labels)
    estimated = result.figure(estimated=True).axes[0].get_legend_handles_labels()[1]
    assert estimated == [c.label for c in result.estimated_curves]


# ============================================================================ 9. recipes and the registry field
def test_gaussian_recipes_and_the_smoothing_sigma_field():
    from mixzoo.core.registry import get_spec, spec_from_dict
    from mixzoo.training.train import RECIPES, Recipe

    for name, sigma in [("fmnist-rs025", 0.25), ("fmnist-rs050", 0.5), ("fmnist-rs100", 1.0), ("digits-rs050", 0.5)]:
        assert RECIPES[name].method == "gaussian" and RECIPES[name].noise_sigma == sigma
    with pytest.raises(InputError, match="needs noise_sigma > 0"):
        Recipe("no-noise", dataset="digits", method="gaussian", noise_sigma=0.0)
    with pytest.raises(InputError, match="needs noise_sigma > 0"):
        Recipe("noise-but-standard", dataset="digits", method="standard", noise_sigma=0.5)
    assert get_spec("digits-rs050").smoothing_sigma == 0.5
    assert get_spec("digits-pgd").smoothing_sigma is None
    entry = {"role": "robust", "dataset": "digits", "num_classes": 10, "input_size": [1, 8, 8],
             "source": {"kind": "zoo"}, "threat_model": "L2", "epsilon": 0.5}
    assert spec_from_dict("ok", {**entry, "smoothing_sigma": 0.25}).smoothing_sigma == 0.25
    for bad in (-1, 0, True, "0.5"):
        with pytest.raises(RegistryError, match="smoothing_sigma"):
            spec_from_dict("bad", {**entry, "smoothing_sigma": bad})


def test_cli_table_keeps_every_number_whole_on_an_80_column_terminal(tmp_path, monkeypatch):
    """The long row labels wrap; the certified accuracies and radii are never cut to an ellipsis."""
    from mixzoo.certify.report import shown_radii
    from mixzoo.core.commands import out_console

    monkeypatch.setattr(out_console, "_width", 80)
    result = CliRunner().invoke(app, ["certify", "--rbc", "digits-lip", "--abc", "digits-std", "--alpha", "0.62",
                                      "--n", "40", "--out", str(tmp_path / "c")])
    assert result.exit_code == 0, result.output
    table = result.output.split("note:")[0]
    assert "…" not in table, table
    lines = [line for line in table.splitlines() if line.startswith("│")]
    cells = [c.strip() for line in lines for c in line.strip("│").split("│")]
    header = [c.strip() for c in next(x for x in table.splitlines() if "clean %" in x).strip("┃").split("┃")]
    data = json.loads((tmp_path / "c" / "certify.json").read_text())
    assert len(header) == 7  # label, clean and 5 radii, every header whole
    for curve in data["certified"]:
        grid = curve["radii"]
        shown = shown_radii(grid)  # as certify.md shows them, the largest radius included
        assert header[2:] == [f"{r:.3g}" for r in shown] and shown[-1] == grid[-1]
        for r in shown:
            assert f"{100 * curve['accuracy'][grid.index(r)]:.1f}" in cells
