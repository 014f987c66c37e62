"""The attack implementations under mutation testing: APGD-CE / APGD-T (``mixzoo/attacks/apgd.py``, Croce & Hein
2020: restarts, targets, rho, the gradient-masking flag, settings), plain PGD (``pgd.py``: random start, L2 step,
settings), the margin record's checks (``margins.py``, paper App. B.1) and the min-margin Square attack
(``square.py``, Andriushchenko et al. 2020, paper App. D.5: square sides, the L2 eta pattern, initialisations, the
L2 proposal, options). Each test pins one behaviour that a plausible one-token bug changed without failing the rest
of the suite. Expected values come from the installed reference AutoAttack (``pyautoattack``), from the reference
Square code's formulas transcribed here, or from hand computations; never from mixzoo's own output."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import mixzoo.attacks.square as square
from mixzoo.attacks.apgd import apgd_ce, apgd_run, apgd_t, clean_record
from mixzoo.attacks.margins import ln_signed_margin, signed_margin
from mixzoo.attacks.pgd import pgd
from mixzoo.compat import import_autoattack
from mixzoo.data import load_dataset
from mixzoo.errors import InputError
from mixzoo.models import load_model
from mixzoo.plugins import lookup

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def digits(one_thread):
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
def test_apgd_checkpoints_at_100_iterations_follow_autoattack(digits, norm, eps, loss):
    """AutoAttack's checkpoints p_j for n_iter = 100 (first after int(0.22 n) = 22 steps, then shrinking by
    int(0.03 n) = 3 down to int(0.06 n) = 6; n = 30 cannot tell 0.22 from 0.2): same seed, same best losses."""
    model, x, y = digits
    x, y = x[:60], y[:60]
    aa = import_autoattack()
    ref = aa.autopgd_base.APGDAttack(model, n_iter=100, eps=eps, norm=norm, loss=loss, seed=0)
    ref.init_hyperparam(x)
    torch.manual_seed(5)
    _, _, ref_best, _ = ref.attack_single_run(x, y)
    rec = clean_record(model, x, y)
    ours = apgd_run(model, x, y, rec, eps=eps, norm=norm, n_iter=100, loss=loss,
                    generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(ours, ref_best, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("norm,eps", [("Linf", 0.07), ("L2", 0.35)])
def test_apgd_ce_restarts_and_rho_follow_autoattack(digits, norm, eps):
    """With two restarts (random starts drawn one after the other from one seeded stream, the second restart only on
    the examples still correct) and rho = 0.5, the examples broken are exactly AutoAttack's APGD-CE's."""
    model, x, y = digits
    x, y = x[:120], y[:120]
    aa = import_autoattack()
    ref = aa.autopgd_base.APGDAttack(model, n_restarts=2, n_iter=20, eps=eps, norm=norm, loss="ce", seed=0, rho=0.5)
    with torch.no_grad():
        ref_wrong = model(ref.perturb(x, y)).argmax(1) != y
    rec = apgd_ce(model, x, y, eps=eps, norm=norm, n_iter=20, n_restarts=2, seed=0, rho=0.5)
    assert 0 < int(ref_wrong.sum()) < len(y)
    assert torch.equal(rec.misclassified, ref_wrong)


@pytest.mark.parametrize("norm,eps", [("Linf", 0.05), ("L2", 0.3)])
def test_apgd_t_targets_restarts_and_rho_follow_autoattack(digits, norm, eps):
    """APGD-T with three targets (2nd, 3rd, 4th class), two restarts each and rho = 0.5 breaks exactly the examples
    AutoAttack's APGD-T breaks (same seed)."""
    model, x, y = digits
    x, y = x[:60], y[:60]
    aa = import_autoattack()
    ref = aa.autopgd_base.APGDAttack_targeted(model, n_restarts=2, n_iter=20, eps=eps, norm=norm, seed=0, rho=0.5,
                                              n_target_classes=3)
    with torch.no_grad():
        ref_wrong = model(ref.perturb(x, y)).argmax(1) != y
    rec = apgd_t(model, x, y, eps=eps, norm=norm, n_iter=20, n_target_classes=3, n_restarts=2, seed=0, rho=0.5)
    assert 0 < int(ref_wrong.sum()) < len(y)
    assert torch.equal(rec.misclassified, ref_wrong)


def test_apgd_t_takes_its_targets_from_the_loss_logits(digits):
    """With a (judged, loss) pair the target of APGD-T is the highest non-true class of the LOSS logits (the ones the
    targeted DLR loss is computed on), here made different from the judged logits' by a bias."""
    model, x, y = _correct(*digits)
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
    ours = apgd_t(forward, x, y, eps=0.1, n_iter=6, n_target_classes=1, seed=0)
    ref = clean_record(forward, x, y)
    apgd_run(forward, x, y, ref, eps=0.1, n_iter=6, loss="dlr-targeted", target=by_hand,
             generator=torch.Generator().manual_seed(0))
    assert torch.equal(ours.x, ref.x)


def test_apgd_ce_passes_rho_to_every_run(digits):
    """apgd_ce(rho=0.5) visits the points of a single APGD run with rho = 0.5 from the same seeded stream (rho is
    the oscillation threshold of the step-size checkpoints), and rho = 0.75 would visit others."""
    model, x, y = _correct(*digits)
    x, y = x[:40], y[:40]
    ours = apgd_ce(model, x, y, eps=0.1, n_iter=40, seed=0, rho=0.5)
    runs = {}
    for rho in (0.5, 0.75):
        runs[rho] = clean_record(model, x, y)
        apgd_run(model, x, y, runs[rho], eps=0.1, n_iter=40, loss="ce", rho=rho,
                 generator=torch.Generator().manual_seed(0))
    assert not torch.equal(runs[0.5].x, runs[0.75].x)
    assert torch.equal(ours.x, runs[0.5].x)


def test_apgd_t_runs_every_restart_of_a_target_before_the_next_target(digits):
    """AutoAttack's APGD-T loop order: for each target (2nd, 3rd highest class) all restarts, drawing the random
    starts from one seeded stream, each run on the examples not yet misclassified; rebuilt here from single runs."""
    model, x, y = _correct(*digits)
    x, y = x[:60], y[:60]
    eps, n_iter = 0.08, 8
    ours = apgd_t(model, x, y, eps=eps, n_iter=n_iter, n_target_classes=2, n_restarts=2, seed=0)
    with torch.no_grad():
        order = model(x).argsort(dim=1, descending=True)  # all correct: column 0 is the true class
    ref = clean_record(model, x, y)
    gen = torch.Generator().manual_seed(0)
    for j in (1, 2):
        for _ in range(2):
            idx = torch.nonzero(~ref.misclassified).squeeze(1)
            part = ref.subset(idx)
            apgd_run(model, x[idx], y[idx], part, eps=eps, n_iter=n_iter, loss="dlr-targeted",
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
    rec = apgd_ce(model, x, y, eps=0.01, n_iter=2, attack_all=True)
    assert rec.zero_grad.tolist() == flat.tolist()


def test_apgd_refuses_counts_that_would_attack_nothing(digits):
    """n_restarts = 0 or a negative number of targets would run no attack at all and report the clean accuracy as
    robust: both are refused with a one-line error."""
    model, x, y = digits
    with pytest.raises(InputError, match="n_restarts"):
        apgd_ce(model, x[:5], y[:5], eps=0.1, n_iter=2, n_restarts=0)
    with pytest.raises(InputError, match="n_restarts"):
        apgd_t(model, x[:5], y[:5], eps=0.1, n_iter=2, n_restarts=0)
    with pytest.raises(InputError, match="n_target_classes"):
        apgd_t(model, x[:5], y[:5], eps=0.1, n_iter=2, n_target_classes=-1)


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


# ---------------------------------------------------------------------------------------------------- Square
class Constant(nn.Module):
    """Always right with the same logits: the search never stops early and every proposal ties."""

    def __init__(self, k: int = 10):
        super().__init__()
        self.k = k

    def forward(self, x):
        out = torch.zeros(len(x), self.k)
        out[:, 0] = 3.0
        out[:, 1] = 1.0
        return out


class _Stop(Exception):
    pass


def _reference_side(norm: str, p: float, c: int, h: int, w: int) -> int:
    """The square side of the reference (pyautoattack/square.py): round(sqrt(p * n_features / c)), at least 1
    (L-inf) or at least 3 and odd (L2), at most the image side."""
    s = int(round(math.sqrt(p * c * h * w / c)))
    if norm == "Linf":
        return min(max(s, 1), h, w)
    s = max(s, 3)
    return min(s + 1 if s % 2 == 0 else s, h, w)


@pytest.mark.parametrize("norm,p_init", [("Linf", 0.1), ("Linf", 0.005), ("L2", 0.005), ("L2", 0.07),
                                         ("L2", 0.3)])
def test_first_square_side_is_the_reference_side_for_colour_images(monkeypatch, norm, p_init):
    """Three channels, 16x16: the first proposal's square has the reference side for p = p_init (the first ten
    ten-thousandths of the budget use p_init): sqrt(p * n_features / c), not sqrt(p * n_features); for L2 at least
    3 and odd."""
    seen = []
    name = "_linf_step" if norm == "Linf" else "_l2_step"

    def spy(*args):
        seen.append(args[3])
        raise _Stop

    monkeypatch.setattr(square, name, spy)
    x = torch.rand(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    with pytest.raises(_Stop):
        square.min_margin_square(Constant(), x, torch.zeros(2, dtype=torch.long), eps=0.1 if norm == "Linf" else 0.5,
                                 norm=norm, n_queries=5000, p_init=p_init, progress=False)
    assert seen == [_reference_side(norm, p_init, 3, 16, 16)]


class FirstQueries(nn.Module):
    """Constant logits; keeps the inputs of the first ``n`` queries."""

    def __init__(self, n: int):
        super().__init__()
        self.n, self.inputs, self.inner = n, [], Constant()

    def forward(self, x):
        if len(self.inputs) < self.n:
            self.inputs.append(x.clone())
        return self.inner(x)


def test_linf_initial_point_is_vertical_stripes_of_plus_minus_eps():
    """Reference L-inf initialisation: x + eps * s with one random sign per (example, channel, column), the same
    down each column, both signs drawn (away from the box's edges, so nothing is clipped)."""
    x = torch.rand(6, 3, 8, 8, generator=torch.Generator().manual_seed(2)) * 0.6 + 0.2
    model = FirstQueries(2)
    square.min_margin_square(model, x, torch.zeros(6, dtype=torch.long), eps=0.1, n_queries=1, progress=False)
    delta = model.inputs[1] - x
    torch.testing.assert_close(delta.abs(), torch.full_like(delta, 0.1), rtol=0, atol=1e-6)
    torch.testing.assert_close(delta, delta[:, :, :1, :].expand_as(delta), rtol=0, atol=1e-6)
    assert (delta > 0).any() and (delta < 0).any()


def test_l2_initial_point_tiles_the_reference_grid():
    """Reference L2 initialisation on 8x8 images: tiles of side h // 5 = 1 starting at (h - 5 s) // 2 = 1, i.e. every
    pixel but row 0 and column 0 moves; the perturbation has L2 norm exactly eps (nothing clipped here)."""
    x = torch.rand(4, 1, 8, 8, generator=torch.Generator().manual_seed(3)) * 0.6 + 0.2
    model = FirstQueries(2)
    square.min_margin_square(model, x, torch.zeros(4, dtype=torch.long), eps=0.5, norm="L2", n_queries=1,
                             progress=False)
    delta = model.inputs[1] - x
    moved = delta.abs() > 1e-7
    assert not moved[:, :, 0, :].any() and not moved[:, :, :, 0].any()
    assert moved[:, :, 1:, 1:].all()
    torch.testing.assert_close(delta.flatten(1).norm(dim=1), torch.full((4,), 0.5), rtol=1e-5, atol=0)


def test_l2_eta_pattern_is_the_reference_one():
    """The L2 square pattern equals the reference ``eta(s)`` (concentric rectangles weighted 1/(k+1)^2, upper half
    positive, lower half negative, unit norm), up to the reference's random transposition."""
    aa = import_autoattack()
    ref = aa.square.SquareAttack(lambda t: t, norm="L2", eps=1.0, device="cpu")
    for s in range(1, 12):
        torch.manual_seed(s)
        want = ref.eta(s)
        ours = square._eta_base(s)
        assert torch.allclose(ours, want, atol=1e-6) or torch.allclose(ours.t(), want, atol=1e-6), s


def test_l2_eta_pattern_is_transposed_half_of_the_time():
    gen = torch.Generator().manual_seed(0)
    base = square._eta_base(5)
    flips = [bool(torch.equal(square._eta(5, gen), base.t())) for _ in range(400)]
    assert 0.4 < sum(flips) / len(flips) < 0.6


def _reference_l2_step(x, x_best, eps, s, vh, vw, vh2, vw2, eta, sign):
    """The reference L2 proposal (pyautoattack/square.py, attack_single_run, L2 branch), transcribed."""
    c = x.shape[1]
    delta_curr = x_best - x
    mask1 = torch.zeros_like(x)
    mask1[:, :, vh:vh + s, vw:vw + s] = 1.0
    norms_window_1 = (delta_curr[:, :, vh:vh + s, vw:vw + s] ** 2).sum(dim=(-2, -1), keepdim=True).sqrt()
    mask2 = torch.zeros_like(x)
    mask2[:, :, vh2:vh2 + s, vw2:vw2 + s] = 1.0
    norms_image = (delta_curr ** 2).flatten(1).sum(dim=1).sqrt().view(-1, 1, 1, 1)
    mask_image = torch.max(mask1, mask2)
    norms_windows = ((delta_curr * mask_image) ** 2).sum(dim=(-2, -1), keepdim=True).sqrt()
    new_deltas = torch.ones([x.shape[0], c, s, s]) * eta.view(1, 1, s, s) * sign
    new_deltas = new_deltas + delta_curr[:, :, vh:vh + s, vw:vw + s] / (1e-12 + norms_window_1)
    new_deltas = new_deltas / (1e-12 + (new_deltas ** 2).sum(dim=(-2, -1), keepdim=True).sqrt()) * (torch.max(
        (eps * torch.ones_like(new_deltas)) ** 2 - norms_image ** 2, torch.zeros_like(new_deltas)) / c
        + norms_windows ** 2).sqrt()
    delta_curr = delta_curr.clone()
    delta_curr[:, :, vh2:vh2 + s, vw2:vw2 + s] = 0.0
    delta_curr[:, :, vh:vh + s, vw:vw + s] = new_deltas + 0
    norm = (delta_curr ** 2).flatten(1).sum(dim=1).sqrt().view(-1, 1, 1, 1)
    return torch.clamp(x + delta_curr / (norm + 1e-12) * eps, 0.0, 1.0)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.1, 2.0), st.integers(1, 3), st.sampled_from([3, 5]), st.data())
def test_l2_proposal_matches_the_reference(seed, eps, c, s, data):
    """The L2 proposal (App. D.5's Square step) equals the reference's: window 1 gets the new eta pattern plus its
    old direction, scaled to the budget (eps^2 - ||delta||^2) / c + ||delta on both windows||^2 per channel,
    window 2 is emptied, the result is rescaled to norm eps and clipped to [0, 1]."""
    gen = torch.Generator().manual_seed(seed)
    hw = 8
    x = torch.rand(3, c, hw, hw, generator=gen)
    delta = torch.randn(x.shape, generator=gen)
    x_best = (x + delta / delta.flatten(1).norm(dim=1).view(-1, 1, 1, 1) * eps * 0.7).clamp(0, 1)
    pos = [data.draw(st.integers(0, hw - s)) for _ in range(4)]
    sign = torch.randint(0, 2, (3, c, 1, 1), generator=gen).float() * 2 - 1
    eta = square._eta_base(s)
    got = square._l2_step(x, x_best, eps, s, (pos[0], pos[1]), (pos[2], pos[3]), eta, sign)
    want = _reference_l2_step(x, x_best, eps, s, pos[0], pos[1], pos[2], pos[3], eta, sign)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_square_evaluation_passes_its_options_on(digits):
    """The ``min-margin-square`` evaluation runs min_margin_square with its own p_init and seed (not the defaults):
    its broken examples are exactly those of the direct call with the same options."""
    model, x, y = digits
    with torch.no_grad():
        right = model(x).argmax(1) == y
    x, y = x[right][:60], y[right][:60]  # the evaluation attacks the clean-correct examples
    for seed, p_init in ((3, 0.3), (0, 0.05)):
        res = lookup("attack", "min-margin-square")(eps=0.15, norm="Linf", seed=seed, n_queries=25,
                                                     p_init=p_init).run(model, x, y, progress=False)
        direct = square.min_margin_square(model, x, y, eps=0.15, n_queries=25, p_init=p_init, seed=seed,
                                          layer_norm=False, progress=False)
        assert torch.equal(res.robust_correct, ~direct.misclassified)
        others = square.min_margin_square(model, x, y, eps=0.15, n_queries=25, p_init=0.8, seed=seed + 1,
                                          layer_norm=False, progress=False)
        assert not torch.equal(direct.misclassified, others.misclassified)


def test_square_top_k_reaches_the_margin(digits):
    """With top_k the tracked margin is that of softmax(LN over the top-k logits) (App. D.7), not of the full LN."""
    model, x, y = digits
    res = square.min_margin_square(model, x[:30], y[:30], eps=0.1, n_queries=10, top_k=3, progress=False)
    torch.testing.assert_close(res.margins, ln_signed_margin(3)(res.logits, y[:30]))
    assert not torch.allclose(res.margins, ln_signed_margin()(res.logits, y[:30]))
    assert not torch.allclose(res.margins, signed_margin(res.logits, y[:30]))


@pytest.mark.parametrize("norm,eps", [("Linf", 0.1), ("L2", 0.5)])
def test_one_examples_search_does_not_depend_on_which_others_are_active(digits, norm, eps):
    """Signs are drawn for the whole batch every iteration (module docstring), so an example's search is the same
    next to an example that is misclassified from the start (never queried) as next to one that stays active."""
    model, x, y = digits
    with torch.no_grad():
        margins = signed_margin(model(x), y)
    wrong = int(torch.nonzero(margins < 0)[0])
    a, b = (int(i) for i in margins.argsort(descending=True)[:2])  # the two safest examples: active throughout
    kw = dict(eps=eps, norm=norm, n_queries=30, seed=0, progress=False)
    beside_wrong = square.min_margin_square(model, x[[a, wrong]], y[[a, wrong]], **kw)
    beside_right = square.min_margin_square(model, x[[a, b]], y[[a, b]], **kw)
    assert not beside_right.misclassified.any() and not torch.equal(beside_right.adv_images[0], x[a])
    assert torch.equal(beside_wrong.adv_images[0], beside_right.adv_images[0])


@pytest.mark.parametrize("norm", ["Linf", "L2"])
def test_square_positions_cover_every_offset_of_a_non_square_image(monkeypatch, norm):
    """On a 5x12 image the square's row offset ranges over 0..h-s and its column offset over 0..w-s, all of them
    (module docstring: all h - s + 1 offsets), for both L2 windows too."""
    seen = []
    name = "_linf_step" if norm == "Linf" else "_l2_step"
    real = getattr(square, name)

    def spy(*args):
        s = args[3]
        windows = [args[4:6]] if norm == "Linf" else [args[4], args[5]]
        seen.extend((s, int(vh), int(vw)) for vh, vw in windows)
        return real(*args)

    monkeypatch.setattr(square, name, spy)
    h, w = 5, 12
    x = torch.rand(2, 1, h, w, generator=torch.Generator().manual_seed(0)) * 0.6 + 0.2
    square.min_margin_square(Constant(), x, torch.zeros(2, dtype=torch.long), eps=0.1 if norm == "Linf" else 0.5,
                             norm=norm, n_queries=400, p_init=0.05, progress=False)
    assert all(0 <= vh <= h - s and 0 <= vw <= w - s for s, vh, vw in seen)
    s = max({s for s, _, _ in seen}, key=[t[0] for t in seen].count)  # the most frequent side
    assert {vh for t, vh, _ in seen if t == s} == set(range(h - s + 1))
    assert {vw for t, _, vw in seen if t == s} == set(range(w - s + 1))


class NaNFromCall(nn.Module):
    """Right with constant logits for the first ``k - 1`` calls, NaN from call ``k`` on."""

    def __init__(self, k: int):
        super().__init__()
        self.k, self.calls = k, 0

    def forward(self, x):
        self.calls += 1
        out = torch.zeros(len(x), 10)
        out[:, 0] = 3.0
        return torch.full_like(out, float("nan")) if self.calls >= self.k else out


def test_square_reports_nan_at_a_proposal():
    """A NaN output at a proposal is an error, never a robust example (NaN compares False with every key)."""
    x = torch.rand(3, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    with pytest.raises(InputError, match="NaN logits for 3 examples during the Square attack"):
        square.min_margin_square(NaNFromCall(3), x, torch.zeros(3, dtype=torch.long), eps=0.1, n_queries=10,
                                 progress=False)


def test_square_signs_are_drawn_per_channel(monkeypatch):
    """Reference Square: each channel of a square (L-inf proposal) and of an L2 initial tile gets its own random
    sign (``random_choice([..., c, 1, 1])``); the L2 tile pattern is shared by the channels."""
    signs = []
    real = square._linf_step

    def spy(*args):
        signs.append(args[6])
        return real(*args)

    monkeypatch.setattr(square, "_linf_step", spy)
    x = torch.rand(4, 3, 8, 8, generator=torch.Generator().manual_seed(4)) * 0.6 + 0.2
    square.min_margin_square(Constant(), x, torch.zeros(4, dtype=torch.long), eps=0.1, n_queries=6, progress=False)
    sign = torch.cat(signs)
    assert sign.shape[1:] == (3, 1, 1) and (sign != sign[:, :1]).any()
    model = FirstQueries(2)
    square.min_margin_square(model, x, torch.zeros(4, dtype=torch.long), eps=0.5, norm="L2", n_queries=1,
                             progress=False)
    delta = model.inputs[1] - x
    torch.testing.assert_close(delta[:, 0].abs(), delta[:, 1].abs(), rtol=1e-4, atol=1e-7)
    assert not torch.allclose(delta[:, 0], delta[:, 1])


def test_square_counts_an_argmax_tie_against_the_label_as_misclassified():
    """``misclassified`` is argmax != label: with the label second of two tied classes the prediction is wrong
    although the signed margin is exactly 0 (as in MMAA)."""

    class Tied(nn.Module):
        def forward(self, x):
            return torch.tensor([1.0, 1.0, 0.0, 0.0]).expand(len(x), 4).clone()

    x = torch.rand(3, 1, 4, 4, generator=torch.Generator().manual_seed(0))
    res = square.min_margin_square(Tied(), x, torch.tensor([1, 1, 0]), eps=0.1, n_queries=3, layer_norm=False,
                                   progress=False)
    assert res.margins.tolist() == [0.0, 0.0, 0.0]
    assert res.misclassified.tolist() == [True, True, False]


def test_square_reports_nan_at_its_initial_point():
    """A NaN output at Square's initial point is an error too: before this check the NaN key dropped the examples
    out of the search and they came back with margin NaN, not misclassified, robust accuracy 1.0."""
    x = torch.rand(3, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    with pytest.raises(InputError, match="NaN logits for 3 examples at the Square attack's initial point"):
        square.min_margin_square(NaNFromCall(2), x, torch.zeros(3, dtype=torch.long), eps=0.1, n_queries=10,
                                 progress=False)


@pytest.mark.parametrize(("steps", "step_size", "match"), [(0, None, "steps"), (-3, None, "steps"),
                                                           (True, None, "steps"), (2.0, None, "steps"),
                                                           (5, -0.1, "step_size"), (5, math.nan, "step_size")])
def test_pgd_refuses_step_counts_and_sizes_that_attack_nothing(steps, step_size, match):
    """``steps=0`` divided by zero for the default step, a negative count returned the random start unattacked."""
    x = torch.rand(2, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    with pytest.raises(InputError, match=match):
        pgd(nn.Flatten(), x, torch.zeros(2, dtype=torch.long), eps=0.1, steps=steps, step_size=step_size)
