"""Minimum-margin Square attack (paper App. D.5): forward queries only, min-margin record, eps-ball, seeds."""

from __future__ import annotations

import math

import pytest
import torch
from digits_models import train_digits_mlp
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import mixzoo.attacks.square as square
import mixzoo.attacks.square_proposals as proposals
from mixzoo.attacks.margins import ln_signed_margin, signed_margin
from mixzoo.attacks.mmaa import MMAAResult
from mixzoo.attacks.result import EvalResult
from mixzoo.attacks.square import SquareSettings, min_margin_square, p_selection, square_queries_needed
from mixzoo.attacks.square_proposals import _eta_base, _l2_init, _l2_step, _linf_init, _linf_step
from mixzoo.core.compat import import_autoattack
from mixzoo.core.errors import InputError
from mixzoo.core.plugins import lookup
from mixzoo.zoo.blackbox import BlackBoxModel, QueryBudgetExceeded
from mixzoo.zoo.data import load_dataset
from mixzoo.zoo.models import load_model

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def digits(one_thread):
    return train_digits_mlp(steps=200)


def _size(delta: torch.Tensor, norm: str) -> torch.Tensor:
    d = delta.flatten(1)
    return d.abs().max(dim=1).values if norm == "Linf" else d.norm(dim=1)


NORM_EPS = [("Linf", 0.1), ("Linf", 0.3), ("L2", 0.5), ("L2", 1.5)]


@pytest.mark.parametrize("norm,eps", NORM_EPS)
def test_result_is_in_ball_and_box_and_consistent(digits, norm, eps):
    model, x, y = digits
    x, y = x[:40], y[:40]
    res = min_margin_square(model, x, y, SquareSettings(eps=eps, norm=norm, n_queries=80), progress=False)
    assert isinstance(res, MMAAResult)
    assert (_size(res.adv_images - x, norm) <= eps * (1 + 1e-5) + 1e-6).all()
    assert res.adv_images.min() >= 0 and res.adv_images.max() <= 1
    with torch.no_grad():
        at_adv = model(res.adv_images)
        clean = model(x)
    # the reported logits and margins are those of the returned point
    torch.testing.assert_close(res.logits, at_adv)
    torch.testing.assert_close(res.margins, ln_signed_margin()(at_adv, y))
    torch.testing.assert_close(res.clean_logits, clean)
    assert torch.equal(res.misclassified, at_adv.argmax(1) != y)
    # the clean image is a visited point, so no margin is above the clean one
    assert (res.margins <= ln_signed_margin()(clean, y) + 1e-6).all()
    assert res.settings["queries"] <= square_queries_needed(len(y), 80)


class Recorder(nn.Module):
    """Logs the signed LN margin of every example the attack queries (batches of one example)."""

    def __init__(self, model: nn.Module, label: torch.Tensor):
        super().__init__()
        self.model, self.label, self.margins = model, label, []

    def forward(self, x):
        out = self.model(x)
        self.margins.append(ln_signed_margin()(out, self.label.expand(len(x))))
        return out


@pytest.mark.parametrize("norm,eps", [("Linf", 0.15), ("L2", 0.8)])
def test_reported_margin_is_the_minimum_over_every_query(digits, norm, eps):
    model, x, y = digits
    for i in range(6):
        rec = Recorder(model, y[i:i + 1])
        res = min_margin_square(rec, x[i:i + 1], y[i:i + 1], SquareSettings(eps=eps, norm=norm, n_queries=60, seed=i),
                                progress=False)
        seen = torch.cat(rec.margins)
        assert len(seen) == res.settings["queries"]
        assert float(res.margins[0]) == pytest.approx(float(seen.min()), abs=1e-6)


def test_breaks_a_weak_model_and_stops_on_misclassified(digits):
    model, x, y = digits
    x, y = x[:100], y[:100]
    with torch.no_grad():
        clean_acc = float((model(x).argmax(1) == y).float().mean())
    res = min_margin_square(model, x, y, SquareSettings(eps=0.3, norm="Linf", n_queries=300), progress=False)
    assert clean_acc > 0.85
    assert res.robust_accuracy < clean_acc - 0.5
    # broken examples are not queried further: far fewer queries than the worst case
    assert res.settings["queries"] < 0.8 * square_queries_needed(len(y), 300)


def test_margins_decrease_with_more_queries_on_average(digits):
    model, x, y = digits
    x, y = x[:60], y[:60]
    few = min_margin_square(model, x, y, SquareSettings(eps=0.1, n_queries=5), progress=False)
    many = min_margin_square(model, x, y, SquareSettings(eps=0.1, n_queries=200), progress=False)
    assert float(many.margins.mean()) < float(few.margins.mean())


@pytest.mark.parametrize("norm", ["Linf", "L2"])
def test_seeded_runs_reproduce(digits, norm):
    model, x, y = digits
    x, y = x[:30], y[:30]
    eps = 0.1 if norm == "Linf" else 0.6
    a = min_margin_square(model, x, y, SquareSettings(eps=eps, norm=norm, n_queries=50, seed=3), progress=False)
    b = min_margin_square(model, x, y, SquareSettings(eps=eps, norm=norm, n_queries=50, seed=3), progress=False)
    c = min_margin_square(model, x, y, SquareSettings(eps=eps, norm=norm, n_queries=50, seed=4), progress=False)
    assert torch.equal(a.adv_images, b.adv_images) and torch.equal(a.margins, b.margins)
    assert not torch.equal(a.adv_images, c.adv_images)


def test_batches_are_independent_of_each_other(digits):
    """Batch k uses seed + its first index: splitting into batches gives the same result as separate calls."""
    model, x, y = digits
    whole = min_margin_square(model, x[:20], y[:20], SquareSettings(eps=0.1, n_queries=40, seed=0), batch_size=10,
                              progress=False)
    second = min_margin_square(model, x[10:20], y[10:20], SquareSettings(eps=0.1, n_queries=40, seed=10),
                               progress=False)
    assert torch.equal(whole.adv_images[10:], second.adv_images)


@pytest.mark.parametrize("norm,eps", [("Linf", 0.1), ("L2", 0.6)])
def test_needs_only_forward_queries(digits, norm, eps):
    model, x, y = digits
    x, y = x[:25], y[:25]
    bb = BlackBoxModel(model)
    with torch.enable_grad():
        res = min_margin_square(bb, x, y, SquareSettings(eps=eps, norm=norm, n_queries=50), progress=False)
    plain = min_margin_square(model, x, y, SquareSettings(eps=eps, norm=norm, n_queries=50), progress=False)
    assert torch.equal(res.adv_images, plain.adv_images)
    assert bb.queries == res.settings["queries"] <= square_queries_needed(25, 50)


def test_budget_too_small_is_refused_before_any_query(digits):
    model, x, y = digits
    bb = BlackBoxModel(model, query_budget=1000)
    with pytest.raises(QueryBudgetExceeded, match=r"needs up to 1020 queries"):
        min_margin_square(bb, x[:20], y[:20], SquareSettings(eps=0.1, n_queries=50), progress=False)
    assert bb.queries == 0


def test_raw_logit_margins_without_layer_norm(digits):
    model, x, y = digits
    res = min_margin_square(model, x[:20], y[:20], SquareSettings(eps=0.1, n_queries=30), layer_norm=False,
                            progress=False)
    with torch.no_grad():
        torch.testing.assert_close(res.margins, signed_margin(model(res.adv_images), y[:20]))


def test_bad_arguments(digits):
    model, x, y = digits
    for kwargs, match in (({"eps": 0.0}, "epsilon"), ({"eps": 0.1, "norm": "L1"}, "norm"),
                          ({"eps": 0.1, "n_queries": 0}, "n_queries"), ({"eps": 0.1, "p_init": 0.0}, "p_init")):
        with pytest.raises(InputError, match=match):
            min_margin_square(model, x[:3], y[:3], SquareSettings(**kwargs), progress=False)
    with pytest.raises(InputError, match="labels"):
        min_margin_square(model, x[:3], y[:2], SquareSettings(eps=0.1), progress=False)


# ------------------------------------------------------------------------------------------ proposal geometry
@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.01, 0.5), st.integers(1, 3), st.integers(4, 12))
def test_linf_proposals_stay_in_ball_and_box(seed, eps, c, hw):
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(5, c, hw, hw, generator=gen)
    best = _linf_init(x, eps, gen)
    for it in range(5):
        s = max(1, min(hw, int(round(math.sqrt(p_selection(0.8, it, 5) * hw * hw)))))
        sign = torch.randint(0, 2, (5, c, 1, 1), generator=gen).float() * 2 - 1
        best = _linf_step(x, best, eps, s, int(torch.randint(0, hw - s + 1, (1,), generator=gen)), 0, sign)
        assert ((best - x).abs() <= eps + 1e-6).all() and best.min() >= 0 and best.max() <= 1


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.05, 3.0), st.integers(1, 3), st.integers(5, 12))
def test_l2_proposals_stay_in_ball_and_box(seed, eps, c, hw):
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(4, c, hw, hw, generator=gen)
    best = _l2_init(x, eps, gen)
    assert (_size(best - x, "L2") <= eps * (1 + 1e-5)).all()
    for _ in range(5):
        s = min(hw, 3 + 2 * int(torch.randint(0, 2, (1,), generator=gen)))
        pos = [int(torch.randint(0, hw - s + 1, (1,), generator=gen)) for _ in range(4)]
        sign = torch.randint(0, 2, (4, c, 1, 1), generator=gen).float() * 2 - 1
        best = _l2_step(x, best, eps, s, (pos[0], pos[1]), (pos[2], pos[3]), _eta_base(s), sign)
        assert (_size(best - x, "L2") <= eps * (1 + 1e-5) + 1e-6).all()
        assert best.min() >= 0 and best.max() <= 1


def test_schedule_and_pattern():
    assert p_selection(0.8, 0, 1000) == 0.8 and p_selection(0.8, 999, 1000) == pytest.approx(0.8 / 512)
    ps = [p_selection(0.8, i, 500) for i in range(500)]
    assert all(a >= b for a, b in zip(ps, ps[1:], strict=False))
    for s in (1, 3, 5, 7):
        assert float(_eta_base(s).pow(2).sum()) == pytest.approx(1.0)


# ------------------------------------------------------------------------------------------ evaluation hook
def test_attack_hook_entry_evaluates_a_model(digits):
    model, x, y = digits
    attack = lookup("attack", "min-margin-square")(eps=0.3, norm="Linf", seed=0, n_queries=100)
    result = attack.run(model, x[:50], y[:50], progress=False)
    assert isinstance(result, EvalResult)
    assert result.robust_accuracy < result.clean_accuracy
    assert not (result.robust_correct & ~result.clean_correct).any()
    broken = ~result.robust_correct & result.clean_correct
    with torch.no_grad():
        assert (model(result.adv_images[broken]).argmax(1) != y[:50][broken]).all()
    assert (_size(result.adv_images - x[:50], "Linf") <= 0.3 + 1e-6).all()
    with pytest.raises(InputError, match="unknown option"):
        lookup("attack", "min-margin-square")(eps=0.3, n_iter=3)


class AwayIsSafer(nn.Module):
    """True-class logit grows with the distance from the clean images: every query is safer than the clean point."""

    def __init__(self, clean: torch.Tensor, labels: torch.Tensor, k: int = 10):
        super().__init__()
        self.clean, self.labels, self.k = clean, labels, k

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(len(x), self.k)
        far = (x - self.clean[: len(x)]).flatten(1).abs().sum(dim=1)
        rows, labels = torch.arange(len(x)), self.labels[: len(x)]
        out[rows, labels] = 0.5 + far
        out[rows, (labels + 1) % self.k] = 0.3  # a runner-up, so that the margin changes under layer norm too
        return out


@pytest.mark.parametrize("norm", ["Linf", "L2"])
def test_the_clean_point_is_returned_when_no_query_beats_it(norm):
    g = torch.Generator().manual_seed(0)
    x = torch.rand(4, 1, 6, 6, generator=g) * 0.8 + 0.1
    y = torch.tensor([0, 3, 5, 9])
    model = AwayIsSafer(x, y)
    res = min_margin_square(model, x, y, SquareSettings(eps=0.1, norm=norm, n_queries=20, seed=0), progress=False)
    assert torch.equal(res.adv_images, x)
    assert torch.equal(res.logits, model(x))



# ------------------------------------------------------------------------------------------ survivors of the audit
def _reference_p_selection(p_init: float, it: int, n_queries: int) -> float:
    """``p_selection`` of the reference Square attack (Andriushchenko et al. 2020, ``rescale_schedule=True``)."""
    it = int(it / n_queries * 10000)
    if 10 < it <= 50:
        return p_init / 2
    if 50 < it <= 200:
        return p_init / 4
    if 200 < it <= 500:
        return p_init / 8
    if 500 < it <= 1000:
        return p_init / 16
    if 1000 < it <= 2000:
        return p_init / 32
    if 2000 < it <= 4000:
        return p_init / 64
    if 4000 < it <= 6000:
        return p_init / 128
    if 6000 < it <= 8000:
        return p_init / 256
    if 8000 < it:
        return p_init / 512
    return p_init


@pytest.mark.parametrize("bound", [10, 50, 200, 500, 1000, 2000, 4000, 6000, 8000])
def test_schedule_boundaries_match_the_reference(bound):
    """Each stage of the schedule ends AT its bound (``10 < it <= 50`` etc.): the bound itself is still in it."""
    for it in (bound - 1, bound, bound + 1):
        assert p_selection(0.8, it, 10_000) == _reference_p_selection(0.8, it, 10_000), it
    assert p_selection(0.8, bound, 10_000) == 2 * p_selection(0.8, bound + 1, 10_000)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 20_000), st.floats(0.01, 1.0), st.data())
def test_schedule_matches_the_reference_for_any_budget(n_queries, p_init, data):
    it = data.draw(st.integers(0, n_queries - 1))
    assert p_selection(p_init, it, n_queries) == _reference_p_selection(p_init, it, n_queries)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.01, 0.4), st.integers(1, 3), st.integers(2, 8), st.data())
def test_linf_step_moves_the_square_to_a_vertex_of_the_ball(seed, eps, c, hw, data):
    """The reference L-inf proposal sets the square to x +- eps (clipped to [0, 1]) wherever x_best was in the ball:
    x_best + 2 eps sign, projected onto [x - eps, x + eps], is the vertex of the ball on that side."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(3, c, hw, hw, generator=gen)
    best = (x + (torch.rand(x.shape, generator=gen) * 2 - 1) * eps).clamp(0, 1)  # anywhere in ball and box
    s = data.draw(st.integers(1, hw))
    vh, vw = data.draw(st.integers(0, hw - s)), data.draw(st.integers(0, hw - s))
    sign = torch.randint(0, 2, (3, c, 1, 1), generator=gen).float() * 2 - 1
    new = _linf_step(x, best, eps, s, vh, vw, sign)
    window = (slice(None), slice(None), slice(vh, vh + s), slice(vw, vw + s))
    torch.testing.assert_close(new[window], (x + eps * sign).clamp(0, 1)[window], rtol=0, atol=1e-6)
    outside = torch.ones_like(x, dtype=torch.bool)
    outside[window] = False
    assert torch.equal(new[outside], best[outside])


class SaturatedScale(nn.Module):
    """Always right with a raw logit margin of 40 + sum(x) >= 40, so softmax(logits) saturates in float32: every
    query has signed margin exactly 1.0 (equal selection keys), and only the logit-margin tie-break can guide the
    search. Logs every output it returns."""

    def __init__(self, labels: torch.Tensor, k: int = 10):
        super().__init__()
        self.labels, self.k, self.outputs = labels, k, []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(len(x), self.k)
        out[torch.arange(len(x)), self.labels[: len(x)]] = 40.0 + x.flatten(1).sum(dim=1)
        self.outputs.append(out.clone())
        return out


def _raw_logit_margin(z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    z = z.double()
    return z.gather(1, y[:, None]).squeeze(1) - z.scatter(1, y[:, None], float("-inf")).amax(dim=1)


@pytest.mark.parametrize("norm,eps", [("Linf", 0.1), ("L2", 0.5)])
def test_equal_keys_go_to_the_lower_logit_margin(norm, eps):
    """Ties of the selection key (a margin saturated at 1.0) go to the lower raw logit margin z_y - max_{i!=y} z_i
    (module docstring): the kept search point is the attack query of smallest logit margin."""
    g = torch.Generator().manual_seed(0)
    x = torch.rand(4, 1, 6, 6, generator=g) * 0.6 + 0.2
    y = torch.tensor([1, 4, 7, 2])
    model = SaturatedScale(y)
    res = min_margin_square(model, x, y, SquareSettings(eps=eps, norm=norm, n_queries=40, seed=0), layer_norm=False,
                            progress=False)
    assert (res.margins == 1.0).all()  # the keys really are all equal
    assert len(model.outputs) == 41  # clean + initial point + 39 proposals, all examples every time (none broken)
    queried = torch.stack([_raw_logit_margin(out, y) for out in model.outputs[1:]])  # (queries, examples)
    returned = _raw_logit_margin(res.logits, y)
    torch.testing.assert_close(returned, queried.min(dim=0).values)
    assert (returned < queried[0]).all()  # the search did move away from Square's initial point
    torch.testing.assert_close(res.logits, model(res.adv_images))


class WrongOnlyAtClean(nn.Module):
    """The first ``n_wrong`` examples are misclassified at their clean image only (any move of more than 0.05 in L1
    makes them right); the others are right everywhere, and safer the farther they move (never broken)."""

    def __init__(self, clean: torch.Tensor, labels: torch.Tensor, n_wrong: int, k: int = 10):
        super().__init__()
        self.clean, self.labels, self.n_wrong, self.k = clean, labels, n_wrong, k
        self.queried = torch.zeros(len(labels), dtype=torch.long)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # identify each row by its nearest clean image (rows are a subset of the batch during the search)
        rows = torch.cdist(x.flatten(1), self.clean.flatten(1)).argmin(dim=1)
        self.queried += torch.bincount(rows, minlength=len(self.labels))
        far = (x - self.clean[rows]).flatten(1).abs().sum(dim=1)
        labels = self.labels[rows]
        out = torch.zeros(len(x), self.k)
        wrong = rows < self.n_wrong
        out[torch.arange(len(x)), labels] = torch.where(wrong, 10.0 * far, 0.5 + far)
        out[torch.arange(len(x)), (labels + 1) % self.k] = 0.3
        return out


@pytest.mark.parametrize("norm,eps", [("Linf", 0.1), ("L2", 0.5)])
def test_clean_misclassified_examples_are_not_queried_further(norm, eps):
    """The clean image is a visited point: an example misclassified there is done after the clean query and
    Square's initial point (computed for the whole batch), even when that initial point is classified right."""
    g = torch.Generator().manual_seed(1)
    x = torch.rand(6, 1, 8, 8, generator=g) * 0.8 + 0.1
    y = torch.tensor([0, 3, 5, 9, 2, 7])
    n_wrong, n_queries = 2, 25
    reach = eps * 8 if norm == "Linf" else eps  # largest L2 size of a perturbation
    assert torch.pdist(x.flatten(1)).min() > 2 * reach  # so the model can tell the rows apart
    model = WrongOnlyAtClean(x, y, n_wrong)
    with torch.no_grad():
        assert (model(x).argmax(1) != y).tolist() == [True] * n_wrong + [False] * (6 - n_wrong)
        model.queried.zero_()
    bb = BlackBoxModel(model)
    res = min_margin_square(bb, x, y, SquareSettings(eps=eps, norm=norm, n_queries=n_queries, seed=0), progress=False)
    expected = [2] * n_wrong + [n_queries + 1] * (6 - n_wrong)
    assert model.queried.tolist() == expected
    assert res.settings["queries"] == bb.queries == sum(expected)
    # the misclassified clean point is what is returned for them
    assert torch.equal(res.adv_images[:n_wrong], x[:n_wrong]) and res.misclassified[:n_wrong].all()


@pytest.fixture(scope="module")
def zoo_digits(one_thread):
    """The zoo's standard digits classifier (8x8 grey images in [0, 1]) and 120 evaluation images."""
    data = load_dataset("digits", "evaluation", n=120)
    return load_model("digits-std"), data.images, data.labels


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

    monkeypatch.setattr(proposals, name, spy)
    x = torch.rand(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    with pytest.raises(_Stop):
        square.min_margin_square(Constant(), x, torch.zeros(2, dtype=torch.long),
                                 SquareSettings(eps=0.1 if norm == "Linf" else 0.5, norm=norm, n_queries=5000,
                                                p_init=p_init),
                                 progress=False)
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
    square.min_margin_square(model, x, torch.zeros(6, dtype=torch.long), SquareSettings(eps=0.1, n_queries=1),
                             progress=False)
    delta = model.inputs[1] - x
    torch.testing.assert_close(delta.abs(), torch.full_like(delta, 0.1), rtol=0, atol=1e-6)
    torch.testing.assert_close(delta, delta[:, :, :1, :].expand_as(delta), rtol=0, atol=1e-6)
    assert (delta > 0).any() and (delta < 0).any()


def test_l2_initial_point_tiles_the_reference_grid():
    """Reference L2 initialisation on 8x8 images: tiles of side h // 5 = 1 starting at (h - 5 s) // 2 = 1, i.e. every
    pixel but row 0 and column 0 moves; the perturbation has L2 norm exactly eps (nothing clipped here)."""
    x = torch.rand(4, 1, 8, 8, generator=torch.Generator().manual_seed(3)) * 0.6 + 0.2
    model = FirstQueries(2)
    square.min_margin_square(model, x, torch.zeros(4, dtype=torch.long),
                             SquareSettings(eps=0.5, norm="L2", n_queries=1), progress=False)
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
        ours = proposals._eta_base(s)
        assert torch.allclose(ours, want, atol=1e-6) or torch.allclose(ours.t(), want, atol=1e-6), s


def test_l2_eta_pattern_is_transposed_half_of_the_time():
    gen = torch.Generator().manual_seed(0)
    base = proposals._eta_base(5)
    flips = [bool(torch.equal(proposals._eta(5, gen), base.t())) for _ in range(400)]
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
    eta = proposals._eta_base(s)
    got = proposals._l2_step(x, x_best, eps, s, (pos[0], pos[1]), (pos[2], pos[3]), eta, sign)
    want = _reference_l2_step(x, x_best, eps, s, pos[0], pos[1], pos[2], pos[3], eta, sign)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_square_evaluation_passes_its_options_on(zoo_digits):
    """The ``min-margin-square`` evaluation runs min_margin_square with its own p_init and seed (not the defaults):
    its broken examples are exactly those of the direct call with the same options."""
    model, x, y = zoo_digits
    with torch.no_grad():
        right = model(x).argmax(1) == y
    x, y = x[right][:60], y[right][:60]  # the evaluation attacks the clean-correct examples
    for seed, p_init in ((3, 0.3), (0, 0.05)):
        res = lookup("attack", "min-margin-square")(eps=0.15, norm="Linf", seed=seed, n_queries=25,
                                                     p_init=p_init).run(model, x, y, progress=False)
        direct = square.min_margin_square(model, x, y, SquareSettings(eps=0.15, n_queries=25, p_init=p_init, seed=seed),
                                          layer_norm=False, progress=False)
        assert torch.equal(res.robust_correct, ~direct.misclassified)
        others = square.min_margin_square(model, x, y,
                                          SquareSettings(eps=0.15, n_queries=25, p_init=0.8, seed=seed + 1),
                                          layer_norm=False, progress=False)
        assert not torch.equal(direct.misclassified, others.misclassified)


def test_square_top_k_reaches_the_margin(zoo_digits):
    """With top_k the tracked margin is that of softmax(LN over the top-k logits) (App. D.7), not of the full LN."""
    model, x, y = zoo_digits
    res = square.min_margin_square(model, x[:30], y[:30], SquareSettings(eps=0.1, n_queries=10), top_k=3,
                                   progress=False)
    torch.testing.assert_close(res.margins, ln_signed_margin(3)(res.logits, y[:30]))
    assert not torch.allclose(res.margins, ln_signed_margin()(res.logits, y[:30]))
    assert not torch.allclose(res.margins, signed_margin(res.logits, y[:30]))


@pytest.mark.parametrize("norm,eps", [("Linf", 0.1), ("L2", 0.5)])
def test_one_examples_search_does_not_depend_on_which_others_are_active(zoo_digits, norm, eps):
    """Signs are drawn for the whole batch every iteration (module docstring), so an example's search is the same
    next to an example that is misclassified from the start (never queried) as next to one that stays active."""
    model, x, y = zoo_digits
    with torch.no_grad():
        margins = signed_margin(model(x), y)
    wrong = int(torch.nonzero(margins < 0)[0])
    a, b = (int(i) for i in margins.argsort(descending=True)[:2])  # the two safest examples: active throughout
    cfg = SquareSettings(eps=eps, norm=norm, n_queries=30, seed=0)
    beside_wrong = square.min_margin_square(model, x[[a, wrong]], y[[a, wrong]], cfg, progress=False)
    beside_right = square.min_margin_square(model, x[[a, b]], y[[a, b]], cfg, progress=False)
    assert not beside_right.misclassified.any() and not torch.equal(beside_right.adv_images[0], x[a])
    assert torch.equal(beside_wrong.adv_images[0], beside_right.adv_images[0])


@pytest.mark.parametrize("norm", ["Linf", "L2"])
def test_square_positions_cover_every_offset_of_a_non_square_image(monkeypatch, norm):
    """On a 5x12 image the square's row offset ranges over 0..h-s and its column offset over 0..w-s, all of them
    (module docstring: all h - s + 1 offsets), for both L2 windows too."""
    seen = []
    name = "_linf_step" if norm == "Linf" else "_l2_step"
    real = getattr(proposals, name)

    def spy(*args):
        s = args[3]
        windows = [args[4:6]] if norm == "Linf" else [args[4], args[5]]
        seen.extend((s, int(vh), int(vw)) for vh, vw in windows)
        return real(*args)

    monkeypatch.setattr(proposals, name, spy)
    h, w = 5, 12
    x = torch.rand(2, 1, h, w, generator=torch.Generator().manual_seed(0)) * 0.6 + 0.2
    square.min_margin_square(Constant(), x, torch.zeros(2, dtype=torch.long),
                             SquareSettings(eps=0.1 if norm == "Linf" else 0.5, norm=norm, n_queries=400, p_init=0.05),
                             progress=False)
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
        square.min_margin_square(NaNFromCall(3), x, torch.zeros(3, dtype=torch.long),
                                 SquareSettings(eps=0.1, n_queries=10), progress=False)


def test_square_signs_are_drawn_per_channel(monkeypatch):
    """Reference Square: each channel of a square (L-inf proposal) and of an L2 initial tile gets its own random
    sign (``random_choice([..., c, 1, 1])``); the L2 tile pattern is shared by the channels."""
    signs = []
    real = proposals._linf_step

    def spy(*args):
        signs.append(args[6])
        return real(*args)

    monkeypatch.setattr(proposals, "_linf_step", spy)
    x = torch.rand(4, 3, 8, 8, generator=torch.Generator().manual_seed(4)) * 0.6 + 0.2
    square.min_margin_square(Constant(), x, torch.zeros(4, dtype=torch.long), SquareSettings(eps=0.1, n_queries=6),
                             progress=False)
    sign = torch.cat(signs)
    assert sign.shape[1:] == (3, 1, 1) and (sign != sign[:, :1]).any()
    model = FirstQueries(2)
    square.min_margin_square(model, x, torch.zeros(4, dtype=torch.long),
                             SquareSettings(eps=0.5, norm="L2", n_queries=1), progress=False)
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
    res = square.min_margin_square(Tied(), x, torch.tensor([1, 1, 0]), SquareSettings(eps=0.1, n_queries=3),
                                   layer_norm=False, progress=False)
    assert res.margins.tolist() == [0.0, 0.0, 0.0]
    assert res.misclassified.tolist() == [True, True, False]


def test_square_reports_nan_at_its_initial_point():
    """A NaN output at Square's initial point is an error too: before this check the NaN key dropped the examples
    out of the search and they came back with margin NaN, not misclassified, robust accuracy 1.0."""
    x = torch.rand(3, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    with pytest.raises(InputError, match="NaN logits for 3 examples at the Square attack's initial point"):
        square.min_margin_square(NaNFromCall(2), x, torch.zeros(3, dtype=torch.long),
                                 SquareSettings(eps=0.1, n_queries=10), progress=False)
