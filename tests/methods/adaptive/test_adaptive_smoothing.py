"""Adaptive smoothing (paper 001 Sec. 4-5): the mixture, the alpha bounds, the composite loss and its pseudo-labels,
the layer taps, training (learning, determinism, resume after a kill), the card with its hashed weights, `mixzoo
mix` by name and a bench run with the extra attacks, all on the built-in digits zoo (8x8 CNNs, seconds)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from mixzoo.attacks.square import SquareSettings
from mixzoo.core.errors import InputError, RegistryError

EPS = 0.1
FIT_OPTIONS = {"setting": "C", "epochs": 2, "n_train": 200, "n_val": 40, "batch_size": 40, "steps": [2, 3],
               "lr": 1e-3, "eval_n_iter": 4, "eval_n_queries": 30}


@pytest.fixture(scope="module")
def fitted(tmp_path_factory, one_thread):
    """One card fitted through the library, shared by the card, build and bench tests."""
    from mixzoo.methods import fit

    root = tmp_path_factory.mktemp("adaptive")
    res = fit("adaptive-smoothing", "digits-std", "digits-pgd", options=dict(FIT_OPTIONS), out=root / "card.toml",
              eps=EPS, n_calib=50, seed=0, cache_dir=root / "cache", progress=False)
    return res, root


# ------------------------------------------------------------------------------------------------ the mixture
def _direct_mixture(g, h, gamma, temperature, lo, hi):
    g, h, gamma = g.double(), h.double(), gamma.double()
    a = lo + (hi - lo) * torch.sigmoid(gamma)
    if temperature == 0:
        pg = torch.nn.functional.one_hot(g.argmax(1), g.shape[1]).double()
    else:
        pg = torch.softmax(g / temperature, dim=1)
    return torch.log((1 - a[:, None]) * pg + a[:, None] * torch.softmax(h, dim=1))


@pytest.mark.parametrize("temperature", [1.0, 0.5, 0.0])
@pytest.mark.parametrize("bounds", [(0.0, 1.0), (0.3, 0.9), (0.96, 1.0)])
def test_mixture_matches_direct_formula(temperature, bounds):
    from mixzoo.methods.adaptive.mixing import adaptive_log_probs

    gen = torch.Generator().manual_seed(1)
    g, h = torch.randn(64, 10, generator=gen) * 4, torch.randn(64, 10, generator=gen) * 4
    gamma = torch.randn(64, generator=gen) * 6
    got = adaptive_log_probs(g, h, gamma, temperature=temperature, alpha_min=bounds[0], alpha_max=bounds[1])
    want = _direct_mixture(g, h, gamma, temperature, *bounds)
    assert torch.allclose(got.double(), want, atol=1e-5, rtol=1e-5)
    assert torch.allclose(got.exp().sum(1), torch.ones(64), atol=1e-5)


def test_alpha_bounds_hold_and_stay_finite_at_saturation():
    from mixzoo.methods.adaptive.mixing import check_bounds, log_alphas

    gamma = torch.tensor([-200.0, -20.0, 0.0, 20.0, 200.0], requires_grad=True)
    for lo, hi in [(0.0, 1.0), (0.84, 0.99), (0.96, 1.0)]:
        log_1ma, log_a = log_alphas(gamma, lo, hi)
        a = log_a.detach().exp()
        assert torch.all(a >= lo - 1e-7) and torch.all(a <= hi + 1e-7)
        assert abs(float(a[0]) - lo) < 1e-6 and abs(float(a[-1]) - hi) < 1e-6
        assert abs(float(a[2]) - (lo + hi) / 2) < 1e-6
        assert torch.allclose(log_1ma.detach().exp() + a, torch.ones(5), atol=1e-6)
        (grad,) = torch.autograd.grad((log_a + log_1ma.clamp_min(-1e4)).sum(), gamma)
        assert torch.isfinite(grad).all()
    for bad in [(0.5, 0.5), (0.9, 0.1), (-0.1, 1.0), (0.0, 1.5)]:
        with pytest.raises(InputError, match="alpha_min < alpha_max"):
            check_bounds(*bad)


# ------------------------------------------------------------------------------------------------ the loss
def test_composite_loss_matches_float64_formula():
    from mixzoo.methods.adaptive.loss import composite_loss

    gen = torch.Generator().manual_seed(2)
    log_probs = torch.log_softmax(torch.randn(50, 10, generator=gen) * 3, dim=1)
    labels = torch.randint(0, 10, (50,), generator=gen)
    gamma = torch.randn(50, generator=gen) * 3
    targets = (torch.rand(50, generator=gen) > 0.5).float()
    weights = torch.where(targets > 0, 1.0, 2.0)
    c_ce, c_bce, c_prod = 0.5, 1.0, 0.1
    loss, parts = composite_loss(log_probs, labels, gamma, targets, weights, c_ce=c_ce, c_bce=c_bce, c_prod=c_prod)
    p = log_probs.double().exp()
    ce = -torch.log(p[torch.arange(50), labels])
    a = torch.sigmoid(gamma.double())
    bce = -(targets.double() * torch.log(a) + (1 - targets.double()) * torch.log(1 - a))
    want = ((c_ce * ce + c_bce * bce + c_prod * ce * bce) * weights.double()).mean()
    assert math.isclose(float(loss), float(want), rel_tol=1e-5)
    assert math.isclose(parts["ce"], float(ce.mean()), rel_tol=1e-5)
    assert math.isclose(parts["bce"], float(bce.mean()), rel_tol=1e-5)


def test_pseudo_labels_follow_the_rules():
    from mixzoo.methods.adaptive.loss import pseudo_labels

    #            clean x4 (abc/rbc right: TT, TF, FT, FF), attacked x4 (same order)
    attacked = torch.tensor([False] * 4 + [True] * 4)
    abc_ok = torch.tensor([True, True, False, False] * 2)
    rbc_ok = torch.tensor([True, False, True, False] * 2)
    assert pseudo_labels(attacked).tolist() == [0, 0, 0, 0, 1, 1, 1, 1]  # the authors' rule
    assert pseudo_labels(attacked, abc_ok, rbc_ok, "oracle").tolist() == [0, 0, 1, 0, 1, 0, 1, 1]
    with pytest.raises(InputError, match="pseudo_labels"):
        pseudo_labels(attacked, rule="guess")


# ------------------------------------------------------------------------------------------------ the taps
def test_taps_shapes_and_alignment(pair):
    from mixzoo.methods.shared.network import MixingNetwork
    from mixzoo.methods.shared.taps import model_taps, tap_shapes
    from mixzoo.zoo.models import load_model

    abc, _ = pair
    assert tap_shapes(abc, model_taps(abc), (1, 8, 8)) == {"early": (16, 4, 4), "middle": (32, 2, 2)}
    std, pgd = load_model("fmnist-std"), load_model("fmnist-pgd")
    s, p = tap_shapes(std, model_taps(std), (1, 28, 28)), tap_shapes(pgd, model_taps(pgd), (1, 28, 28))
    assert s["early"] == (32, 28, 28) and p["early"] == (32, 14, 14)  # different sizes: pooled to match
    assert s["middle"] == p["middle"] == (64, 7, 7)
    net = MixingNetwork([32, 32], [64, 64], width=8, blocks=1).eval()
    early = (torch.randn(3, 32, 28, 28), torch.randn(3, 32, 14, 14))
    assert net(early, (torch.randn(3, 64, 7, 7), torch.randn(3, 64, 7, 7))).shape == (3,)


def test_model_without_taps_is_refused_naming_the_field(pair, train_data):
    from mixzoo.core.registry import spec_from_dict
    from mixzoo.methods.adaptive.training import TrainConfig, TrainRun, train
    from mixzoo.methods.shared.taps import Taps, check_taps, model_taps

    mlp = nn.Sequential(nn.Flatten(), nn.Linear(64, 10)).eval()
    with pytest.raises(InputError, match=r"ABC 'Sequential' declares no layer taps.*taps = \{early"):
        model_taps(mlp, "ABC")
    with pytest.raises(InputError, match="no layer taps"):
        train(mlp, pair[1], *train_data, TrainConfig(epochs=1), run=TrainRun(progress=False))
    with pytest.raises(InputError, match=r"taps.middle = 'features.99' is not a module"):
        check_taps(pair[0], Taps("features.2", "features.99"))
    with pytest.raises(RegistryError, match="field 'taps'"):
        spec_from_dict("x", {"role": "accurate", "dataset": "digits", "num_classes": 10, "input_size": [1, 8, 8],
                             "source": {"kind": "zoo"}, "taps": "features.2"})


def test_hooks_are_removed_after_each_forward(pair):
    from mixzoo.methods.shared.taps import model_taps, run_tapped

    abc, _ = pair
    before = sum(len(m._forward_hooks) for m in abc.modules())
    logits, feats = run_tapped(abc, model_taps(abc), torch.rand(2, 1, 8, 8))
    assert torch.equal(logits, abc(torch.rand(2, 1, 8, 8)) * 0 + logits)
    assert sum(len(m._forward_hooks) for m in abc.modules()) == before
    assert set(feats) == {"early", "middle"}


# ------------------------------------------------------------------------------------------------ gradients
def test_gradient_variants(pair):
    from mixzoo.methods.adaptive.mixing import AdaptiveClassifier
    from mixzoo.methods.shared.network import MixingNetwork

    abc, rbc = pair
    torch.manual_seed(0)
    net = MixingNetwork([16, 16], [32, 32], width=8, blocks=1).eval()
    x = torch.rand(4, 1, 8, 8)
    outs = {}
    for mode in ("exact", "gray", "transfer-abc", "transfer-rbc"):
        model = AdaptiveClassifier(abc, rbc, net, gradient=mode)
        xi = x.clone().requires_grad_(True)
        out, log_a = model.forward_alpha(xi)
        (grad,) = torch.autograd.grad(out[:, 3].sum(), xi, retain_graph=True)
        (grad_a,) = torch.autograd.grad(log_a.sum(), xi, allow_unused=True)
        outs[mode] = (out.detach(), grad, grad_a)
    for mode in outs:  # one classifier's values whatever the gradient
        assert torch.allclose(outs[mode][0], outs["exact"][0])
    assert outs["gray"][2] is None  # alpha is a constant in the backward pass
    assert outs["exact"][2] is not None and float(outs["exact"][2].abs().sum()) > 0
    assert not torch.allclose(outs["gray"][1], outs["exact"][1])
    xi = x.clone().requires_grad_(True)
    (want,) = torch.autograd.grad(torch.log_softmax(abc(xi), 1)[:, 3].sum(), xi)
    assert torch.allclose(outs["transfer-abc"][1], want, atol=1e-6)


# ------------------------------------------------------------------------------------------------ training
def _cfg(**kw):
    from mixzoo.methods.adaptive.training import TrainConfig

    return TrainConfig(**{"setting": "C", "epochs": 2, "eps": EPS, "batch_size": 32, "steps": [2, 3], "lr": 1e-3,
                          "width": 8, "blocks": 1, **kw})


@pytest.mark.slow
def test_training_is_deterministic_and_resumes_after_a_kill(pair, train_data, tmp_path):
    from mixzoo.methods.adaptive.training import TrainRun, train

    abc, rbc = pair
    x, y = train_data[0][:96], train_data[1][:96]
    a = train(abc, rbc, x, y, _cfg(ema=0.8), run=TrainRun(progress=False))
    b = train(abc, rbc, x, y, _cfg(ema=0.8), run=TrainRun(progress=False))
    assert all(torch.equal(a.state[k], b.state[k]) for k in a.state)
    other = train(abc, rbc, x, y, _cfg(ema=0.8, seed=1), run=TrainRun(progress=False))
    assert not all(torch.equal(a.state[k], other.state[k]) for k in a.state)

    class Killed(Exception):
        pass

    def kill(epoch):
        raise Killed(epoch)

    ckpt = tmp_path / "run.training.pt"
    with pytest.raises(Killed):
        train(abc, rbc, x, y, _cfg(ema=0.8), run=TrainRun(checkpoint=ckpt, progress=False, on_epoch=kill))
    resumed = train(abc, rbc, x, y, _cfg(ema=0.8), run=TrainRun(checkpoint=ckpt, progress=False))
    assert resumed.resumed_epochs == 1
    assert all(torch.equal(a.state[k], resumed.state[k]) for k in a.state)
    assert [h["loss"] for h in resumed.history] == [h["loss"] for h in a.history]
    with pytest.raises(InputError, match="other training options"):
        train(abc, rbc, x, y, _cfg(ema=0.8, lr=5e-4), run=TrainRun(checkpoint=ckpt, progress=False))
    with pytest.raises(InputError, match="already holds 2 epochs"):
        train(abc, rbc, x, y, _cfg(ema=0.8, epochs=1), run=TrainRun(checkpoint=ckpt, progress=False))


@pytest.mark.slow
def test_training_resumes_inside_an_epoch(pair, train_data, tmp_path):
    """A kill between mid-epoch checkpoints loses only the batches since the last one; the resumed run ends with the
    uninterrupted run's weights and loss history (an epoch of the whole train split is long on a CPU)."""
    from mixzoo.methods.adaptive.training import TrainRun, train

    abc, rbc = pair
    x, y = train_data[0][:96], train_data[1][:96]  # 6 batches of 16 per epoch
    cfg = dict(ema=0.8, batch_size=16)
    a = train(abc, rbc, x, y, _cfg(**cfg), run=TrainRun(progress=False))

    class Killed(Exception):
        pass

    seen = []

    def kill(epoch, b):
        seen.append((epoch, b))
        if (epoch, b) == (1, 5):  # after the checkpoint at batch 4 of the second epoch, before its end
            raise Killed

    ckpt = tmp_path / "not" / "made" / "yet" / "run.training.pt"  # `mix --out` may name a new folder
    with pytest.raises(Killed):
        train(abc, rbc, x, y, _cfg(**cfg), run=TrainRun(checkpoint=ckpt, progress=False, checkpoint_every=2,
                                                        on_batch=kill))
    assert torch.load(ckpt, weights_only=True)["mid"]["batch"] == 4
    redone = []
    resumed = train(abc, rbc, x, y, _cfg(**cfg), run=TrainRun(checkpoint=ckpt, progress=False, checkpoint_every=2,
                                                              on_batch=lambda e, b: redone.append((e, b))))
    assert (resumed.resumed_epochs, resumed.resumed_batches) == (1, 4)
    assert redone == [(1, 5), (1, 6)]
    assert all(torch.equal(a.state[k], resumed.state[k]) for k in a.state)
    assert [h["loss"] for h in resumed.history] == [h["loss"] for h in a.history]
    with pytest.raises(Killed):
        train(abc, rbc, x, y, _cfg(**cfg, epochs=3), run=TrainRun(
            checkpoint=ckpt, progress=False, checkpoint_every=4,
            on_batch=lambda e, b: (_ for _ in ()).throw(Killed()) if b == 5 else None))
    with pytest.raises(InputError, match="2 epochs and part of the next.*epochs >= 3"):
        train(abc, rbc, x, y, _cfg(**cfg), run=TrainRun(checkpoint=ckpt, progress=False))
    with pytest.raises(InputError, match="checkpoint_every"):
        train(abc, rbc, x, y, _cfg(**cfg), run=TrainRun(progress=False, checkpoint_every=-1))


@pytest.mark.parametrize("setting", ["A", "B"])
def test_training_learns_to_raise_alpha_on_attacked_inputs(pair, train_data, setting):
    from mixzoo.methods.adaptive.training import TrainRun, train

    abc, rbc = pair
    x, y = train_data
    res = train(abc, rbc, x[:160], y[:160], _cfg(setting=setting, epochs=3, width=16),
                run=TrainRun(val=(x[160:], y[160:]), progress=False))
    last = res.history[-1]
    assert last["alpha_attacked"] > last["alpha_clean"] + 0.01
    assert set(last) >= {"loss", "ce", "bce", "val_clean", "val_attacked"}


def test_bad_options_are_refused_before_work(tmp_path):
    from mixzoo.methods import fit

    for opts, match in [({"setting": "Z"}, "option setting"), ({"epochs": 0}, "option epochs"),
                        ({"steps": [5, 2]}, "option steps"), ({"alpha_min": 0.9, "alpha_max": 0.5}, "alpha_min"),
                        ({"pseudo_labels": "x"}, "pseudo_labels"), ({"ema": 1.5}, "option ema"),
                        ({"alpha_min": "serch"}, "alpha_min .* a number or 'search'"),
                        ({"alpha_min": "search", "robust_drop": -1}, "robust_drop"),
                        ({"checkpoint_every": -1}, "option checkpoint_every")]:
        with pytest.raises(InputError, match=match):
            fit("adaptive-smoothing", "digits-std", "digits-pgd", options=opts, out=tmp_path / "c.toml",
                eps=EPS, progress=False)
    with pytest.raises(InputError, match="takes no option 'lr_schedule'"):
        fit("adaptive-smoothing", "digits-std", "digits-pgd", options={"lr_schedule": 1}, out=tmp_path / "c.toml")
    with pytest.raises(InputError, match="pass out="):
        fit("adaptive-smoothing", "digits-std", "digits-pgd", options={}, eps=EPS, progress=False)
    assert not list(tmp_path.iterdir())


# ------------------------------------------------------------------------------------------------ the card
def test_card_round_trip_and_weight_hash(fitted, pair):
    import hashlib
    import os
    import shutil

    from mixzoo.core.card import MixCard

    res, root = fitted
    card = MixCard.load(root / "card.toml")
    assert card.method == "adaptive-smoothing" and card.params["setting"] == "C"
    name = card.params["weights_file"]
    assert card.weights[name] == hashlib.sha256((root / name).read_bytes()).hexdigest()
    umask = os.umask(0)
    os.umask(umask)
    # an ordinary file's permissions: others can read the weights they are given with the card
    assert (root / name).stat().st_mode & 0o777 == 0o666 & ~umask == (root / "card.toml").stat().st_mode & 0o777
    assert card.data["split"] == "train"
    abc, rbc = pair
    x = torch.rand(5, 1, 8, 8)
    built, again = card.mixing_method.build(abc, rbc, card), res.card.mixing_method.build(abc, rbc, res.card)
    with torch.no_grad():
        assert torch.equal(built(x), again(x))
    assert len(res.card.params["history"]) == FIT_OPTIONS["epochs"]
    bad = root / "tampered"
    bad.mkdir()
    shutil.copy(root / "card.toml", bad / "card.toml")
    shutil.copy(root / "card.arrays.json", bad / "card.arrays.json")  # the card's large arrays stay beside it
    blob = bytearray((root / name).read_bytes())
    blob[-1] ^= 1
    (bad / name).write_bytes(bytes(blob))
    with pytest.raises(InputError, match="does not belong to this card"):
        MixCard.load(bad / "card.toml").mixing_method.build(abc, rbc, MixCard.load(bad / "card.toml"))
    data = card.to_dict()
    del data["adaptive-smoothing"]["weights_file"]
    with pytest.raises(InputError, match="weights_file"):
        MixCard.from_dict(data)


def test_save_as_carries_the_weights_under_the_new_name(fitted, pair, tmp_path):
    """A trained card copied under another name (how the zoo publishes cards) brings its weight file, renamed and
    still hashed; an altered weight file stops the copy before anything is written."""
    from mixzoo.core.card import MixCard

    _, root = fitted
    card = MixCard.load(root / "card.toml")
    dest = tmp_path / "zoo" / "digits-as-c.toml"
    card.save_as(dest)
    copy = MixCard.load(dest)
    assert copy.params["weights_file"] == "digits-as-c.mixing-network.safetensors"
    assert list(copy.weights) == [copy.params["weights_file"]] and list(copy.weights.values()) == list(
        card.weights.values()
    )
    assert sorted(p.name for p in dest.parent.iterdir()) == ["digits-as-c.arrays.json",  # its large arrays
                                                              "digits-as-c.mixing-network.safetensors",
                                                              "digits-as-c.toml"]
    abc, rbc = pair
    x = torch.rand(4, 1, 8, 8)
    with torch.no_grad():
        assert torch.equal(card.mixing_method.build(abc, rbc, card)(x), copy.mixing_method.build(abc, rbc, copy)(x))
    # the same classifier, so the same cache key: the copy reuses the evaluations cached for the original
    assert copy.mixing_method.key_parts(copy) == card.mixing_method.key_parts(card)
    (dest.parent / copy.params["weights_file"]).write_bytes(b"not the weights")
    with pytest.raises(InputError, match="does not belong to this card"):
        copy.save_as(tmp_path / "again" / "x.toml")
    assert not (tmp_path / "again").exists()


def test_bounds_from_the_card_apply_at_evaluation(fitted, pair):
    from mixzoo.core.card import MixCard

    _, root = fitted
    card = MixCard.load(root / "card.toml")
    card.params.update(alpha_min=0.84, alpha_max=0.99)
    model = card.mixing_method.build(*pair, card)
    with torch.no_grad():
        a = model.alpha(torch.rand(20, 1, 8, 8))
    assert float(a.min()) >= 0.84 and float(a.max()) <= 0.99


def test_alpha_only_attack_lowers_alpha(fitted, pair):
    from mixzoo.core.card import MixCard
    from mixzoo.methods.adaptive.attacks import AttackBall, alpha_apgd
    from mixzoo.zoo.data import load_dataset

    _, root = fitted
    card = MixCard.load(root / "card.toml")
    model = card.mixing_method.build(*pair, card)
    d = load_dataset("digits", "evaluation", n=30)
    adv = alpha_apgd(model, d.images, d.labels, AttackBall(EPS, "Linf", 10), base="none", w=1.0,
                     generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert float(model.alpha(adv).mean()) < float(model.alpha(d.images).mean())


def test_bench_runs_the_extra_attacks_and_verify_rebuilds_the_card(fitted):
    from mixzoo.evaluation.bench import bench
    from mixzoo.evaluation.verify import verify_report

    _, root = fitted
    rep = bench(str(root / "card.toml"), attack="apgd", attack_options={"n_iter": 4, "n_target_classes": 2}, n=30,
                eps=EPS, curve=None, baseline=None, cache_dir=root / "cache", progress=False,
                out=root / "bench", save_adversarial=True)
    text = (root / "bench" / "report.md").read_text()
    for name in ("setting-d", "alpha-only", "apgd-gray", "transfer-abc", "transfer-rbc", "square"):
        assert f"{name}:" in text
    assert rep is not None
    checked = verify_report(root / "bench")  # the card's weight file is found next to its recorded path
    assert checked.passed and any(r.name == "Adaptive smoothing" for r in checked.rows)


def test_alpha_apgd_draws_its_random_starts_per_example(fitted, pair, one_thread):
    """``adaptive-smoothing-apgd`` given the examples' indices: the same point for every example whatever the batch
    size and order; without indices its draws follow the batch."""
    from mixzoo.core.card import MixCard
    from mixzoo.core.plugins import lookup
    from mixzoo.zoo.data import load_dataset

    _, root = fitted
    card = MixCard.load(root / "card.toml")
    model = card.mixing_method.build(*pair, card)
    d = load_dataset("digits", "evaluation", n=24)
    index = torch.arange(100, 124)
    cls = lookup("attack", "adaptive-smoothing-apgd")

    def run(bs: int, order: torch.Tensor, with_index: bool = True) -> torch.Tensor:
        attack = cls(eps=0.3, norm="Linf", seed=3, n_iter=3, n_target_classes=1, batch_size=bs)
        res = attack.run(model, d.images[order], d.labels[order], progress=False,
                         index=index[order] if with_index else None)
        out = torch.empty_like(res.adv_images)
        out[order] = res.adv_images
        return out

    ident, perm = torch.arange(24), torch.randperm(24, generator=torch.Generator().manual_seed(0))
    whole = run(24, ident)
    assert (whole != d.images).flatten(1).any(dim=1).sum() >= 12  # most examples broken: their points are compared
    torch.testing.assert_close(run(7, perm), whole, rtol=0, atol=1e-6)
    assert not torch.allclose(run(7, perm, with_index=False), whole, rtol=0, atol=1e-6)


@pytest.mark.slow
def test_extra_attacks_are_independent_of_the_batch_size(fitted, one_thread):
    """Setting D and the attack on the mixing network alone draw their random starts per example, like
    every other component: two batch sizes give the same outcome and the same point for every example."""
    from mixzoo.evaluation.bench import bench

    _, root = fitted
    runs = {bs: bench(str(root / "card.toml"), attack="apgd", attack_options={"n_iter": 3, "n_target_classes": 1},
                      n=24, eps=EPS, curve=None, baseline=None, cache_dir=root / f"cache-bs{bs}", progress=False,
                      batch_size=bs, save_adversarial=True) for bs in (24, 7)}
    mixed = {bs: r.row("adaptive-smoothing") for bs, r in runs.items()}
    assert mixed[24].robust_outcomes == mixed[7].robust_outcomes
    assert "1" in mixed[24].robust_outcomes and "0" in mixed[24].robust_outcomes  # the comparison has content
    a, b = (runs[bs].adversarial["adaptive-smoothing"] for bs in (24, 7))
    order_a, order_b = a["index"].argsort(), b["index"].argsort()
    assert torch.equal(a["index"][order_a], b["index"][order_b])
    torch.testing.assert_close(a["images"][order_a], b["images"][order_b], rtol=0, atol=1e-5)
    by_name = {c["name"]: c for c in mixed[7].components}
    assert {"setting-d", "alpha-only"} <= set(by_name)
    assert not any("per batch" in w for w in mixed[7].warnings), mixed[7].warnings


def test_the_extra_square_is_a_second_restart_not_a_replay(fitted, pair, monkeypatch, one_thread):
    """Square's draws are functions of (seed, example index): at the bench's seed the declared extra Square would
    replay the shared attack's Square point for point and could never break anything new. It runs at seed + 1,
    every other extra attack at the bench's seed."""
    import mixzoo.attacks.runner
    from mixzoo.attacks.square import min_margin_square
    from mixzoo.core.card import MixCard
    from mixzoo.evaluation import bench as bench_module
    from mixzoo.zoo.data import load_dataset

    _, root = fitted
    card = MixCard.load(root / "card.toml")
    model = card.mixing_method.build(*pair, card)
    d = load_dataset("digits", "evaluation", n=16)
    index = torch.arange(16)

    def square(seed: int) -> torch.Tensor:  # the extra's search (mixzoo.attacks.adapters._square_each)
        return min_margin_square(model, d.images, d.labels,
                                 SquareSettings(eps=EPS, n_queries=8, p_init=0.8, seed=seed, loss="logit"),
                                 layer_norm=False, progress=False, index=index).adv_images

    torch.testing.assert_close(square(5), square(5), rtol=0, atol=0)  # the replay the offset avoids
    assert not torch.allclose(square(5), square(6))

    seeds: dict[str, int] = {}
    real = mixzoo.attacks.runner.evaluate

    def recording(model, images, labels, request):
        seeds[request.label] = request.record.seed
        return real(model, images, labels, request)

    monkeypatch.setattr(mixzoo.attacks.runner, "evaluate", recording)
    bench_module.bench(str(root / "card.toml"), attack="apgd", attack_options={"n_iter": 2, "n_target_classes": 1},
                       n=12, eps=EPS, seed=5, curve=None, baseline=None, cache_dir=root / "cache-seeds",
                       progress=False, plots=False)
    extras = {label.split(": ", 1)[1]: seed for label, seed in seeds.items() if ": " in label}
    assert "square" in extras and len(extras) >= 3, seeds  # the comparison below has content
    assert extras.pop("square") == 6
    assert set(extras.values()) == {5}
    assert seeds["Adaptive smoothing"] == 5


def test_mix_by_name_through_the_cli_resumes(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from mixzoo.cli import app

    monkeypatch.setenv("MIXZOO_CACHE", str(tmp_path / "cache"))
    args = ["mix", "--method", "adaptive-smoothing", "--abc", "digits-std", "--rbc", "digits-pgd", "--eps", "0.1",
            "--n-calib", "50", "-O", "setting=A", "-O", "epochs=1", "-O", "n_train=120", "-O", "n_val=20",
            "-O", "steps=2,3", "-O", "width=8", "--out", str(tmp_path / "card.toml"), "--json"]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    weights = tmp_path / "card.mixing-network.safetensors"
    before = weights.read_bytes()
    second = CliRunner().invoke(app, args)  # the checkpoint holds the finished epoch: nothing retrained
    assert second.exit_code == 0, second.output
    assert '"resumed_epochs": 1' in second.output
    assert weights.read_bytes() == before
    bad = CliRunner().invoke(app, [*(("setting=E" if a == "setting=A" else a) for a in args[:-3]), "--out",
                                   str(tmp_path / "x.toml")])
    assert bad.exit_code == 2 and "option setting" in bad.output


def test_ema_is_the_decayed_average_of_the_weights(pair, train_data):
    """One batch, one step: the EMA weights are 0.8 * initial + 0.2 * trained (App. D.1's decay 0.8)."""
    from mixzoo.methods.adaptive.training import TrainRun, train
    from mixzoo.methods.shared.taps import model_taps, tap_shapes
    from mixzoo.methods.shared.training_loop import new_network

    abc, rbc = pair
    x, y = train_data[0][:32], train_data[1][:32]
    live = train(abc, rbc, x, y, _cfg(epochs=1, ema=0.0), run=TrainRun(progress=False)).state
    avg = train(abc, rbc, x, y, _cfg(epochs=1, ema=0.8), run=TrainRun(progress=False)).state
    sg, sh = tap_shapes(abc, model_taps(abc), (1, 8, 8)), tap_shapes(rbc, model_taps(rbc), (1, 8, 8))
    init = new_network([sg["early"][0], sh["early"][0]], [sg["middle"][0], sh["middle"][0]], _cfg()).state_dict()
    for k, v in live.items():
        want = 0.8 * init[k] + 0.2 * v if v.is_floating_point() else v
        assert torch.allclose(avg[k], want, atol=1e-6), k
    assert not all(torch.equal(avg[k], live[k]) for k in live)


def test_published_families_have_default_taps_through_wrappers():
    """timm's BiT ResNetV2 and ConvNeXt (small random ones), wrapped as the loading plugins wrap them."""
    timm = pytest.importorskip("timm")
    from mixzoo.methods.shared.taps import model_taps, tap_shapes

    class Wrapper(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x)

    torch.manual_seed(0)
    for arch, early, middle in [("resnetv2_50x1_bit", (64, 8, 8), (512, 4, 4)),
                                ("convnextv2_atto", (40, 8, 8), (80, 4, 4))]:
        model = Wrapper(timm.create_model(arch, pretrained=False, num_classes=10)).eval()
        taps = model_taps(model)
        assert taps.early.startswith("inner.") and not taps.nhwc
        assert tap_shapes(model, taps, (3, 32, 32)) == {"early": early, "middle": middle}


# ------------------------------------------------------------------------------------------------ alpha_min search
@given(st.lists(st.floats(0, 1), min_size=1, max_size=40), st.floats(-0.1, 1.1))
@settings(max_examples=200, deadline=None)
def test_first_reaching_finds_the_first_index_of_a_monotone_sequence(values, target):
    from mixzoo.methods.adaptive.bounds import first_reaching

    values = sorted(values)
    calls = []

    def robust(i):
        calls.append(i)
        return values[i]

    got = first_reaching(robust, len(values), target)
    reaching = [i for i, v in enumerate(values) if v >= target]
    assert got == (reaching[0] if reaching else len(values) - 1)
    assert len(set(calls)) <= math.ceil(math.log2(len(values))) + 2


@pytest.mark.slow
def test_alpha_min_search_picks_the_smallest_bound_within_the_drop(tmp_path, one_thread):
    """alpha_min=search on the calibration split: the card records every candidate, the chosen one reaches the RBC's
    robust accuracy minus robust_drop and the next smaller candidate tried does not; the RBC's own figure is the
    same attack's."""
    from mixzoo.core.card import MixCard
    from mixzoo.methods import fit

    opts = {**FIT_OPTIONS, "epochs": 1, "alpha_min": "search", "robust_drop": 5.0}
    res = fit("adaptive-smoothing", "digits-std", "digits-pgd", options=opts, out=tmp_path / "card.toml", eps=EPS,
              n_calib=60, seed=0, cache_dir=tmp_path / "cache", progress=False)
    card = MixCard.load(res.path)
    rec = card.params["alpha_min_search"]
    tried = {t["alpha_min"]: t["robust_accuracy"] for t in rec["tried"]}
    chosen = card.params["alpha_min"]
    assert res.summary["alpha_min"] == chosen and chosen in tried
    assert rec["target_robust"] == pytest.approx(rec["rbc_robust"] - 0.05)
    assert rec["n"] == 60 and rec["split"] == "calibration"
    smaller = [a for a in tried if a < chosen]
    if rec["met"]:
        assert tried[chosen] >= rec["target_robust"]
        assert not smaller or tried[max(smaller)] < rec["target_robust"]
    else:
        assert chosen == max(tried) and tried[chosen] < rec["target_robust"]
    assert 2 <= len(tried) <= 6  # a bisection, not the whole grid of 13


# ------------------------------------------------------------------------------------------------ the zoo's cards
@pytest.mark.parametrize("setting", ["A", "B", "C"])
def test_published_fashion_mnist_cards_build_by_name(setting, one_thread):
    """The networks trained on the whole Fashion-MNIST train split (benchmarks/adaptive_smoothing.md) ship as
    published cards: `mixzoo bench fmnist-adaptive-smoothing-c` finds them by name, their weights match the hash,
    and the classifier's alpha stays inside the card's bounds."""
    from mixzoo.core.card import MixCard
    from mixzoo.core.plugins import table
    from mixzoo.zoo.models import load_model

    name = f"fmnist-adaptive-smoothing-{setting.lower()}"
    assert name in table("card")
    card = MixCard.load(name)
    assert card.method == "adaptive-smoothing" and card.params["setting"] == setting and card.data["split"] == "train"
    # `mixzoo sanity` and `mixzoo check` type their card argument as a path: the name must resolve there too
    assert MixCard.load(Path(name)).to_dict() == card.to_dict()
    abc, rbc = load_model(card.abc["name"]), load_model(card.rbc["name"])
    model = card.mixing_method.build(abc, rbc, card)
    x = torch.rand(6, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out, log_a = model.forward_alpha(x)
    assert out.shape == (6, 10) and torch.isfinite(out).all()
    a = log_a.exp()
    assert ((a >= card.params["alpha_min"] - 1e-6) & (a <= card.params["alpha_max"] + 1e-6)).all()
