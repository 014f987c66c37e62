"""Training (mixzoo/training/train.py): the TRADES adversary, the learning-rate schedule, the training loop and its
objectives, weight averaging, the evaluation metrics and the augmentation.

Expected values come from the definitions (papers, docstrings) computed independently in the test; training is
checked step by step on a tiny network for one or two epochs, never trained to convergence."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import mixzoo.training.train as training
from mixzoo.attacks.pgd import pgd
from mixzoo.training.model_metrics import _ln_margin
from mixzoo.training.objectives import mart_loss, trades_adversary
from mixzoo.zoo.data import load_dataset


# ------------------------------------------------------------------------------------------------- helpers
def _tiny_net(seed: int = 0, batch_norm: bool = False) -> nn.Module:
    """A small 8x8 -> 10 classifier with weights drawn from its own generator (leaves the global RNG alone)."""
    g = torch.Generator().manual_seed(seed)
    if batch_norm:
        net = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 10))
    else:
        net = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.Tanh(), nn.Linear(16, 10))
    with torch.no_grad():
        for name, p in net.named_parameters():
            if not (batch_norm and name.startswith("1.")):  # batch norm keeps weight 1, bias 0
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return net


def _images(n: int = 16, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Synthetic 1x8x8 images in [0.3, 0.7] (away from the box, so that x + h (x' - x) needs no clipping)."""
    g = torch.Generator().manual_seed(seed)
    return 0.3 + 0.4 * torch.rand(n, 1, 8, 8, generator=g), torch.randint(0, 10, (n,), generator=g)


def _kl_rows(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """KL(softmax(p) || softmax(q)) per row, from its definition."""
    logp, logq = F.log_softmax(p_logits, dim=1), F.log_softmax(q_logits, dim=1)
    return (logp.exp() * (logp - logq)).sum(dim=1)


# ------------------------------------------------------------------------------------ TRADES inner maximisation
def _reference_trades_adversary(model: nn.Module, x: torch.Tensor, eps: float, steps: int, step_size: float,
                                seed: int) -> torch.Tensor:
    """Zhang et al. 2019, Alg. 1 as in the authors' code: start at x + 0.001 N(0, I), ascend KL(f(x) || f(x')) by
    signed gradient steps, project onto the L-inf ball around x, clip to [0, 1] after every step."""
    g = torch.Generator().manual_seed(seed)
    criterion_kl = nn.KLDivLoss(reduction="sum")
    with torch.no_grad():
        p_natural = F.softmax(model(x), dim=1)
    x_adv = x.detach() + 0.001 * torch.randn(x.shape, generator=g)
    x_adv = torch.clamp(x_adv, 0.0, 1.0)
    for _ in range(steps):
        x_adv.requires_grad_()
        loss_kl = criterion_kl(F.log_softmax(model(x_adv), dim=1), p_natural)
        grad = torch.autograd.grad(loss_kl, [x_adv])[0]
        x_adv = x_adv.detach() + step_size * torch.sign(grad.detach())
        x_adv = torch.min(torch.max(x_adv, x - eps), x + eps)
        x_adv = torch.clamp(x_adv, 0.0, 1.0)
    return x_adv.detach()


@pytest.mark.parametrize("step_size", [None, 0.03])
def test_trades_adversary_is_the_reference_signed_kl_ascent(step_size):
    """Same start, same signed ascent on the KL term, same projection and [0, 1] clip as the reference code; the
    default step is 2.5 eps / steps, as for :func:`mixzoo.attacks.pgd.pgd`."""
    model = _tiny_net()
    x = load_dataset("digits", "evaluation", n=32).images  # real digits: many pixels on the box's edges
    eps, steps = 0.1, 4
    got = trades_adversary(model, x, eps, steps, torch.Generator().manual_seed(3), step_size=step_size)
    ref = _reference_trades_adversary(model, x, eps, steps, 2.5 * eps / steps if step_size is None else step_size, 3)
    torch.testing.assert_close(got, ref, atol=1e-6, rtol=0)
    with torch.no_grad():  # and the ascent did its job: the KL term grew from its start near 0
        assert float(_kl_rows(model(x), model(got)).sum()) > 10 * float(_kl_rows(model(x), model(
            (x + 0.001 * torch.randn(x.shape, generator=torch.Generator().manual_seed(3))).clamp(0, 1))).sum())


# ------------------------------------------------------------------------------------------ learning-rate schedule
def test_lr_schedule_small_case_by_hand():
    """10 steps, warm-up 0.2: w = 2 warm-up steps (1/2, 1), then the cosine from 1 towards 0 over 8 steps."""
    got = [training._lr_factor(s, 10, 0.2) for s in range(10)]
    expected = [0.5, 1.0] + [0.5 * (1 + math.cos(math.pi * k / 8)) for k in range(8)]
    assert got == pytest.approx(expected, abs=1e-12)
    assert [training._lr_factor(s, 4, 0.0) for s in range(4)] == pytest.approx(
        [1.0, 0.5 * (1 + math.cos(math.pi / 4)), 0.5, 0.5 * (1 + math.cos(3 * math.pi / 4))], abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(total=st.integers(1, 300), warmup=st.floats(0.0, 0.6))
def test_lr_schedule_warms_up_linearly_peaks_at_one_and_decays(total, warmup):
    f = [training._lr_factor(s, total, warmup) for s in range(total)]
    w = int(warmup * total)
    assert all(0.0 < v <= 1.0 + 1e-12 for v in f)  # never a zero learning-rate step, never above the recipe's lr
    assert f[:w] == pytest.approx([(s + 1) / w for s in range(w)])  # linear warm-up, reaching 1 at its last step
    if w < total:
        assert f[w] == pytest.approx(1.0)  # the cosine starts at the peak
        assert all(a >= b - 1e-12 for a, b in zip(f[w:], f[w + 1:], strict=False))
        assert f[-1] == pytest.approx(0.5 * (1 + math.cos(math.pi * (total - 1 - w) / (total - w))))


# ------------------------------------------------------------------------------------------------ the training loop
def _record_training(monkeypatch, recipe: training.Recipe) -> dict:
    """Train ``recipe`` with _objective and AdamW wrapped: what each step attacked (images, labels, eps), the
    learning rate of each optimizer step and the weights right before / after it."""
    calls: list[dict] = []
    lrs: list[float] = []
    before: list[list[torch.Tensor]] = []
    after: list[list[torch.Tensor]] = []
    initial: list[list[torch.Tensor]] = []
    real_objective = training._objective

    def objective(model, recipe_, x, y, eps, gen, helper=None):
        calls.append({"x": x.detach().clone(), "y": y.clone(), "eps": eps})
        return real_objective(model, recipe_, x, y, eps, gen, helper)

    class RecordingAdamW(torch.optim.AdamW):
        def __init__(self, params, **kw):
            params = list(params)
            initial.append([p.detach().clone() for p in params])
            super().__init__(params, **kw)

        def step(self, closure=None):
            lrs.append(self.param_groups[0]["lr"])
            before.append([p.detach().clone() for g in self.param_groups for p in g["params"]])
            out = super().step(closure)
            after.append([p.detach().clone() for g in self.param_groups for p in g["params"]])
            return out

    monkeypatch.setattr(training, "_objective", objective)
    monkeypatch.setattr(torch.optim, "AdamW", RecordingAdamW)
    result = training.train_model(recipe, save=False, evaluate=False, progress=False)
    return {"result": result, "calls": calls, "lrs": lrs, "before": before, "after": after, "initial": initial[0]}


def _tiny_recipe(**kw) -> training.Recipe:
    base = dict(name="tiny-loop", method="pgd", epochs=2, train_n=100, batch_size=32, lr=1e-2, warmup=0.3,
                eps=0.2, eps_warmup=0.5, attack_steps=1, arch_kwargs={"widths": (4,), "hidden": 8, "input_hw": 8})
    return training.RECIPES["digits-pgd"].replace(**{**base, **kw})


def test_training_steps_follow_the_recipe(monkeypatch, one_thread):
    """100 images, batches of 32, 2 epochs: 4 batches per epoch (the last one short), 8 steps. Every epoch shows
    each training image exactly once, in a new order; the learning rate follows warm-up + cosine; the attack's
    eps is ``train_eps`` (when given) ramped linearly over the first ``eps_warmup`` of the steps."""
    recipe = _tiny_recipe(train_eps=0.15)
    rec = _record_training(monkeypatch, recipe)
    train = load_dataset("digits", "train", n=100)
    flat = train.images.flatten(1)
    total, per_epoch = 8, 4
    assert len(rec["calls"]) == len(rec["lrs"]) == total
    rows = []
    for call in rec["calls"]:
        match = (call["x"].flatten(1)[:, None, :] == flat[None]).all(-1)  # batch image -> training row
        assert (match.sum(1) == 1).all()
        idx = match.float().argmax(1)
        assert torch.equal(call["y"], train.labels[idx])
        rows.append(idx)
    assert [len(r) for r in rows] == [32, 32, 32, 4] * 2
    epochs = [torch.cat(rows[e * per_epoch:(e + 1) * per_epoch]) for e in range(2)]
    for order in epochs:
        assert sorted(order.tolist()) == list(range(100))
    assert not torch.equal(epochs[0], epochs[1])  # reshuffled every epoch
    w = int(0.3 * total)
    factors = [(s + 1) / w if s < w else 0.5 * (1 + math.cos(math.pi * (s - w) / (total - w))) for s in range(total)]
    assert rec["lrs"] == pytest.approx([recipe.lr * f for f in factors], rel=1e-12)
    ramp_steps = 0.5 * total
    assert [c["eps"] for c in rec["calls"]] == pytest.approx([0.15 * min(1.0, (s + 1) / ramp_steps)
                                                              for s in range(total)], rel=1e-12)


def test_awp_weight_shift_is_undone_before_every_optimizer_step(monkeypatch, one_thread):
    """Adversarial weight perturbation takes the gradient at w + v but applies it to w: the optimizer always
    starts from the weights the previous step left (the initial ones at first), never from the shifted ones."""
    rec = _record_training(monkeypatch, _tiny_recipe(awp=0.05, epochs=1))
    starts = [rec["initial"]] + rec["after"][:-1]
    for start, seen in zip(starts, rec["before"], strict=True):
        for a, b in zip(start, seen, strict=True):
            torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-6)


# ---------------------------------------------------------------------------------------------- step objectives
def test_objectives_are_their_papers_losses(one_thread):
    """One step's loss for each method, against the definitions: PGD-AT = CE at the PGD example (Madry et al.),
    TRADES = CE(f(x)) + beta * mean KL(f(x) || f(x')), MART on the PGD example, HAT = TRADES + gamma * CE at the
    helper example x + h (x' - x) labelled by the helper model at x'."""
    net, helper = _tiny_net(0), _tiny_net(1)
    x, y = _images()
    eps, steps, beta, gamma, h = 0.05, 2, 3.0, 0.7, 2.0
    base = training.RECIPES["digits-pgd"].replace(attack_steps=steps, trades_beta=beta, helper="digits-std",
                                                   helper_weight=gamma, helper_scale=h)

    def loss(method: str) -> torch.Tensor:
        fn = training._objective(net, base.replace(method=method), x, y, eps, torch.Generator().manual_seed(5),
                                 helper if method == "hat" else None)
        return fn().detach()

    got = {m: loss(m) for m in ("standard", "pgd", "mart", "trades", "hat")}
    x_pgd = pgd(net, x, y, eps=eps, steps=steps, generator=torch.Generator().manual_seed(5))
    x_trades = _reference_trades_adversary(net, x, eps, steps, 2.5 * eps / steps, 5)
    with torch.no_grad():
        torch.testing.assert_close(got["standard"], F.cross_entropy(net(x), y))
        torch.testing.assert_close(got["pgd"], F.cross_entropy(net(x_pgd), y))
        torch.testing.assert_close(got["mart"], mart_loss(net(x), net(x_pgd), y, beta))
        trades = F.cross_entropy(net(x), y) + beta * _kl_rows(net(x), net(x_trades)).mean()
        torch.testing.assert_close(got["trades"], trades)
        x_help = x + h * (x_trades - x)
        assert 0 <= float(x_help.min()) and float(x_help.max()) <= 1
        hat = trades + gamma * F.cross_entropy(net(x_help), helper(x_trades).argmax(1))
        torch.testing.assert_close(got["hat"], hat)


def test_attack_inside_a_training_step_runs_in_eval_mode(one_thread):
    """The inner maximisation sees batch norm's running statistics and does not update them (TRADES reference
    code: model.eval() for the attack, model.train() after); the outer loss is then computed in train mode."""
    net = _tiny_net(0, batch_norm=True).train()
    bn = net[1]
    with torch.no_grad():
        bn.running_mean.uniform_(-0.3, 0.3)
        bn.running_var.uniform_(0.5, 2.0)
    stats = (bn.running_mean.clone(), bn.running_var.clone(), bn.num_batches_tracked.clone())
    x, y = _images()
    recipe = training.RECIPES["digits-pgd"].replace(attack_steps=3)
    fn = training._objective(net, recipe, x, y, 0.05, torch.Generator().manual_seed(2))
    assert net.training
    assert torch.equal(bn.running_mean, stats[0]) and torch.equal(bn.running_var, stats[1])
    assert int(bn.num_batches_tracked) == int(stats[2])
    x_ref = pgd(net.eval(), x, y, eps=0.05, steps=3, generator=torch.Generator().manual_seed(2))
    net.train()
    torch.testing.assert_close(fn().detach(), F.cross_entropy(net(x_ref), y).detach())


# ---------------------------------------------------------------------------------------------- weight averaging
def test_weight_average_is_an_ema_with_a_warmed_up_decay():
    """avg_t = d avg_{t-1} + (1 - d) w_t with d = min(decay, (1 + k) / (10 + k)), k the number already averaged;
    the first update copies the weights."""
    assert training._weight_average(nn.Linear(1, 1), 0.0) is None
    for decay in (0.9, 0.1):
        lin = nn.Linear(1, 1, bias=False)
        avg = training._weight_average(lin, decay)
        expected = None
        for k, value in enumerate([1.0, 3.0, -2.0, 5.0]):
            with torch.no_grad():
                lin.weight.fill_(value)
            avg.update_parameters(lin)
            d = min(decay, (1 + k) / (10 + k))
            expected = value if expected is None else d * expected + (1 - d) * value
            assert float(avg.module.weight.detach()) == pytest.approx(expected, rel=1e-6)


# ------------------------------------------------------------------------------------------- evaluation metrics
def _reference_ln_margin(logits: torch.Tensor) -> np.ndarray:
    """Top-1 minus top-2 probability of softmax(LN(logits)), LN = (z - mean) / sqrt(unbiased var + 1e-8) (the
    authors' normalize_topk)."""
    x = logits.double()
    z = (x - x.mean(1, keepdim=True)) / (x.var(1, unbiased=True, keepdim=True) + 1e-8).sqrt()
    p = np.sort(z.softmax(1).numpy(), axis=1)
    return p[:, -1] - p[:, -2]


def test_ln_margin_uses_the_layer_norm_of_the_logits():
    logits = torch.randn(50, 10, generator=torch.Generator().manual_seed(0)) * 2
    np.testing.assert_allclose(_ln_margin(logits).numpy(), _reference_ln_margin(logits), atol=1e-6)


def test_margin_metrics_from_their_definitions():
    """Accuracies, the median margin of clean mistakes, for each beta the (1 - beta)-quantile of the margins of
    attacked examples still classified correctly, and the share of clean mistakes below that quantile."""
    g = torch.Generator().manual_seed(0)
    n = 201
    clean = torch.randn(n, 10, generator=g) * 2
    labels = clean.argmax(1)
    labels[:51] = (labels[:51] + 1) % 10  # 51 clean mistakes (an odd count: one median)
    adv = torch.randn(n, 10, generator=g) * 2
    adv[torch.arange(n), labels] += torch.rand(n, generator=g) * 4  # most, not all, attacked examples stay correct
    out = training.margin_metrics(labels, clean, adv)
    correct, a_correct = (clean.argmax(1) == labels).numpy(), (adv.argmax(1) == labels).numpy()
    m_clean, m_adv = _reference_ln_margin(clean), _reference_ln_margin(adv)
    mistakes = m_clean[~correct]
    assert out["n"] == n and out["clean"] == pytest.approx(150 / 201) and out["pgd"] == pytest.approx(a_correct.mean())
    assert out["clean_mistake_margin_median"] == pytest.approx(float(np.median(mistakes)), abs=1e-6)
    assert 0 < a_correct.mean() < 1
    for beta, key in ((0.985, "0.015"), (0.95, "0.05")):
        q = float(np.quantile(m_adv[a_correct], 1 - beta))
        assert out[f"attacked_correct_margin_q{key}"] == pytest.approx(q, abs=1e-6)
        assert out[f"fixable_mistakes_q{key}"] == pytest.approx(float((mistakes < q).mean()))
    assert 0 < out["fixable_mistakes_q0.05"] < 1


# ---------------------------------------------------------------------------------------------- augmentation
def test_augment_batch_is_a_padded_crop_at_every_offset_possibly_mirrored():
    """Each output is the image zero-padded by p and cropped at an offset (dy, dx) in {0..2p}^2, or the mirror
    image of that crop; all (2p + 1)^2 offsets occur."""
    p, n = 1, 600
    x = torch.rand(n, 1, 4, 4, generator=torch.Generator().manual_seed(1)) + 0.5  # no zero pixels
    out = training.augment_batch(x, p, torch.Generator().manual_seed(0))
    padded = F.pad(x, (p,) * 4)
    seen = set()
    for i in range(n):
        hits = {(dy, dx) for dy in range(2 * p + 1) for dx in range(2 * p + 1)
                for crop in [padded[i, :, dy:dy + 4, dx:dx + 4]]
                if torch.equal(out[i], crop) or torch.equal(out[i], crop.flip(-1))}
        assert len(hits) == 1
        seen |= hits
    assert seen == {(dy, dx) for dy in range(3) for dx in range(3)}
