"""1-Lipschitz zoo models and their deterministic certificates (mixzoo.certify.radii.logit_lipschitz_radius).

1. the radius formula: the logit-margin bound at alpha = 1, Lemma 3.2 through the softmax (worst logit moves);
2. the model: trained by its recipe (digits, seconds), exported plain and equal to the trained network, with exact
   layer norms within the declared constant; a wrong declaration is refused;
3. soundness: PGD with restarts at each certified radius never flips the RBC or the mixture, and the same attack
   does flip predictions when the radii come from a constant half the true one.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from mixzoo.certify import certify, declared_lipschitz
from mixzoo.certify.lipschitz import lipschitz_bound
from mixzoo.certify.radii import logit_lipschitz_radius
from mixzoo.core.errors import InputError
from mixzoo.core.registry import get_spec
from mixzoo.zoo.data import load_dataset
from mixzoo.zoo.models import load_model

pytestmark = pytest.mark.usefixtures("one_thread")

F64 = torch.float64
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@functools.cache
def frozen(name: str) -> nn.Module:
    model = load_model(name).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


# ================================================================================================ 1. the formula
@st.composite
def logits_and_alpha(draw):
    c = draw(st.integers(2, 10))
    z = torch.tensor(draw(st.lists(st.floats(-8, 8), min_size=c, max_size=c)), dtype=F64)
    alpha = draw(st.floats(0.5, 1.0))
    lip = draw(st.floats(0.1, 10.0))
    return z, alpha, lip


@FAST
@given(logits_and_alpha())
def test_radius_at_alpha_1_is_the_logit_margin_over_sqrt2_l(inputs):
    z, _, lip = inputs
    top2 = z.topk(2).values
    want = float(top2[0] - top2[1]) / (math.sqrt(2) * lip)
    got = float(logit_lipschitz_radius(z[None], lip, 1.0)[0, 0])
    assert got == pytest.approx(want, rel=1e-9, abs=1e-12)


@FAST
@given(logits_and_alpha(), st.integers(0, 2**31 - 1))
def test_no_logit_move_within_l_times_radius_breaks_the_lemma_3_2_margin(inputs, seed):
    """Every logit vector within l2 distance L * r of z keeps p_y - p_i >= (1 - alpha) / alpha (Def. 3.1), tried
    on the worst direction for each runner-up (lower y, raise i) and on random directions."""
    z, alpha, lip = inputs
    r = float(logit_lipschitz_radius(z[None], lip, alpha)[0, 0])
    if not r > 0:
        return
    c, y = len(z), int(z.argmax())
    gen = torch.Generator().manual_seed(seed)
    dirs = [torch.randn(c, generator=gen, dtype=F64) for _ in range(64)]
    for i in range(c):
        if i != y:
            d = torch.zeros(c, dtype=F64)
            d[y], d[i] = -1.0, 1.0
            dirs.append(d)
            d2 = torch.full((c,), 1.0 / math.sqrt(c), dtype=F64)  # every other class up, y down
            d2[y] = -1.0
            dirs.append(d2)
    d = torch.stack(dirs)
    z2 = z[None] + d / d.norm(dim=1, keepdim=True) * lip * r * (1 - 1e-9)
    p = z2.softmax(1)
    gap = p[:, y:y + 1] - p
    gap[:, y] = math.inf
    assert float(gap.min()) >= (1 - alpha) / alpha - 1e-9


def test_radius_shrinks_with_the_abc_weight_and_vanishes_at_one_half():
    z = torch.tensor([[4.0, 1.0, 0.5, -1.0]], dtype=F64)
    r = logit_lipschitz_radius(z, 1.0, torch.tensor([1.0, 0.9, 0.7, 0.5], dtype=F64))[:, 0]
    assert bool((r[:-1].diff() < 0).all()) and r[-1] < 0  # margin 1 is out of reach of finite logits


def test_bad_constant_is_refused():
    with pytest.raises(InputError, match="positive finite"):
        logit_lipschitz_radius(torch.zeros(1, 3), 0.0, 1.0)


# ================================================================================================ 2. the model
def test_digits_lip_trains_from_its_recipe_and_exports_a_1_lipschitz_plain_network(tmp_path):
    from mixzoo.training.train import train_model

    result = train_model("digits-lip", tmp_path, evaluate=True, progress=False)
    net = load_model("digits-lip")  # architecture from the registry, weights from the fresh file
    net.network.load_state_dict(result.state_dict, strict=True)
    assert all(type(m).__module__.startswith(("torch", "mixzoo_plugins")) for m in net.network.modules())
    bound = lipschitz_bound(net, (1, 8, 8))
    scale = get_spec("digits-lip").lipschitz["constant"]
    assert bound.logits_l2 == pytest.approx(scale, rel=1e-3)  # every layer orthogonal: the product is the scale
    assert result.metrics["clean"] > 0.9


def test_export_equals_the_trained_network_and_refuses_a_mismatch(monkeypatch):
    from mixzoo_plugins import lipschitz_arch as lipschitz

    torch.manual_seed(0)
    net = lipschitz.LipConvNet(widths=(16,), hidden=64, input_hw=8, vanilla=False)
    x = torch.rand(32, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    plain = net.export_vanilla(x)
    with torch.no_grad():
        assert torch.allclose(plain(x), net(x), atol=1e-5)
    assert not any("deel" in type(m).__module__ for m in plain.modules())
    # a plain form that computes something else (here: its activation broken) must not ship
    monkeypatch.setattr(lipschitz.GroupSort2, "forward", lambda self, t: t)
    with pytest.raises(InputError, match="differs from the trained one"):
        net.export_vanilla(x)


def test_a_declared_constant_below_the_weights_layer_norms_is_refused():
    model = frozen("digits-lip")
    spec = get_spec("digits-lip")
    constant, product = declared_lipschitz(model, spec, (1, 8, 8))
    assert constant >= spec.lipschitz["constant"] and product == pytest.approx(constant, rel=1e-3)
    wrong = dataclasses.replace(spec, lipschitz={"constant": spec.lipschitz["constant"] / 2, "norm": "l2"})
    with pytest.raises(InputError, match="above the declared Lipschitz constant"):
        declared_lipschitz(model, wrong, (1, 8, 8))


def test_registry_refuses_a_malformed_lipschitz_field():
    from mixzoo.core.errors import RegistryError
    from mixzoo.core.registry import spec_from_dict

    raw = get_spec("digits-lip").to_dict()
    raw.pop("plugin")
    raw["lipschitz"] = {"constant": 1.0, "norm": "linf"}
    with pytest.raises(RegistryError, match="lipschitz"):
        spec_from_dict("x", raw)


# ================================================================================================ 3. soundness
def mixture_log_probs(rbc: nn.Module, abc: nn.Module | None, alpha: float, x: torch.Tensor) -> torch.Tensor:
    """001 Eq. 3.4 with a differentiable ABC (softmax at temperature 1): what the attack differentiates."""
    p = alpha * rbc(x).softmax(1)
    if abc is not None and alpha < 1:
        p = p + (1 - alpha) * abc(x).softmax(1)
    return p.clamp_min(1e-30).log()


def pgd_flips(rbc: nn.Module, abc: nn.Module | None, alpha: float, x: torch.Tensor, y: torch.Tensor,
              radius: torch.Tensor, steps: int = 60, restarts: int = 4, seed: int = 0) -> torch.Tensor:
    """l2 PGD on the margin ``max_{i != y} s_i - s_y`` of the mixture's log-probabilities, per-example radius,
    random starts in the ball, no clipping to the image box (the certificate covers every perturbation). Returns
    which examples some restart flipped."""
    gen = torch.Generator().manual_seed(seed)
    n = len(x)
    xs, ys, rs = x.repeat(restarts, 1, 1, 1), y.repeat(restarts), radius.repeat(restarts).float()
    view = (-1, 1, 1, 1)
    delta = torch.randn(xs.shape, generator=gen)
    delta = delta / delta.flatten(1).norm(dim=1).view(view) * rs.view(view) * torch.rand(len(xs), generator=gen).view(
        view)
    flipped = torch.zeros(len(xs), dtype=torch.bool)
    step = 2.5 * rs / steps
    for _ in range(steps + 1):
        delta.requires_grad_(True)
        s = mixture_log_probs(rbc, abc, alpha, xs + delta)
        flipped |= (s.argmax(1) != ys).detach()
        other = s.scatter(1, ys[:, None], -math.inf).amax(1)
        loss = (other - s.gather(1, ys[:, None]).squeeze(1)).sum()
        (g,) = torch.autograd.grad(loss, delta)
        with torch.no_grad():
            delta = delta + step.view(view) * g / g.flatten(1).norm(dim=1).clamp_min(1e-12).view(view)
            norm = delta.flatten(1).norm(dim=1).clamp_min(1e-12)
            delta = delta * (rs / norm).clamp(max=1.0).view(view)
    return flipped.view(restarts, n).any(0)


PAIRS = {"digits-lip": ("digits-std", 120), "fmnist-lip050": ("fmnist-std", 40),
         "fmnist-lip100": ("fmnist-std", 40)}  # RBC: (ABC, images)
CASES = [("digits-lip", 1.0), ("digits-lip", 0.8), ("fmnist-lip050", 1.0), ("fmnist-lip050", 0.8),
         ("fmnist-lip100", 1.0), ("fmnist-lip100", 0.62)]


def certified_sample(name: str, alpha: float, lip_factor: float) -> tuple[torch.Tensor, ...]:
    """The first evaluation images the Lipschitz RBC ``name`` classifies correctly with a radius > 0 at ``alpha``,
    the radius computed from ``lip_factor`` x its checked constant; returns images, labels, radii."""
    rbc, spec = frozen(name), get_spec(name)
    data = load_dataset(spec.dataset, "evaluation", n=PAIRS[name][1])
    constant, _ = declared_lipschitz(rbc, spec, tuple(spec.input_size))
    with torch.no_grad():
        logits = rbc(data.images).double()
    r = logit_lipschitz_radius(logits, constant * lip_factor, alpha)[0]
    keep = (logits.argmax(1) == data.labels) & (r > 0)
    return data.images[keep], data.labels[keep], r[keep]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "alpha"), CASES)
def test_pgd_never_flips_a_certified_prediction(name, alpha):
    abc = frozen(PAIRS[name][0]) if alpha < 1 else None
    x, y, r = certified_sample(name, alpha, 1.0)
    assert len(y) >= PAIRS[name][1] // 2  # the sample certifies something, or the test would be empty
    flipped = pgd_flips(frozen(name), abc, alpha, x, y, r)
    assert not bool(flipped.any()), f"{int(flipped.sum())} certified predictions flipped within their radius"


@pytest.mark.slow
@pytest.mark.parametrize(("name", "alpha"), CASES)
def test_the_same_check_fails_with_half_the_true_constant(name, alpha):
    """Radii from a constant half the true one (twice too large): the attack of the test above finds flips, so
    that test can fail."""
    abc = frozen(PAIRS[name][0]) if alpha < 1 else None
    x, y, r = certified_sample(name, alpha, 0.5)
    flipped = pgd_flips(frozen(name), abc, alpha, x, y, r)
    assert bool(flipped.any()), "PGD found no flip even at twice the certified radii: the check above is too weak"


def test_certify_gives_deterministic_lipschitz_curves_for_rbc_and_mixture():
    a = certify(rbc="digits-lip", abc="digits-std", alphas=[0.8], n=120, radii=[0, 0.25, 0.5], progress=False)
    b = certify(rbc="digits-lip", abc="digits-std", alphas=[0.8], n=120, radii=[0, 0.25, 0.5], progress=False)
    assert [c.accuracy for c in a.curves] == [c.accuracy for c in b.curves]
    assert {c.bound for c in a.curves} == {"lipschitz-logits"}
    alone = next(c for c in a.curves if c.alpha == 1.0)
    mix = next(c for c in a.curves if c.alpha == 0.8)
    assert alone.accuracy[1] > 0.5 and 0 < mix.accuracy[1] <= alone.accuracy[1]
    linf = certify(rbc="digits-lip", n=120, norm="linf", radii=[0.01], progress=False).curves[0]
    want = [r / 8.0 if r is not None else None for r in alone.radius]  # sqrt(64) = 8
    assert linf.radius == pytest.approx(want)
