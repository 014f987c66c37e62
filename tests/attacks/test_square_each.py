"""Square with every random draw per example (issue 29): the per-example proposal steps equal the reference steps
row by row, and an example's run does not depend on the batch it is in, its position in it, or the others."""

from __future__ import annotations

import pytest
import torch
from digits_models import train_digits_mlp
from hypothesis import given, settings
from hypothesis import strategies as st

from mixzoo.attacks.square import SquareSettings, min_margin_square
from mixzoo.attacks.square_proposals import (
    ExampleDraws,
    _eta_base,
    _l2_step,
    _l2_step_each,
    _linf_step,
    _linf_step_each,
)
from mixzoo.core.errors import InputError

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def digits(one_thread):
    return train_digits_mlp(steps=200)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 3), st.sampled_from([1, 2, 4]), st.data())
def test_linf_step_each_is_the_reference_step_row_by_row(seed, c, s, data):
    gen = torch.Generator().manual_seed(seed)
    n, h, w, eps = 4, 6, 7, 0.1
    x = torch.rand(n, c, h, w, generator=gen)
    x_best = (x + eps * (torch.rand(x.shape, generator=gen) * 2 - 1)).clamp(0, 1)
    vh = torch.tensor([data.draw(st.integers(0, h - s)) for _ in range(n)])
    vw = torch.tensor([data.draw(st.integers(0, w - s)) for _ in range(n)])
    sign = torch.randint(0, 2, (n, c, 1, 1), generator=gen).float() * 2 - 1
    got = _linf_step_each(x, x_best, eps, s, vh, vw, sign)
    for i in range(n):
        want = _linf_step(x[i:i + 1], x_best[i:i + 1], eps, s, int(vh[i]), int(vw[i]), sign[i:i + 1])
        assert torch.equal(got[i:i + 1], want)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.1, 2.0), st.integers(1, 3), st.sampled_from([3, 5]), st.data())
def test_l2_step_each_is_the_reference_step_row_by_row(seed, eps, c, s, data):
    """Each row equals the L2 step that tests/attacks/test_attacks.py checks against the reference, with that
    row's two windows, eta pattern (transposed or not) and signs."""
    gen = torch.Generator().manual_seed(seed)
    n, hw = 4, 8
    x = torch.rand(n, c, hw, hw, generator=gen)
    delta = torch.randn(x.shape, generator=gen)
    x_best = (x + delta / delta.flatten(1).norm(dim=1).view(-1, 1, 1, 1) * eps * 0.7).clamp(0, 1)
    win = [torch.tensor([data.draw(st.integers(0, hw - s)) for _ in range(n)]) for _ in range(4)]
    flip = torch.tensor([data.draw(st.booleans()) for _ in range(n)])
    base = _eta_base(s)
    pattern = torch.where(flip.view(-1, 1, 1, 1), base.t(), base)
    sign = torch.randint(0, 2, (n, c, 1, 1), generator=gen).float() * 2 - 1
    got = _l2_step_each(x, x_best, eps, s, (win[0], win[1]), (win[2], win[3]), pattern, sign)
    for i in range(n):
        want = _l2_step(x[i:i + 1], x_best[i:i + 1], eps, s, (int(win[0][i]), int(win[1][i])),
                        (int(win[2][i]), int(win[3][i])), pattern[i, 0], sign[i:i + 1])
        # the batched norms reduce in another order than one row's: a few float32 ulps (2 seen at 0.69, seed 1456)
        torch.testing.assert_close(got[i:i + 1], want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("norm,eps", [("Linf", 0.15), ("L2", 1.0)])
def test_an_examples_run_does_not_depend_on_its_batch(digits, norm, eps):
    model, x, y = digits
    x, y = x[:30], y[:30]
    index = torch.arange(100, 130)
    cfg, kw = SquareSettings(eps=eps, norm=norm, n_queries=60, seed=3), dict(progress=False)
    whole = min_margin_square(model, x, y, cfg, index=index, batch_size=30, **kw)
    split = min_margin_square(model, x, y, cfg, index=index, batch_size=7, **kw)
    perm = torch.randperm(30, generator=torch.Generator().manual_seed(0))
    shuffled = min_margin_square(model, x[perm], y[perm], cfg, index=index[perm], batch_size=11, **kw)
    for other in (split,):
        torch.testing.assert_close(other.adv_images, whole.adv_images, rtol=0, atol=1e-6)
        torch.testing.assert_close(other.margins, whole.margins, rtol=0, atol=1e-6)
    torch.testing.assert_close(shuffled.adv_images, whole.adv_images[perm], rtol=0, atol=1e-6)
    assert torch.equal(shuffled.misclassified, whole.misclassified[perm])
    assert whole.settings["randomness"] == "per-example"
    # the search did something: points moved, and some examples were flipped
    assert (whole.adv_images != x).flatten(1).any(dim=1).all()
    assert whole.misclassified.any()
    # the batch-seeded search is a different one (positions shared by the batch)
    plain = min_margin_square(model, x, y, cfg, batch_size=30, **kw)
    assert not torch.equal(plain.adv_images, whole.adv_images)


def test_the_index_and_the_seed_choose_the_draws():
    """An example's draws for proposal ``it`` depend on (seed, its index, it) only: not on its row in the batch, on
    the other examples, or on which block of iterations was drawn before."""
    index = torch.tensor([7, 7, 8, 500])
    rows = torch.arange(4)
    a = ExampleDraws(0, index, torch.device("cpu"))
    first = a.step(rows, 130, 8)
    assert torch.equal(first[0], first[1]) and not torch.equal(first[0], first[2])
    assert not torch.equal(first[2], first[3])
    # another batch holding index 8 alone, asked out of order (block 0 first): the same numbers
    b = ExampleDraws(0, torch.tensor([8]), torch.device("cpu"))
    b.step(torch.arange(1), 3, 8)
    assert torch.equal(b.step(torch.arange(1), 130, 8)[0], first[2])
    assert not torch.equal(a.step(rows, 131, 8)[0], first[0])  # the next proposal draws afresh
    assert not torch.equal(ExampleDraws(1, index, torch.device("cpu")).step(rows, 130, 8)[0], first[0])
    # the bits are spread: signs (top bit) of many proposals are about half +1
    signs = torch.stack([a.step(rows, it, 8)[:, :3] >> 31 for it in range(400)]).float()
    assert 0.45 < signs.mean() < 0.55


def test_logit_loss_reports_logit_margins(digits):
    model, x, y = digits
    res = min_margin_square(model, x[:20], y[:20], SquareSettings(eps=0.2, n_queries=30, loss="logit"),
                            index=torch.arange(20), progress=False)
    with torch.no_grad():
        z = model(res.adv_images).double()
    zy = z.gather(1, y[:20, None]).squeeze(1)
    want = zy - z.scatter(1, y[:20, None], float("-inf")).max(dim=1).values
    torch.testing.assert_close(res.margins.double(), want, rtol=1e-5, atol=1e-5)
    assert torch.equal(res.misclassified, want < 0)
    assert res.settings["loss"] == "logit"


def test_bad_loss_and_index_are_one_line_errors(digits):
    model, x, y = digits
    with pytest.raises(InputError, match="loss must be"):
        min_margin_square(model, x[:4], y[:4], SquareSettings(eps=0.1, n_queries=2, loss="ce"), progress=False)
    with pytest.raises(InputError, match="one index per image"):
        min_margin_square(model, x[:4], y[:4], SquareSettings(eps=0.1, n_queries=2), index=torch.arange(3),
                          progress=False)
