"""APGD core, margin record and MMAA (paper App. B.1), checked against the installed AutoAttack (pyautoattack)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from autoattack_reference import LN, N_ITER, NaNOff, run_autoattack_apgd
from digits_models import train_digits_mlp
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from mixzoo.attacks import MarginRecord, apgd_ce, apgd_run, mmaa, signed_margin
from mixzoo.attacks.apgd import LOSSES, ApgdSettings, apgd_t, clean_record, effective_n_targets, target_classes
from mixzoo.attacks.margins import layer_norm, ln_signed_margin, selection_key
from mixzoo.attacks.pgd import pgd, project
from mixzoo.core.compat import import_autoattack
from mixzoo.core.errors import InputError
from mixzoo.zoo.data import load_dataset
from mixzoo.zoo.models import load_model

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def digits(one_thread):
    return train_digits_mlp()


@pytest.mark.parametrize("norm,eps", [("Linf", 0.1), ("L2", 0.5)])
def test_apgd_run_follows_autoattack_trajectory(digits, norm, eps):
    """Same seed, same loss: our single run ends with AutoAttack's best losses (step sizes, checkpoints, momentum)."""
    model, x, y = digits
    aa = import_autoattack()
    for loss in ("ce", "dlr"):
        ref = aa.autopgd_base.APGDAttack(model, n_iter=N_ITER, eps=eps, norm=norm, loss=loss, seed=0)
        ref.init_hyperparam(x)
        torch.manual_seed(3)
        _, _, ref_best, _ = ref.attack_single_run(x, y)
        record = MarginRecord.start(x, model(x), y)
        ours = apgd_run(model, x, y, record, ApgdSettings(eps=eps, norm=norm, n_iter=N_ITER, loss=loss),
                        generator=torch.Generator().manual_seed(3))
        torch.testing.assert_close(ours, ref_best, rtol=1e-5, atol=1e-5)


def test_record_is_minimum_over_every_visited_point(digits):
    model, x, y = digits
    seen = []

    def forward(inp):
        out = model(inp)
        seen.append(out.detach())
        return out

    record = MarginRecord.start(x, model(x), y)
    keys = [record.key.clone()]
    apgd_run(forward, x, y, record, ApgdSettings(eps=0.08, n_iter=12, loss="dlr"),
             generator=torch.Generator().manual_seed(0))
    assert len(seen) == 13  # starting point + 12 iterations, no extra pass
    keys += [selection_key(z, signed_margin(z, y), y) for z in seen]
    best = torch.stack(keys).min(dim=0).values
    torch.testing.assert_close(record.key, best)
    torch.testing.assert_close(signed_margin(model(record.x), y), record.margin, rtol=1e-5, atol=1e-6)
    assert record.misclassified.any() and not record.misclassified.all()


def test_misclassified_points_beat_correct_ones():
    labels = torch.tensor([0])
    correct_low_margin = torch.tensor([[1.0, 0.99, -5.0]])  # margin ~ +0.0
    wrong_small = torch.tensor([[0.99, 1.0, -5.0]])  # margin ~ -0.0 but misclassified
    rec = MarginRecord.start(torch.zeros(1, 1, 1, 1), correct_low_margin, labels)
    rec.update(torch.ones(1, 1, 1, 1), wrong_small)
    assert rec.misclassified.item() and rec.x.item() == 1.0
    rec.update(torch.full((1, 1, 1, 1), 0.5), correct_low_margin - torch.tensor([[0.0, 0.0, 9.0]]))
    assert rec.x.item() == 1.0  # a correct point, however low its margin, never replaces a misclassified one


def test_mmaa_margins_not_above_autoattack_points(digits):
    """Per example, MMAA's minimum LN margin <= the LN margin at the point AutoAttack's APGD-CE + APGD-T returns
    (the clean point where it finds nothing); robust accuracy identical."""
    model, x, y = digits
    for norm, eps in (("Linf", 0.1), ("L2", 0.5)):
        res = mmaa(model, x, y, ApgdSettings(eps=eps, norm=norm, n_iter=N_ITER), progress=False)
        x_aa = run_autoattack_apgd(LN(model), x, y, eps, norm)
        with torch.no_grad():
            aa_margin = signed_margin(layer_norm(model(x_aa)), y)
        assert (res.margins <= aa_margin + 1e-5).all()
        assert (res.margins < aa_margin - 1e-3).float().mean() > 0.3  # and it does keep lower margins
        assert res.misclassified.sum() == (model(x_aa).argmax(1) != y).sum()
        assert 0.1 < res.robust_accuracy < 0.6  # eps chosen so that neither 0 nor 100% is robust


@pytest.mark.parametrize("norm,eps", [("Linf", 0.12), ("L2", 0.6)])
def test_mmaa_result_fields_are_consistent(digits, norm, eps):
    model, x, y = digits
    x, y = x[:120], y[:120]
    res = mmaa(model, x, y, ApgdSettings(eps=eps, norm=norm, n_iter=8, n_target_classes=3), batch_size=50,
               progress=False)
    assert res.adv_images.shape == x.shape and res.logits.shape == (120, 10) and res.margins.shape == (120,)
    delta = (res.adv_images - x).flatten(1)
    size = delta.abs().max(1).values if norm == "Linf" else delta.norm(dim=1)
    assert (size <= eps + 1e-5).all() and res.adv_images.min() >= 0 and res.adv_images.max() <= 1
    with torch.no_grad():
        logits = model(res.adv_images)
    torch.testing.assert_close(logits, res.logits, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(signed_margin(layer_norm(logits), y), res.margins, rtol=1e-4, atol=1e-4)
    assert torch.equal(res.misclassified, logits.argmax(1) != y)
    assert ((res.margins < 0) == res.misclassified).all()
    torch.testing.assert_close(res.clean_logits, model(x))
    clean_margin = signed_margin(layer_norm(res.clean_logits), y)
    assert (res.margins <= clean_margin + 1e-6).all()
    assert res.settings["n_target_classes"] == 3 and res.settings["norm"] == norm
    # without LN the margins are those of the raw softmax
    raw = mmaa(model, x, y, ApgdSettings(eps=eps, norm=norm, n_iter=4, n_target_classes=1), layer_norm=False,
               progress=False)
    torch.testing.assert_close(signed_margin(model(raw.adv_images), y), raw.margins, rtol=1e-4, atol=1e-4)


def test_mmaa_adds_no_forward_or_backward_pass(digits):
    model, x, y = digits
    x, y = x[:40], y[:40]
    counts = {"grad_examples": 0}

    class Counting(nn.Module):
        def forward(self, inp):
            if torch.is_grad_enabled():
                counts["grad_examples"] += inp.shape[0]
            return model(inp)

    n_iter, targets, restarts = 5, 3, 2
    mmaa(Counting(), x, y, ApgdSettings(eps=0.1, n_iter=n_iter, n_target_classes=targets, n_restarts=restarts),
         progress=False, attack_all=True)
    # every example, every run: the start point and n_iter steps, one forward+backward each
    assert counts["grad_examples"] == restarts * (1 + targets) * 40 * (n_iter + 1)


def test_mmaa_seeded_runs_reproduce(digits):
    model, x, y = digits
    x, y = x[:60], y[:60]
    cfg = ApgdSettings(eps=0.1, n_iter=6, n_target_classes=2, seed=1)
    a, b = mmaa(model, x, y, cfg, progress=False), mmaa(model, x, y, cfg, progress=False)
    c = mmaa(model, x, y, replace(cfg, seed=2), progress=False)
    assert torch.equal(a.adv_images, b.adv_images) and torch.equal(a.margins, b.margins)
    assert not torch.equal(a.adv_images, c.adv_images)


def test_mmaa_top_k_layer_norm(digits):
    model, x, y = digits
    res = mmaa(model, x[:30], y[:30], ApgdSettings(eps=0.1, n_iter=3, n_target_classes=1), top_k=4, progress=False)
    expected = signed_margin(layer_norm(model(res.adv_images), top_k=4), y[:30])
    torch.testing.assert_close(expected, res.margins, rtol=1e-4, atol=1e-4)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), eps=st.floats(0.01, 0.5), norm=st.sampled_from(["Linf", "L2"]),
       loss=st.sampled_from(sorted(LOSSES)))
def test_apgd_stays_in_ball_and_box(seed, eps, norm, loss):
    gen = torch.Generator().manual_seed(seed)
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 6))
    x = torch.rand(5, 3, 2, 2, generator=gen)
    y = torch.randint(0, 6, (5,), generator=gen)
    target = target_classes(model(x), y, 1)[:, 0]
    record = MarginRecord.start(x, model(x), y)
    apgd_run(model, x, y, record, ApgdSettings(eps=eps, norm=norm, n_iter=7, loss=loss), target=target, generator=gen)
    delta = (record.x - x).flatten(1)
    size = delta.abs().max(1).values if norm == "Linf" else delta.norm(dim=1)
    assert (size <= eps * (1 + 1e-5) + 1e-7).all()
    assert record.x.min() >= 0 and record.x.max() <= 1
    assert (target != y).all()


def test_target_classes_skip_the_true_label():
    logits = torch.tensor([[5.0, 4.0, 3.0, 2.0, 1.0], [1.0, 5.0, 4.0, 3.0, 2.0]])
    labels = torch.tensor([0, 2])  # second example is misclassified: top class 1, true class 2
    assert target_classes(logits, labels, 3).tolist() == [[1, 2, 3], [1, 3, 4]]


def test_bad_inputs(digits):
    model, x, y = digits
    x, y = x[:10], y[:10]
    cases = [
        (dict(images=x * 2), "\\[0, 1\\]"),
        (dict(images=x[:, 0]), "4 dimensions"),
        (dict(images=(x * 16).long()), "floating point"),
        (dict(labels=y[:9]), "9 entries for 10 examples"),
        (dict(labels=y + 10), "must lie in \\[0, 10\\)"),
        (dict(eps=0.0), "epsilon must be positive"),
        (dict(eps=-1.0), "epsilon must be positive"),
        (dict(norm="L1"), "unknown norm 'L1'"),
        (dict(n_iter=0), "n_iter"),
    ]
    for change, message in cases:
        kw = dict(images=x, labels=y, eps=0.1, norm="Linf", n_iter=2)
        kw.update(change)
        images, labels = kw.pop("images"), kw.pop("labels")
        with pytest.raises(InputError, match=message) as info:
            mmaa(model, images, labels, ApgdSettings(**kw), progress=False)
        assert "\n" not in str(info.value)
    with pytest.raises(InputError, match="at least 4 classes"):
        mmaa(nn.Sequential(nn.Flatten(), nn.Linear(64, 3)), x, y % 3, ApgdSettings(eps=0.1, n_iter=2), progress=False)
    res = mmaa(nn.Sequential(nn.Flatten(), nn.Linear(64, 3)), x, y % 3,
               ApgdSettings(eps=0.1, n_iter=2, n_target_classes=0), progress=False)
    assert res.settings["n_target_classes"] == 0


def test_nan_model_is_reported(digits):
    model, x, y = digits
    x, y = x[:20], y[:20]
    with pytest.raises(InputError, match="model returned NaN logits for 3 examples"):
        mmaa(NaNOff(model, clean_nan=3), x, y, ApgdSettings(eps=0.01, n_iter=2), progress=False)
    # reported at the first step that meets NaN: the 19 clean-correct examples' batch (the misclassified one is
    # attacked in a batch of its own, later)
    with pytest.raises(InputError, match="NaN logits for 19 examples during the attack"):
        mmaa(NaNOff(model), x, y, ApgdSettings(eps=0.2, n_iter=2, n_target_classes=1), progress=False)
    with pytest.raises(InputError, match="NaN"):
        apgd_ce(NaNOff(model), x, y, ApgdSettings(eps=0.2, n_iter=2)).check_finite()


def test_attack_all_changes_only_flipped_examples(digits):
    """The still-correct examples get identical points either way; Algorithm 1 only uses those (see mmaa)."""
    model, x, y = digits
    cfg = ApgdSettings(eps=0.1, n_iter=10, n_target_classes=3)
    full, lean = mmaa(model, x, y, cfg, attack_all=True, progress=False), mmaa(model, x, y, cfg, progress=False)
    assert torch.equal(full.misclassified, lean.misclassified)
    kept = ~full.misclassified
    assert torch.equal(full.adv_images[kept], lean.adv_images[kept])
    assert torch.equal(full.margins[kept], lean.margins[kept])
    assert (full.margins[~kept] <= lean.margins[~kept]).all()
    assert (full.margins[~kept] < lean.margins[~kept]).any()
    assert lean.settings["attack_all"] is False


@pytest.fixture(scope="module")
def zoo_digits(one_thread):
    """The zoo's standard digits classifier (8x8 grey images in [0, 1]) and 120 evaluation images."""
    data = load_dataset("digits", "evaluation", n=120)
    return load_model("digits-std"), data.images, data.labels


# ------------------------------------------------------------------------------------------------------ APGD
def _correct(model, x, y):
    """The examples the model classifies right (AutoAttack attacks only those)."""
    with torch.no_grad():
        keep = model(x).argmax(1) == y
    return model, x[keep], y[keep]


@pytest.mark.parametrize("norm,eps,loss", [("Linf", 0.05, "ce"), ("L2", 0.3, "dlr")])
def test_apgd_checkpoints_at_100_iterations_follow_autoattack(zoo_digits, norm, eps, loss):
    """AutoAttack's checkpoints p_j for n_iter = 100 (first after int(0.22 n) = 22 steps, then shrinking by
    int(0.03 n) = 3 down to int(0.06 n) = 6; n = 30 cannot tell 0.22 from 0.2): same seed, same best losses."""
    model, x, y = zoo_digits
    x, y = x[:60], y[:60]
    aa = import_autoattack()
    ref = aa.autopgd_base.APGDAttack(model, n_iter=100, eps=eps, norm=norm, loss=loss, seed=0)
    ref.init_hyperparam(x)
    torch.manual_seed(5)
    _, _, ref_best, _ = ref.attack_single_run(x, y)
    rec = clean_record(model, x, y)
    ours = apgd_run(model, x, y, rec, ApgdSettings(eps=eps, norm=norm, n_iter=100, loss=loss),
                    generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(ours, ref_best, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("norm,eps", [("Linf", 0.07), ("L2", 0.35)])
def test_apgd_ce_restarts_and_rho_follow_autoattack(zoo_digits, norm, eps):
    """With two restarts (random starts drawn one after the other from one seeded stream, the second restart only on
    the examples still correct) and rho = 0.5, the examples broken are exactly AutoAttack's APGD-CE's."""
    model, x, y = zoo_digits
    x, y = x[:120], y[:120]
    aa = import_autoattack()
    ref = aa.autopgd_base.APGDAttack(model, n_restarts=2, n_iter=20, eps=eps, norm=norm, loss="ce", seed=0, rho=0.5)
    with torch.no_grad():
        ref_wrong = model(ref.perturb(x, y)).argmax(1) != y
    rec = apgd_ce(model, x, y, ApgdSettings(eps=eps, norm=norm, n_iter=20, n_restarts=2, seed=0, rho=0.5))
    assert 0 < int(ref_wrong.sum()) < len(y)
    assert torch.equal(rec.misclassified, ref_wrong)


@pytest.mark.parametrize("norm,eps", [("Linf", 0.05), ("L2", 0.3)])
def test_apgd_t_targets_restarts_and_rho_follow_autoattack(zoo_digits, norm, eps):
    """APGD-T with three targets (2nd, 3rd, 4th class), two restarts each and rho = 0.5 breaks exactly the examples
    AutoAttack's APGD-T breaks (same seed)."""
    model, x, y = zoo_digits
    x, y = x[:60], y[:60]
    aa = import_autoattack()
    ref = aa.autopgd_base.APGDAttack_targeted(model, n_restarts=2, n_iter=20, eps=eps, norm=norm, seed=0, rho=0.5,
                                              n_target_classes=3)
    with torch.no_grad():
        ref_wrong = model(ref.perturb(x, y)).argmax(1) != y
    rec = apgd_t(model, x, y,
                 ApgdSettings(eps=eps, norm=norm, n_iter=20, n_target_classes=3, n_restarts=2, seed=0, rho=0.5))
    assert 0 < int(ref_wrong.sum()) < len(y)
    assert torch.equal(rec.misclassified, ref_wrong)


def test_apgd_t_takes_its_targets_from_the_loss_logits(zoo_digits):
    """With a (judged, loss) pair the target of APGD-T is the highest non-true class of the LOSS logits (the ones the
    targeted DLR loss is computed on), here made different from the judged logits' by a bias."""
    model, x, y = _correct(*zoo_digits)
    x, y = x[:40], y[:40]
    with torch.no_grad():
        judged = model(x)
    masked = judged.scatter(1, y[:, None], float("-inf"))
    # the bias lifts the judged 3rd class above everything but the true class: a different runner-up
    third = masked.topk(2, dim=1).indices[:, 1]
    bias = torch.zeros_like(judged).scatter(1, third[:, None], 1e3)

    def forward(inp):
        out = model(inp)
        return out, out + bias

    by_hand = (judged + bias).scatter(1, y[:, None], float("-inf")).argmax(1)
    assert torch.equal(by_hand, third) and not torch.equal(by_hand, masked.argmax(1))
    ours = apgd_t(forward, x, y, ApgdSettings(eps=0.1, n_iter=6, n_target_classes=1, seed=0))
    ref = clean_record(forward, x, y)
    apgd_run(forward, x, y, ref, ApgdSettings(eps=0.1, n_iter=6, loss="dlr-targeted"), target=by_hand,
             generator=torch.Generator().manual_seed(0))
    assert torch.equal(ours.x, ref.x)


def test_apgd_ce_passes_rho_to_every_run(zoo_digits):
    """apgd_ce(rho=0.5) visits the points of a single APGD run with rho = 0.5 from the same seeded stream (rho is
    the oscillation threshold of the step-size checkpoints), and rho = 0.75 would visit others."""
    model, x, y = _correct(*zoo_digits)
    x, y = x[:40], y[:40]
    ours = apgd_ce(model, x, y, ApgdSettings(eps=0.1, n_iter=40, seed=0, rho=0.5))
    runs = {}
    for rho in (0.5, 0.75):
        runs[rho] = clean_record(model, x, y)
        apgd_run(model, x, y, runs[rho], ApgdSettings(eps=0.1, n_iter=40, loss="ce", rho=rho),
                 generator=torch.Generator().manual_seed(0))
    assert not torch.equal(runs[0.5].x, runs[0.75].x)
    assert torch.equal(ours.x, runs[0.5].x)


def test_apgd_t_runs_every_restart_of_a_target_before_the_next_target(zoo_digits):
    """AutoAttack's APGD-T loop order: for each target (2nd, 3rd highest class) all restarts, drawing the random
    starts from one seeded stream, each run on the examples not yet misclassified; rebuilt here from single runs."""
    model, x, y = _correct(*zoo_digits)
    x, y = x[:60], y[:60]
    eps, n_iter = 0.08, 8
    ours = apgd_t(model, x, y, ApgdSettings(eps=eps, n_iter=n_iter, n_target_classes=2, n_restarts=2, seed=0))
    with torch.no_grad():
        order = model(x).argsort(dim=1, descending=True)  # all correct: column 0 is the true class
    ref = clean_record(model, x, y)
    gen = torch.Generator().manual_seed(0)
    for j in (1, 2):
        for _ in range(2):
            idx = torch.nonzero(~ref.misclassified).squeeze(1)
            part = ref.subset(idx)
            apgd_run(model, x[idx], y[idx], part, ApgdSettings(eps=eps, n_iter=n_iter, loss="dlr-targeted"),
                     target=order[idx, j], generator=gen)
            ref.merge(idx, part)
    assert 0 < int(ref.misclassified.sum()) < len(y)
    assert torch.equal(ours.x, ref.x)


class PartlyFlat(nn.Module):
    """A linear model whose output is detached (no input gradient) where the first pixel is above 0.5."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 5)

    def forward(self, x):
        out = self.lin(x.flatten(1))
        return torch.where(x[:, 0, 0, 0, None] > 0.5, out.detach(), out)


def test_zero_gradient_flag_marks_exactly_the_examples_without_gradient():
    """``zero_grad`` flags examples whose loss gradient is all zero at the starting point (gradient masking), and
    only those."""
    torch.manual_seed(0)
    model = PartlyFlat()
    flat = torch.tensor([True, False, False, True, False, True])
    x = torch.rand(6, 1, 4, 4, generator=torch.Generator().manual_seed(1)) * 0.5 + 0.25
    x[:, 0, 0, 0] = torch.where(flat, 0.9, 0.1)  # eps = 0.01 never crosses 0.5
    y = torch.tensor([0, 1, 2, 3, 4, 0])
    rec = apgd_ce(model, x, y, ApgdSettings(eps=0.01, n_iter=2), attack_all=True)
    assert rec.zero_grad.tolist() == flat.tolist()


def test_apgd_refuses_counts_that_would_attack_nothing(zoo_digits):
    """n_restarts = 0 or a negative number of targets would run no attack at all and report the clean accuracy as
    robust: both are refused with a one-line error."""
    model, x, y = zoo_digits
    with pytest.raises(InputError, match="n_restarts"):
        apgd_ce(model, x[:5], y[:5], ApgdSettings(eps=0.1, n_iter=2, n_restarts=0))
    with pytest.raises(InputError, match="n_restarts"):
        apgd_t(model, x[:5], y[:5], ApgdSettings(eps=0.1, n_iter=2, n_restarts=0))
    with pytest.raises(InputError, match="n_target_classes"):
        apgd_t(model, x[:5], y[:5], ApgdSettings(eps=0.1, n_iter=2, n_target_classes=-1))


# ------------------------------------------------------------------------------------------------------- PGD
def test_pgd_linf_random_start_is_uniform_in_the_ball():
    """Madry et al.'s random start: delta uniform in [-eps, eps] per pixel (both signs), before any step; with a
    zero step size the returned point is that start."""
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    x = torch.full((50, 1, 8, 8), 0.5)
    y = torch.zeros(50, dtype=torch.long)
    delta = pgd(model, x, y, eps=0.1, steps=1, step_size=0.0, generator=torch.Generator().manual_seed(0)) - x
    assert delta.abs().max() <= 0.1 + 1e-6
    assert float((delta < 0).double().mean()) == pytest.approx(0.5, abs=0.03)
    assert float(delta.abs().mean()) == pytest.approx(0.05, abs=0.003)  # E|U(-eps, eps)| = eps / 2


def test_pgd_l2_step_follows_the_normalised_gradient():
    """One L2 step from x without random start: x + step * g / ||g||_2 (g the cross-entropy gradient computed
    here), inside the ball and the box."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 4))
    x = torch.rand(5, 1, 4, 4, generator=torch.Generator().manual_seed(1)) * 0.5 + 0.25
    y = torch.tensor([0, 1, 2, 3, 0])
    xr = x.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(nn.functional.cross_entropy(model(xr), y), xr)
    expected = x + 0.2 * g / g.flatten(1).norm(dim=1).view(-1, 1, 1, 1)
    got = pgd(model, x, y, eps=0.5, steps=1, step_size=0.2, norm="L2", random_start=False)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)


class Bowl(nn.Module):
    """Two classes, label 0: the cross-entropy is largest at x = 0.53 (logit 0 is 100 (x - 0.53)^2), so signed
    steps from x = 0.5 oscillate around it."""

    def forward(self, x):
        z0 = 100.0 * (x.flatten(1)[:, :1] - 0.53) ** 2
        return torch.cat([z0, torch.zeros_like(z0)], dim=1)


def test_pgd_default_step_is_two_and_a_half_eps_over_steps_by_hand():
    """Default step 2.5 eps / steps (Madry et al.), checked where the ball does not absorb it: three L-inf steps of
    size a = 0.25 / 3 from 0.5 go up, down, up (the maximiser 0.53 lies within a of 0.5): the result is 0.5 + a."""
    x = torch.full((1, 1, 1, 1), 0.5)
    got = pgd(Bowl(), x, torch.tensor([0]), eps=0.1, steps=3, random_start=False)
    assert float(got) == pytest.approx(0.5 + 2.5 * 0.1 / 3, abs=1e-6)


def test_pgd_refuses_a_zero_radius():
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 4))
    with pytest.raises(InputError, match="epsilon must be positive"):
        pgd(model, torch.rand(2, 1, 4, 4), torch.tensor([0, 1]), eps=0.0)


@pytest.mark.parametrize(("steps", "step_size", "match"), [(0, None, "steps"), (-3, None, "steps"),
                                                           (True, None, "steps"), (2.0, None, "steps"),
                                                           (5, -0.1, "step_size"), (5, math.nan, "step_size")])
def test_pgd_refuses_step_counts_and_sizes_that_attack_nothing(steps, step_size, match):
    """``steps=0`` divided by zero for the default step, a negative count returned the random start unattacked."""
    x = torch.rand(2, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    with pytest.raises(InputError, match=match):
        pgd(nn.Flatten(), x, torch.zeros(2, dtype=torch.long), eps=0.1, steps=steps, step_size=step_size)




# ------------------------------------------------------------------------------------------ margin record
def test_an_argmax_tie_against_the_label_is_a_misclassification():
    """argmax picks the first of tied classes; with the label second the prediction is wrong, the signed margin is
    0 and the key is shifted by -2 (margins.py docstring: ties are resolved in the attacker's favour)."""
    logits, labels = torch.tensor([[1.0, 1.0, 0.0]]), torch.tensor([1])
    assert logits.argmax(1).item() == 0
    margin = signed_margin(logits, labels)
    assert margin.item() == 0.0
    assert selection_key(logits, margin, labels).item() == -2.0
    record = MarginRecord.start(torch.zeros(1, 1, 1, 1), logits, labels)
    assert record.misclassified.item()
    # a correct point with a positive margin is replaced by the tie, never the other way round
    record = MarginRecord.start(torch.zeros(1, 1, 1, 1), torch.tensor([[0.0, 3.0, 0.0]]), labels)
    assert not record.misclassified.item()
    record.update(torch.ones(1, 1, 1, 1), logits)
    assert record.misclassified.item() and record.x.item() == 1.0


def test_an_equal_key_keeps_the_earlier_point():
    """update() keeps points with a *lower* key: an offer with the same logits leaves the record's point alone."""
    logits, labels = torch.tensor([[2.0, 0.5, -1.0], [0.0, 1.0, 3.0]]), torch.tensor([0, 1])
    record = MarginRecord.start(torch.zeros(2, 1, 1, 1), logits, labels)
    record.update(torch.ones(2, 1, 1, 1), logits.clone())
    assert record.x.flatten().tolist() == [0.0, 0.0]


def test_nan_at_any_visited_point_is_remembered():
    labels = torch.tensor([0, 1])
    finite = torch.tensor([[2.0, 0.0], [0.0, 2.0]])
    record = MarginRecord.start(torch.zeros(2, 1, 1, 1), finite, labels)
    record.update(torch.ones(2, 1, 1, 1), torch.tensor([[float("nan"), 0.0], [0.0, 1.0]]))
    record.update(torch.ones(2, 1, 1, 1), finite)  # a later finite point does not clear the flag
    assert record.nan.tolist() == [True, False]
    with pytest.raises(InputError, match="NaN logits for 1 examples during the attack"):
        record.check_finite()


def test_a_single_nan_logit_at_the_clean_point_is_refused():
    with pytest.raises(InputError, match="NaN logits for 1 examples"):
        MarginRecord.start(torch.zeros(2, 1, 1, 1), torch.tensor([[float("nan"), 1.0, 2.0], [0.0, 1.0, 2.0]]),
                           torch.tensor([2, 2]))


def test_subset_and_merge_carry_the_nan_and_zero_grad_flags():
    logits = torch.tensor([[3.0, 0.0, 0.0]] * 4)
    labels = torch.zeros(4, dtype=torch.long)
    record = MarginRecord.start(torch.zeros(4, 1, 1, 1), logits, labels)
    record.nan[1] = True
    record.zero_grad[2] = True
    idx = torch.tensor([1, 2])
    part = record.subset(idx)
    assert part.nan.tolist() == [True, False] and part.zero_grad.tolist() == [False, True]
    part.update(torch.ones(2, 1, 1, 1), torch.tensor([[3.0, 0.0, 0.0], [float("nan"), 0.0, 0.0]]))
    record.merge(idx, part)
    assert record.nan.tolist() == [False, True, True, False]
    assert record.zero_grad.tolist() == [False, False, True, False]


# ------------------------------------------------------------------------------------------------- MMAA
def _count_grad_examples(model):
    counts = {"n": 0}

    class Counting(nn.Module):
        def forward(self, inp):
            if torch.is_grad_enabled():
                counts["n"] += inp.shape[0]
            return model(inp)

    return Counting(), counts


def test_mmaa_runs_apgd_t_with_a_single_target_class(digits):
    model, x, y = digits
    x, y = x[:20], y[:20]
    counting, counts = _count_grad_examples(model)
    res = mmaa(counting, x, y, ApgdSettings(eps=0.1, n_iter=3, n_target_classes=1), progress=False, attack_all=True)
    assert res.settings["n_target_classes"] == 1
    assert counts["n"] == (1 + 1) * 20 * (3 + 1)  # APGD-CE and one APGD-T run, start point + 3 steps each


def test_mmaa_attack_loss_sees_the_top_k_layer_norm(digits):
    """With top_k the attacked model is h^LN with LN over the top-k logits (App. D.7): MMAA's APGD-CE is APGD-CE on
    (raw logits, LN_top_k(raw logits)) with the matching margin."""
    model, x, y = digits
    x, y = x[:40], y[:40]
    res = mmaa(model, x, y, ApgdSettings(eps=0.1, n_iter=6, n_target_classes=0), top_k=3, progress=False,
               attack_all=True)

    def forward(inp):
        out = model(inp)
        return out, layer_norm(out, 3)

    record = apgd_ce(forward, x, y, ApgdSettings(eps=0.1, n_iter=6, seed=0), attack_all=True,
                     margin_fn=ln_signed_margin(3))
    assert torch.equal(res.adv_images, record.x) and torch.equal(res.margins, record.margin)


def test_mmaa_batches_are_independent_and_seeded_alike(digits):
    """Each batch's components use random streams seeded with ``seed`` (as AutoAttack does), so a run in batches
    equals separate runs on the batches."""
    model, x, y = digits
    x, y = x[:40], y[:40]
    cfg, kw = ApgdSettings(eps=0.1, n_iter=4, n_target_classes=1), dict(batch_size=20, progress=False)
    whole = mmaa(model, x, y, cfg, **kw)
    parts = [mmaa(model, x[a:a + 20], y[a:a + 20], cfg, **kw) for a in (0, 20)]
    assert torch.equal(whole.adv_images, torch.cat([p.adv_images for p in parts]))
    assert torch.equal(whole.margins, torch.cat([p.margins for p in parts]))


class TiedTopTwo(nn.Module):
    """Logits (t, t, 0, 0) with t = 1 + |x|^2: classes 0 and 1 tie at every input."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = 1.0 + x.flatten(1).pow(2).sum(1, keepdim=True)
        return t * torch.tensor([1.0, 1.0, 0.0, 0.0])


def test_mmaa_counts_a_tie_against_the_label_as_misclassified():
    """MMAAResult.misclassified is logits.argmax(1) != labels: with the label second of two tied classes the
    prediction is wrong although the signed margin is exactly 0."""
    x = torch.rand(3, 1, 2, 2, generator=torch.Generator().manual_seed(0))
    labels = torch.tensor([1, 1, 0])
    res = mmaa(TiedTopTwo(), x, labels, ApgdSettings(eps=0.05, n_iter=2, n_target_classes=0), progress=False)
    assert res.margins.tolist() == [0.0, 0.0, 0.0]
    assert res.misclassified.tolist() == [True, True, False]
    assert res.robust_accuracy == pytest.approx(1 / 3)


K = 10


def test_l2_projection_keeps_points_inside_the_ball():
    g = torch.Generator().manual_seed(0)
    delta = torch.randn(5, 3, 4, 4, generator=g)
    norms = delta.flatten(1).norm(dim=1)
    eps = float(norms.median())
    out = project(delta, eps, "L2")
    inside = norms <= eps
    assert torch.equal(out[inside], delta[inside])  # not pushed out to the sphere
    assert torch.allclose(out[~inside].flatten(1).norm(dim=1), torch.full((int((~inside).sum()),), eps))


def test_pgd_default_step_is_two_and_a_half_eps_over_steps():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, K))
    x = torch.rand(4, 1, 4, 4, generator=torch.Generator().manual_seed(1))
    y = torch.arange(4)
    default = pgd(model, x, y, eps=0.1, steps=4, generator=torch.Generator().manual_seed(2))
    explicit = pgd(model, x, y, eps=0.1, steps=4, step_size=2.5 * 0.1 / 4, generator=torch.Generator().manual_seed(2))
    other = pgd(model, x, y, eps=0.1, steps=4, step_size=0.001, generator=torch.Generator().manual_seed(2))
    assert torch.equal(default, explicit) and not torch.equal(default, other)


def test_apgd_t_never_targets_the_true_class():
    assert effective_n_targets(10, 20) == 9 and effective_n_targets(10, 9) == 9 and effective_n_targets(10, 3) == 3
    assert effective_n_targets(4, 100) == 3
