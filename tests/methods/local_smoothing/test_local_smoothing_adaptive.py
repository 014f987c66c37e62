"""Adaptive locally biased smoothing (paper 003 Eq. 7-9, Fig. 4): the formula with a per-input alpha
against a direct per-class float64 computation, the limits alpha -> 0 (g) and alpha -> inf (h), the crossover
beta_0 on a constructed pair whose answer is known, the composite loss of Eq. 9, training through the shared
trainer (determinism, what it learns), the card with its hashed weights, mix and bench by name on the digits zoo,
and bad options."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

from mixzoo.core.card import MixCard
from mixzoo.core.errors import InputError
from mixzoo.methods import fit, get_method
from mixzoo.methods.local_smoothing.crossover import crossover_point, measure_crossover
from mixzoo.methods.local_smoothing.policy import (
    PolicyConfig,
    PolicyObjective,
    policy_loss,
    supervision_sign,
)
from mixzoo.methods.local_smoothing.smoothing import LocalSmoothingClassifier, smooth

EPS = 0.1
DUAL = {"Linf": 1, "L2": 2, "L1": float("inf")}
FIT_OPTIONS = {"epochs": 2, "n_train": 160, "n_val": 40, "batch_size": 40, "steps": [2, 3], "width": 8,
               "blocks": 1, "lr": 1e-3, "n_crossover": 40, "crossover_steps": 3, "r": "ratio",
               "accelerated": True, "eval_n_iter": 4, "eval_n_queries": 30, "eval_n_target_classes": 1}


def _mlp(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Flatten(), nn.Linear(16, 12), nn.Softplus(), nn.Linear(12, 5))
    return net.double().eval().requires_grad_(False)


class FixedBeta(nn.Module):
    """A stand-in policy with known outputs beta (one per row), still a function of x (zero slope)."""

    def __init__(self, beta: list[float]):
        super().__init__()
        self.beta = torch.tensor(beta, dtype=torch.float64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.beta.to(x.dtype) + 0.0 * x.sum((1, 2, 3))


@pytest.fixture(scope="module")
def models():
    return _mlp(1), _mlp(2), torch.rand(6, 1, 4, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def fitted(tmp_path_factory, one_thread):
    """One card fitted through the library (beta_0 measured), shared by the card and bench tests."""
    root = tmp_path_factory.mktemp("ls-adaptive")
    res = fit("local-smoothing-adaptive", "digits-std", "digits-pgd", options=dict(FIT_OPTIONS),
              out=root / "card.toml", eps=EPS, n_calib=50, seed=0, cache_dir=root / "cache", progress=False)
    return res, root


# ------------------------------------------------------------------------------------------------ the formula
def _direct(g, h, x, beta, *, r, space, eps_c=1e-6):
    """003 Eq. 7 written out class by class in float64: gradient norms by one autograd call per class."""
    fg = g if space == "logits" else (lambda z: torch.softmax(g(z), -1))
    fh = h if space == "logits" else (lambda z: torch.softmax(h(z), -1))
    xr = x.clone().requires_grad_(True)
    gv, hv = fg(xr), fh(xr)
    c = gv.shape[1]
    ng = torch.stack([torch.autograd.grad(gv[:, i].sum(), xr, retain_graph=True)[0].flatten(1).abs().sum(1)
                      for i in range(c)], 1)
    nh = torch.stack([torch.autograd.grad(hv[:, i].sum(), xr, retain_graph=True)[0].flatten(1).abs().sum(1)
                      for i in range(c)], 1)
    rr = {"one": torch.ones_like(ng), "grad_g": ng, "ratio": ng / (nh + eps_c)}[r]
    a = torch.exp(torch.clamp(torch.tensor(beta, dtype=torch.float64), -14, 14))
    z = torch.stack([(gv[:, i] + a * rr[:, i] * hv[:, i]) / (1 + a * rr[:, i]) for i in range(c)], 1).detach()
    return torch.log_softmax(z, -1) if space == "logits" else torch.log(z / z.sum(1, keepdim=True))


@pytest.mark.parametrize("r", ["one", "grad_g", "ratio"])
@pytest.mark.parametrize("space", ["logits", "probabilities"])
def test_per_input_alpha_matches_direct_float64_formula(models, r, space):
    g, h, x = models
    beta = [-20.0, -2.0, 0.0, 1.5, 4.0, 30.0]  # the ends are cropped to [-14, 14] (003 Sec. 6.3)
    clf = LocalSmoothingClassifier(g, h, alpha=0.0, r=r, space=space, log_alpha=FixedBeta(beta))
    with torch.no_grad():
        got, log_a = clf.forward_alpha(x)
    assert torch.allclose(got, _direct(g, h, x, beta, r=r, space=space), atol=1e-12, rtol=0)
    assert log_a.tolist() == [-14.0, -2.0, 0.0, 1.5, 4.0, 14.0]


def test_limits_alpha_zero_is_g_and_alpha_inf_is_h(models):
    g, h, x = models
    gv, hv, r = g(x), h(x), torch.rand(6, 5, dtype=torch.float64) + 0.1
    a = torch.tensor([[0.0], [math.inf], [1.0], [math.inf], [0.0], [1e-3]], dtype=torch.float64)
    out = smooth(gv, hv, r, a)
    assert torch.equal(out[[0, 4]], gv[[0, 4]]) and torch.equal(out[[1, 3]], hv[[1, 3]])
    gr = gv.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(smooth(gr, hv, r, a).sum(), gr)
    assert torch.isfinite(grad).all() and torch.equal(grad[[1, 3]], torch.zeros(2, 5, dtype=torch.float64))
    # through a policy: beta far below / above the crop gives alpha = e^-14 / e^14, within ~1e-6 of g / h
    for beta, base in ((-50.0, g), (50.0, h)):
        clf = LocalSmoothingClassifier(g, h, alpha=0.0, r="ratio", log_alpha=FixedBeta([beta] * 6))
        with torch.no_grad():
            assert torch.allclose(clf(x), torch.log_softmax(base(x), -1), atol=1e-4)


def test_policy_fixed_gradient_bypasses_the_policy(models):
    """``policy-fixed``: the policy's output enters the backward pass as a constant; ``exact`` goes through it."""
    g, h, x = models

    class Slope(nn.Module):
        def forward(self, z):
            return 0.3 * z.sum((1, 2, 3)) - 2.0  # inside the crop

    grads = {}
    for mode in ("exact", "fixed-R", "policy-fixed"):
        clf = LocalSmoothingClassifier(g, h, alpha=0.0, r="one", log_alpha=Slope(), gradient=mode)
        xi = x.clone().requires_grad_(True)
        out = clf(xi)
        grads[mode] = torch.autograd.grad(out[:, 2].sum(), xi)[0]
        assert torch.allclose(out, clf.eval()(x), atol=1e-12)  # values never change
    assert torch.allclose(grads["exact"], grads["fixed-R"])  # R = 1: nothing to hold fixed
    assert not torch.allclose(grads["exact"], grads["policy-fixed"])
    beta = Slope()(x).detach()
    xi = x.clone().requires_grad_(True)
    want = torch.log_softmax(smooth(g(xi), h(xi), torch.ones(6, 1, dtype=torch.float64),
                                    beta.exp().unsqueeze(1)), -1)[:, 2].sum()
    assert torch.allclose(grads["policy-fixed"], torch.autograd.grad(want, xi)[0], atol=1e-12)


# ------------------------------------------------------------------------------------------------ beta_0
class Ramp(nn.Module):
    """Two classes on a one-pixel image p: logits (m, -m), m = k * sign * (p - c)."""

    def __init__(self, sign: float, c: float, k: float = 10.0):
        super().__init__()
        self.sign, self.c, self.k = sign, c, k

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = self.k * self.sign * (x.flatten(1)[:, :1] - self.c)
        return torch.cat([m, -m], 1)


@pytest.mark.parametrize("r", ["one", "ratio"])
def test_crossover_on_a_pair_with_a_known_answer(r):
    """g says class 0 for p > 0.5, h for p < 0.65; every image (p in [0.56, 0.59], class 0) is right for both. The
    mixture's margin slope in p is proportional to (1 - alpha_t) (|grad g| = |grad h|, so R = 1 either way): below
    alpha_t = 1 the attack lowers p by eps (g wrong, h right), above it raises p (h wrong, g right). The crossover
    is alpha_0 = 1, beta_0 = 0, halfway in log between 0.5 and 2."""
    g, h = Ramp(1.0, 0.5), Ramp(-1.0, 0.65)
    clf = LocalSmoothingClassifier(g, h, alpha=0.0, r=r)
    x = torch.linspace(0.56, 0.59, 12).view(-1, 1, 1, 1)
    y = torch.zeros(12, dtype=torch.long)
    sweep = [0.0, 0.25, 0.5, 2.0, 4.0, math.inf]
    res = measure_crossover(clf, x, y, sweep, eps=EPS, steps=3, seed=0)
    assert res.acc_g == [0.0, 0.0, 0.0, 1.0, 1.0, 1.0] and res.acc_h == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    assert res.beta0 == pytest.approx(0.0, abs=1e-9) and res.where == "interpolated"
    chunked = measure_crossover(clf, x, y, sweep, eps=EPS, steps=3, seed=0, batch_size=5)
    assert (chunked.acc_g, chunked.acc_h) == (res.acc_g, res.acc_h)
    later = measure_crossover(clf, x, y, [0.0, 0.5, 1.5, 3.0, math.inf], eps=EPS, steps=3, seed=0)
    # the switch lies between 0.5 and 1.5; the accuracies jump by the same amount: halfway in log alpha_t
    assert later.beta0 == pytest.approx((math.log(0.5) + math.log(1.5)) / 2, abs=1e-9)


def test_crossover_point_interpolates_and_names_the_ends():
    a = [0.0, 1.0, 10.0, 100.0, math.inf]
    beta, where = crossover_point(a, [0.1, 0.2, 0.5, 0.9, 0.9], [0.8, 0.7, 0.6, 0.5, 0.4])
    t = 0.1 / (0.1 + 0.4)  # d = -0.1 at 10, +0.4 at 100
    assert where == "interpolated" and beta == pytest.approx((1 - t) * math.log(10) + t * math.log(100))
    assert crossover_point(a, [0.9] * 5, [0.1] * 5) == (0.0, "below the sweep")  # log 1: the first finite > 0
    assert crossover_point(a, [0.1] * 5, [0.9] * 5) == (pytest.approx(math.log(100)), "above the sweep")
    assert crossover_point(a, [0, 0, 0, 0, 1], [1, 1, 1, 1, 0]) == (pytest.approx(math.log(100)), "above the sweep")
    # g "reaches" h: a tie at alpha_t = 10 is the crossing itself
    assert crossover_point([0.0, 1.0, 10.0, math.inf], [0.3, 0.4, 0.5, 0.6], [0.5] * 4) == (
        pytest.approx(math.log(10)), "interpolated")
    # order of the sweep does not matter
    assert crossover_point(a[::-1], [0.9, 0.9, 0.5, 0.2, 0.1], [0.4, 0.5, 0.6, 0.7, 0.8])[0] == pytest.approx(beta)
    with pytest.raises(InputError, match="finite alpha_t > 0"):
        crossover_point([0.0, math.inf], [0, 1], [1, 0])


# ------------------------------------------------------------------------------------------------ Eq. 9
def test_composite_loss_matches_float64_eq_9():
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(9, 4, generator=gen, dtype=torch.float64) * 3
    lp = torch.log_softmax(logits, -1)
    y = torch.randint(0, 4, (9,), generator=gen)
    beta = torch.randn(9, generator=gen, dtype=torch.float64) * 5
    sign = torch.tensor([1, -1, 0, 1, -1, 0, 1, 1, -1], dtype=torch.float64)
    got = policy_loss(lp, y, beta, sign, c1=0.5, c2=0.8, c3=3.2)
    for i in range(9):
        ce = -float(lp[i, y[i]])
        want = ce if sign[i] == 0 else (ce + 0.5) * (0.8 + max(0.0, 3.2 - float(sign[i] * beta[i])))
        assert float(got[i]) == pytest.approx(want, rel=1e-12)
    # alpha_t at or below alpha_0 = exp(beta_0): h should decide (+1); above, and inf: g (-1)
    s = supervision_sign(torch.tensor([0.0, 1.0, math.e, 2.72, math.inf], dtype=torch.float64), 1.0)
    assert s.tolist() == [1.0, 1.0, 1.0, -1.0, -1.0]


# ------------------------------------------------------------------------------------------------ training
def _cfg(**kw):
    return PolicyConfig(**{"epochs": 2, "eps": EPS, "batch_size": 32, "steps": [2, 3], "lr": 1e-3, "width": 8,
                           "blocks": 1, "r": "one", "beta0": 1.0, **kw})


def test_training_is_deterministic_for_a_seed(pair, train_data):
    from mixzoo.methods.shared.training_loop import TrainRun, train

    abc, rbc = pair
    x, y = train_data[0][:64], train_data[1][:64]
    a = train(abc, rbc, x, y, _cfg(), objective=PolicyObjective(), run=TrainRun(progress=False))
    b = train(abc, rbc, x, y, _cfg(), objective=PolicyObjective(), run=TrainRun(progress=False))
    assert all(torch.equal(a.state[k], b.state[k]) for k in a.state)
    assert [h["loss"] for h in a.history] == [h["loss"] for h in b.history]
    other = train(abc, rbc, x, y, _cfg(seed=1), objective=PolicyObjective(), run=TrainRun(progress=False))
    assert not all(torch.equal(a.state[k], other.state[k]) for k in a.state)
    assert set(a.history[0]) == {"epoch", "loss", "ce", "hinge"}


def test_training_learns_beta_up_on_attacks_aimed_at_g_and_down_on_clean(pair, train_data):
    """Eq. 9's supervision with beta_0 = log 20: clean points push beta below -c3, points attacked at alpha_t <= 20
    above +c3; after training the policy tells them apart on held-out images."""
    from mixzoo.methods.local_smoothing.crossover import attack_at_alpha
    from mixzoo.methods.shared.training_loop import TrainRun, train

    abc, rbc = pair
    x, y = train_data
    cfg = _cfg(epochs=6, width=16, lr=1e-2, beta0=math.log(20.0), alpha_ts=[0.0, 1.0])
    res = train(abc, rbc, x[:160], y[:160], cfg, objective=PolicyObjective(),
                run=TrainRun(val=(x[160:], y[160:]), progress=False))
    model = PolicyObjective().classifier(abc, rbc, _net(res.state, abc, rbc, cfg), _taps(abc, rbc), cfg)
    xv, yv = x[160:], y[160:]
    adv = attack_at_alpha(model, xv, yv, torch.zeros(len(xv), dtype=torch.float64), eps=torch.full((len(xv),), EPS),
                          steps=5, noise=torch.rand(xv.shape, generator=torch.Generator().manual_seed(0)))
    with torch.no_grad():
        clean_beta, adv_beta = model.log_strength(xv), model.log_strength(adv)
    assert float(adv_beta.mean()) > float(clean_beta.mean()) + 2.0
    assert res.history[-1]["hinge"] < res.history[0]["hinge"] / 2
    assert {"val_clean", "val_attacked", "val_attack_g", "val_attack_h", "beta_clean"} <= set(res.history[-1])


def _taps(abc, rbc):
    from mixzoo.methods.shared.taps import model_taps

    return model_taps(abc), model_taps(rbc)


def _net(state, abc, rbc, cfg):
    from mixzoo.methods.shared.taps import tap_shapes
    from mixzoo.methods.shared.training_loop import new_network

    sg, sh = (tap_shapes(m, t, (1, 8, 8)) for m, t in zip((abc, rbc), _taps(abc, rbc), strict=True))
    net = new_network([sg["early"][0], sh["early"][0]], [sg["middle"][0], sh["middle"][0]], cfg)
    net.load_state_dict(state)
    return net.eval()


# ------------------------------------------------------------------------------------------------ the card
def test_card_records_beta0_and_weights_and_rebuilds_the_classifier(fitted, pair):
    import hashlib
    import shutil

    res, root = fitted
    card = MixCard.load(root / "card.toml")
    q = card.params
    cross = q["crossover"]
    assert q["beta0_source"] == "measured" and q["beta0"] == cross["beta0"] and cross["split"] == "calibration"
    assert len(cross["acc_g"]) == len(cross["alpha_ts"]) == 9 and cross["alpha_ts"][-1] == "inf"
    assert cross["n"] == FIT_OPTIONS["n_crossover"] and cross["steps"] == FIT_OPTIONS["crossover_steps"]
    name = q["weights_file"]
    assert card.weights[name] == hashlib.sha256((root / name).read_bytes()).hexdigest()
    assert len(q["history"]) == FIT_OPTIONS["epochs"] and card.data["split"] == "train"
    abc, rbc = pair
    x = torch.rand(7, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    built = card.mixing_method.build(abc, rbc, card)
    with torch.no_grad():
        out, beta = built.forward_alpha(x)
        again = res.card.mixing_method.build(abc, rbc, res.card)(x)
        # the same classifier from its parts: Eq. 7 with this policy's alpha per input (R_i accelerated ratio)
        direct = LocalSmoothingClassifier(abc, rbc, alpha=0.0, r="ratio", accelerated=True,
                                          log_alpha=FixedBeta(beta.tolist()))(x)
    assert torch.equal(out, again) and torch.allclose(out, direct, atol=1e-6)
    assert beta.std() > 0  # a per-input strength
    bad = root / "tampered"
    bad.mkdir()
    shutil.copy(root / "card.toml", bad / "card.toml")
    shutil.copy(root / "card.arrays.json", bad / "card.arrays.json")  # the card's large arrays stay beside it
    blob = bytearray((root / name).read_bytes())
    blob[-1] ^= 1
    (bad / name).write_bytes(bytes(blob))
    with pytest.raises(InputError, match="does not belong to this card"):
        get_method("local-smoothing-adaptive").build(abc, rbc, MixCard.load(bad / "card.toml"))
    data = card.to_dict()
    del data["local-smoothing-adaptive"]["beta0"]
    with pytest.raises(InputError, match="beta0"):
        MixCard.from_dict(data)


def test_bench_by_name_runs_the_declared_extra_attacks(fitted):
    from mixzoo.evaluation.bench import bench
    from mixzoo.evaluation.verify import verify_report

    _, root = fitted
    card = MixCard.load(root / "card.toml")
    declared = [e.name for e in get_method("local-smoothing-adaptive").extra_attacks(card)]
    assert declared[:5] == ["apgd-fixed-R", "apgd-policy-fixed", "apgd-alpha_t=0", "apgd-alpha_t=inf",
                            "apgd-alpha_t=alpha0"] and {"policy-d", "policy-only", "square"} <= set(declared)
    report = bench(str(root / "card.toml"), attack="pgd", attack_options={"n_iter": 2}, eps=0.05, n=16,
                   curve=None, baseline=None, cache_dir=root / "cache", progress=False, out=root / "bench",
                   save_adversarial=True)
    rows = {m.kind: m for m in report.models}
    assert set(rows) == {"abc", "rbc", "local-smoothing-adaptive"}
    row = rows["local-smoothing-adaptive"]
    ran = [c["name"] for c in row.components if c["name"] in declared]
    assert ran and ran == declared[:len(ran)]  # in order; they stop once nothing is left robust
    assert row.robust_accuracy <= row.clean_accuracy
    checked = verify_report(root / "bench")
    assert checked.passed and any(r.name == "Local smoothing, adaptive" for r in checked.rows)


def test_mix_by_name_through_the_cli_with_a_given_beta0(tmp_path, monkeypatch, one_thread):
    from typer.testing import CliRunner

    from mixzoo.cli import app

    monkeypatch.setenv("MIXZOO_CACHE", str(tmp_path / "cache"))
    args = ["mix", "--method", "local-smoothing-adaptive", "--abc", "digits-std", "--rbc", "digits-pgd", "--eps",
            "0.1", "--n-calib", "20", "-O", "beta0=2.5", "-O", "epochs=1", "-O", "n_train=60", "-O", "n_val=0",
            "-O", "steps=1,2", "-O", "width=4", "-O", "blocks=0", "-O", "r=one", "-O", "alpha_ts=0,1,inf",
            "--out", str(tmp_path / "card.toml"), "--json"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    q = MixCard.load(tmp_path / "card.toml").params
    assert q["beta0"] == 2.5 and q["beta0_source"] == "given" and "crossover" not in q
    assert q["training"]["alpha_ts"] == [0.0, 1.0, "inf"]
    bad_args = ["r=nope" if a == "r=one" else a for a in args[:-3]]  # a key given twice is refused, so replace it
    bad = CliRunner().invoke(app, [*bad_args, "--out", str(tmp_path / "x.toml")])
    assert bad.exit_code == 2 and "option r (--r) of mixing method 'local-smoothing-adaptive'" in bad.output
    assert not (tmp_path / "x.toml").exists()


@pytest.mark.parametrize(("options", "match"), [
    ({"r": "grad"}, r"option r \(--r\) of mixing method 'local-smoothing-adaptive' must be one of"),
    ({"space": "odds"}, "option space"),
    ({"beta0": "nan"}, "option beta0 .* finite"),
    ({"beta0": math.inf}, "option beta0"),
    ({"c1": -1}, "option c1"),
    ({"alpha_ts": [0, -1]}, "option alpha_ts must be numbers >= 0"),
    ({"alpha_ts": "x"}, "option alpha_ts"),
    ({"r": "one", "accelerated": True}, "option accelerated"),
    ({"n_crossover": 0}, "option n_crossover"),
    ({"crossover_steps": 0}, "option crossover_steps"),
    ({"crossover_alpha_ts": [-2]}, "option crossover_alpha_ts"),
    ({"epochs": 0}, r"option epochs \(--epochs\) of mixing method 'local-smoothing-adaptive' must be at least 1"),
    ({"eps_c": 0}, "option eps_c"),
    ({"steps": [5, 2]}, "option steps"),
    ({"checkpoint_every": -1}, "option checkpoint_every"),
])
def test_bad_options_are_one_line_errors_before_any_work(tmp_path, options, match):
    with pytest.raises(InputError, match=match) as err:
        fit("local-smoothing-adaptive", "digits-std", "digits-pgd", options=options, out=tmp_path / "c.toml",
            eps=EPS, progress=False)
    assert "\n" not in str(err.value)
    assert not list(tmp_path.iterdir())


def test_unknown_option_and_missing_out_are_refused(tmp_path):
    with pytest.raises(InputError, match="takes no option 'alpha'"):
        fit("local-smoothing-adaptive", "digits-std", "digits-pgd", options={"alpha": 1.0}, out=tmp_path / "c.toml")
    with pytest.raises(InputError, match="pass out="):
        fit("local-smoothing-adaptive", "digits-std", "digits-pgd", options={}, eps=EPS, progress=False)


# ------------------------------------------------------------------------------------------------ 003 Fig. 2-3
@pytest.mark.parametrize("norm", ["Linf", "L2"])
def test_gradient_norm_statistics_match_per_class_autograd(models, norm, tmp_path):
    import numpy as np

    from mixzoo.methods.local_smoothing.gradient_stats import (
        QUANTILES,
        gradient_figure_and_record,
        gradient_norm_summary,
        gradient_norms,
    )

    g, h, _ = models
    x = torch.rand(11, 1, 4, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    gn, hn = gradient_norms(g, h, x, norm=norm, batch_size=4)  # chunks of 4: 4 + 4 + 3

    def direct(model):
        xr = x.clone().requires_grad_(True)
        out = model(xr)
        cols = [torch.autograd.grad(out[:, i].sum(), xr, retain_graph=True)[0].flatten(1).norm(p=DUAL[norm], dim=1)
                for i in range(out.shape[1])]
        return torch.stack(cols, 1)

    assert torch.allclose(gn, direct(g), atol=1e-12) and torch.allclose(hn, direct(h), atol=1e-12)
    s = gradient_norm_summary(gn, hn)
    both = np.concatenate([gn.numpy(), hn.numpy()], axis=1)
    assert np.allclose(s["correlation"], np.corrcoef(both, rowvar=False), atol=1e-12)
    assert np.allclose(s["g"]["quantiles"], np.quantile(gn.numpy(), QUANTILES, axis=0).T, atol=1e-12)
    assert s["share_g_larger"] == pytest.approx(float(np.mean(gn.numpy() > hn.numpy())))
    record = gradient_figure_and_record(gn, hn, tmp_path / "norms", title="test")
    assert (tmp_path / "norms.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((tmp_path / "norms.json").read_text())["n"] == 11 == record["n"]
