"""The gate-logit attacks (mixzoo.methods.adaptive.gate_attacks, mixzoo.methods.local_smoothing.policy_attacks) on
the digits pair, with a gate set to saturate, and the RBC-margin bound that decides where they look."""

from __future__ import annotations

import pytest
import torch
from torch import nn

EPS = 0.1
# pixels that are 0 (or at most 1/16) on every digits image: the gate below reads them
QUIET = [0, 24, 31, 32, 39, 56]


class SoftminGate(nn.Module):
    """gamma(x) = bias + scale * tau * logsumexp(-x_S / tau): about ``bias + scale * tau * log |S|`` (> 45) on clean
    digits (alpha = 1 to float precision: the RBC decides and the sigmoid is saturated), below -20 once every pixel
    of S is raised by eps. Lowering it needs all of S raised together, which the loss's own gradient does not ask
    for; its logit's gradient does."""

    def __init__(self, bias: float = 20.0, scale: float = 800.0, tau: float = 0.02):
        super().__init__()
        self.bias, self.scale, self.tau = bias, scale, tau

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bias + self.scale * self.tau * torch.logsumexp(-x.flatten(1)[:, QUIET] / self.tau, dim=1)


def saturated(pair, alpha_min: float):
    """An adaptive-smoothing classifier of the digits pair whose mixing network is :class:`SoftminGate`."""
    from mixzoo.methods.adaptive.mixing import AdaptiveClassifier

    class Saturated(AdaptiveClassifier):
        def parts(self, x):
            return self.abc(x), self.rbc(x), self.net(x)

    abc, rbc = pair
    return Saturated(abc, rbc, SoftminGate(), temperature=1.0, alpha_min=alpha_min).eval()


@pytest.fixture(scope="module")
def digits(one_thread):
    from mixzoo.zoo.data import load_dataset

    d = load_dataset("digits", "evaluation", n=80)
    return d.images, d.labels, torch.arange(len(d.labels))


def _broken(res) -> torch.Tensor:
    return res.clean_correct & ~res.robust_correct


def test_the_logit_attack_breaks_what_setting_d_misses_on_a_saturated_gate(pair, digits):
    from mixzoo.methods.adaptive.attacks import AlphaAPGD
    from mixzoo.methods.adaptive.gate_attacks import AdaptiveGateAttack

    x, y, index = digits
    model = saturated(pair, alpha_min=0.0)
    with torch.no_grad():
        assert float(model.parts(x)[2].min()) > 40  # saturated: 1 - alpha < 1e-17 on every clean image
    old = AlphaAPGD(EPS, n_iter=50, n_target_classes=3, components=["apgd-ce-alpha", "apgd-t-alpha"]).run(
        model, x, y, progress=False, index=index)
    new = AdaptiveGateAttack(EPS, n_iter=50).run(model, x, y, progress=False, index=index)
    only_new = _broken(new) & ~_broken(old)
    assert int(only_new.sum()) >= 8, (int(_broken(old).sum()), int(_broken(new).sum()), int(only_new.sum()))
    assert int(_broken(new).sum()) > int(_broken(old).sum()) + 4
    with torch.no_grad():  # where it broke, the gate was driven open (alpha near 0: the ABC decides)
        assert float(model.alpha(new.adv_images[only_new]).max()) < 0.5


def test_no_example_the_rbc_margin_bound_excludes_is_broken(pair, digits):
    from mixzoo.methods.adaptive.gate_attacks import AdaptiveGateAttack, rbc_margin_threshold

    x, y, index = digits
    alpha_min = 0.6
    model = saturated(pair, alpha_min=alpha_min)
    thr = rbc_margin_threshold(alpha_min)
    assert thr == pytest.approx(0.4 / 0.6)
    screen = AdaptiveGateAttack(EPS, components=["rbc-screen"], screen_n_iter=50)
    res = screen.run(model, x, y, progress=False, index=index)
    margins = screen.screen_margins()
    excluded = (margins > thr) & res.robust_correct
    assert int(excluded.sum()) >= 10 and any("not a certificate" in w for w in res.warnings)
    # the gate attacks alone, on every example (no screen): none of the excluded ones falls
    gate = AdaptiveGateAttack(EPS, n_iter=50, components=["gate-ce", "gate-t", "gate-refine"]).run(
        model, x, y, progress=False, index=index)
    broken = _broken(gate) & res.clean_correct
    assert int(broken.sum()) >= 5
    assert not bool((broken & excluded).any())
    # the bound itself: at every point that fools the mixture, the RBC's probability margin is <= thr
    from mixzoo.attacks.margins import signed_margin

    with torch.no_grad():
        rbc_margin = signed_margin(pair[1](gate.adv_images[broken]), y[broken])
    assert float(rbc_margin.max()) <= thr + 1e-5


def test_outcomes_do_not_depend_on_the_batch(pair, digits):
    from mixzoo.methods.adaptive.gate_attacks import AdaptiveGateAttack

    x, y, index = digits
    x, y, index = x[:24], y[:24], index[:24]
    model = saturated(pair, alpha_min=0.6)  # the screen runs too
    opts = {"n_iter": 8, "n_target_classes": 2, "mus": [0.0, 0.1], "refine_steps": 4, "screen_n_iter": 4}
    whole = AdaptiveGateAttack(EPS, **opts)
    res = whole.run(model, x, y, progress=False, index=index)
    parts = [AdaptiveGateAttack(EPS, **opts) for _ in range(2)]
    chunks = (slice(0, 7), slice(7, 24))
    runs = [a.run(model, x[s], y[s], progress=False, index=index[s]) for a, s in zip(parts, chunks, strict=True)]
    assert torch.equal(res.robust_correct, torch.cat([r.robust_correct for r in runs]))
    assert torch.allclose(res.adv_images, torch.cat([r.adv_images for r in runs]), atol=1e-6)
    margins = whole.screen_margins()
    assert torch.allclose(margins, torch.cat([a.screen_margins() for a in parts]), atol=1e-6, equal_nan=True)
    assert bool(torch.isfinite(margins).any()) and whole.broken_by() == parts[0].broken_by() + parts[1].broken_by()


def test_bad_options_are_one_line_errors():
    from mixzoo.core.errors import InputError
    from mixzoo.methods.adaptive.gate_attacks import AdaptiveGateAttack, rbc_margin_threshold

    for opts, match in (({"mus": []}, "option mus"), ({"mus": [-0.1]}, "option mus"), ({"mus": "fast"}, "option mus"),
                        ({"refine_first_step": 0}, "refine_first_step"), ({"screen_n_iter": 0}, "screen_n_iter"),
                        ({"components": ["gate-x"]}, "unknown component")):
        with pytest.raises(InputError, match=match):
            attack = AdaptiveGateAttack(EPS, **opts)
            attack.components(nn.Identity(), 10)
    with pytest.raises(InputError, match="adaptive-smoothing classifier"):
        AdaptiveGateAttack(EPS).components(nn.Identity(), 10)
    assert rbc_margin_threshold(0.0) == float("inf") and rbc_margin_threshold(0.85) == pytest.approx(0.15 / 0.85)


def test_both_trained_methods_declare_the_gate_attack_and_bench_finds_it():
    from mixzoo.core.card import MixCard
    from mixzoo.core.plugins import lookup

    card = MixCard.load("fmnist-adaptive-smoothing-c")
    extra = {e.name: e for e in card.mixing_method.extra_attacks(card)}
    assert extra["gate-logit"].attack == "adaptive-smoothing-gate"
    assert lookup("attack", "adaptive-smoothing-gate").name == "adaptive-smoothing-gate"
    from mixzoo.methods.local_smoothing.adaptive_method import LocalSmoothingAdaptive

    params = {"r": "ratio", "beta0": 1.0, "eval_n_iter": 10, "eval_n_queries": 10, "eval_n_target_classes": 3}
    fake = type("Card", (), {"params": params})()
    names = {e.name: e.attack for e in LocalSmoothingAdaptive().extra_attacks(fake)}
    assert names["gate-logit"] == "local-smoothing-policy-gate"
    assert lookup("attack", "local-smoothing-policy-gate").name == "local-smoothing-policy-gate"


def test_policy_gate_reads_beta_before_its_crop(pair, digits):
    """The policy's logit keeps its gradient where the crop at 14 has none."""
    from mixzoo.methods.local_smoothing.policy_attacks import PolicyGateAttack, policy_gate
    from mixzoo.methods.local_smoothing.smoothing import LocalSmoothingClassifier

    x, y, index = digits
    x, y, index = x[:16], y[:16], index[:16]
    abc, rbc = pair
    model = LocalSmoothingClassifier(abc, rbc, alpha=0.0, r="one", log_alpha=SoftminGate()).eval()
    xi = x.clone().requires_grad_(True)
    out, beta = policy_gate(model)(xi)
    (grad,) = torch.autograd.grad(beta.sum(), xi)
    assert float(beta.detach().min()) > 14 and float(grad.abs().sum()) > 0
    (cropped,) = torch.autograd.grad(model.forward_alpha(xi)[1].sum(), xi)
    assert float(cropped.abs().sum()) == 0  # what the attacks on the cropped output differentiate
    res = PolicyGateAttack(EPS, n_iter=20, n_target_classes=2).run(model, x, y, progress=False, index=index)
    assert [c.name for c in res.components] == ["gate-ce", "gate-t", "gate-refine"]
    assert int(_broken(res).sum()) > 0
