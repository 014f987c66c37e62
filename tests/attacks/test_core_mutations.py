"""The calibration core under mutation testing: the MMAA margin record, MMAA's batches and components, Algorithm 1's
quantile, counting, filter and bookkeeping, and the App. D.9 helpers. Each test pins one behaviour that a plausible
one-token bug changed without failing the rest of the suite; expected values come from the definitions (paper
Def. 2.1, Algorithm 1, App. B.1, D.8.2, D.9 and the module docstrings), computed independently in the test."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from digits_models import train_digits_mlp
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from mixzoo.approximation import ApproximationCheck, mmaa_settings, worst_points
from mixzoo.attacks import MarginRecord, mmaa, signed_margin
from mixzoo.attacks.apgd import apgd_ce
from mixzoo.attacks.margins import ln_signed_margin, selection_key
from mixzoo.calibrate import CalibrationProblem, Grid, calibrate, prediction_change_share
from mixzoo.errors import InputError
from mixzoo.transforms import confidence_margin, get_clamp, layer_norm, rbc_transform, signed_power


@pytest.fixture(scope="module")
def digits(one_thread):
    return train_digits_mlp()


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
    res = mmaa(counting, x, y, eps=0.1, n_iter=3, n_target_classes=1, progress=False, attack_all=True)
    assert res.settings["n_target_classes"] == 1
    assert counts["n"] == (1 + 1) * 20 * (3 + 1)  # APGD-CE and one APGD-T run, start point + 3 steps each


def test_mmaa_attack_loss_sees_the_top_k_layer_norm(digits):
    """With top_k the attacked model is h^LN with LN over the top-k logits (App. D.7): MMAA's APGD-CE is APGD-CE on
    (raw logits, LN_top_k(raw logits)) with the matching margin."""
    model, x, y = digits
    x, y = x[:40], y[:40]
    res = mmaa(model, x, y, eps=0.1, n_iter=6, n_target_classes=0, top_k=3, progress=False, attack_all=True)

    def forward(inp):
        out = model(inp)
        return out, layer_norm(out, 3)

    record = apgd_ce(forward, x, y, eps=0.1, n_iter=6, seed=0, attack_all=True, margin_fn=ln_signed_margin(3))
    assert torch.equal(res.adv_images, record.x) and torch.equal(res.margins, record.margin)


def test_mmaa_batches_are_independent_and_seeded_alike(digits):
    """Each batch's components use random streams seeded with ``seed`` (as AutoAttack does), so a run in batches
    equals separate runs on the batches."""
    model, x, y = digits
    x, y = x[:40], y[:40]
    kw = dict(eps=0.1, n_iter=4, n_target_classes=1, batch_size=20, progress=False)
    whole = mmaa(model, x, y, **kw)
    parts = [mmaa(model, x[a:a + 20], y[a:a + 20], **kw) for a in (0, 20)]
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
    res = mmaa(TiedTopTwo(), x, labels, eps=0.05, n_iter=2, n_target_classes=0, progress=False)
    assert res.margins.tolist() == [0.0, 0.0, 0.0]
    assert res.misclassified.tolist() == [True, True, False]
    assert res.robust_accuracy == pytest.approx(1 / 3)


# ---------------------------------------------------------------------------------------- Algorithm 1
def _direct_margins(z: torch.Tensor, s: float, p: float, c: float, clamp) -> torch.Tensor:
    """Def. 2.1 margins of s * sgn|Clamp(z + c)|^p, one point at a time (z already layer-normed)."""
    return confidence_margin(s * signed_power(get_clamp(clamp)(z + c), p))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 30), j=st.integers(0, 30))
def test_quantile_is_the_largest_threshold_that_beta_of_the_margins_reach(seed, n, j):
    """beta = j / n: q is the largest attacked margin that at least beta * n attacked margins reach (Eq. 7 active),
    also where (1 - beta) * n rounds below an integer (beta = 0.9, n = 10)."""
    j = min(j, n)
    beta = j / n
    g = torch.Generator().manual_seed(seed)
    attacked = torch.randn(n, 5, generator=g, dtype=torch.float64) * 2
    clean = torch.randn(3, 5, generator=g, dtype=torch.float64)
    problem = CalibrationProblem(clean, attacked, beta, clamp="linear", dtype=torch.float64)
    ev = problem.evaluate([1.0], [1.0], [0.0])
    m = confidence_margin(attacked)
    reach = [float(t) for t in m if int((m >= t).sum()) >= beta * n - 1e-9]
    assert float(ev.q[0, 0, 0]) == pytest.approx(max(reach), rel=1e-12, abs=1e-15)


def test_quantile_index_at_beta_point_nine_of_ten():
    problem = CalibrationProblem(torch.zeros(1, 3), torch.zeros(10, 3), 0.9)
    assert problem.quantile_index == 1  # (1 - 0.9) * 10 = 0.99999... in floating point


def test_a_clean_margin_equal_to_the_threshold_counts_as_reaching_it():
    """Objective: the share of clean mistakes whose margin is >= q. A clean row equal to the attacked rows has
    exactly the threshold margin, at every grid point. Eight classes: every row then starts on a SIMD vector
    boundary, so vectorised exp gives every row the same bits (five classes put rows at different lanes, and on an
    AMD EPYC the last bit of a margin moved with the row); a permutation of the row would change the order of the
    denominator's sum."""
    r = torch.tensor([1.3, 0.4, -0.2, -0.6, -0.9, 0.1, -0.3, 0.2], dtype=torch.float64)
    attacked = r.repeat(7, 1)
    clean = r.unsqueeze(0)
    grid = Grid(s_min=0.5, s_max=20.0, s_n=3, p_min=1.0, p_max=3.0, p_n=3, c_min=-1.0, c_max=0.0, c_n=3)
    for dtype in (torch.float32, torch.float64):
        problem = CalibrationProblem(clean, attacked, 0.5, clamp="gelu", dtype=dtype)
        ev = problem.evaluate(grid.s_values(), grid.p_values(), grid.c_values())
        assert (ev.objectives == 1.0).all()


def test_grid_alphas_make_the_threshold_q():
    """alpha = 1 / (1 + q) at every grid point (Algorithm 1 line 15): (1 - alpha) / alpha is the threshold q."""
    g = torch.Generator().manual_seed(1)
    clean = layer_norm(torch.randn(15, 6, generator=g, dtype=torch.float64))
    attacked = layer_norm(torch.randn(25, 6, generator=g, dtype=torch.float64))
    problem = CalibrationProblem(clean, attacked, 0.8, dtype=torch.float64)
    ev = problem.evaluate([0.5, 2.0, 8.0], [1.0, 2.0], [-0.5, 0.0])
    assert (ev.q > 0).all()
    torch.testing.assert_close((1.0 - ev.alphas) / ev.alphas, ev.q, rtol=1e-12, atol=1e-14)


def test_ties_prefer_the_smaller_p_before_the_s_closer_to_one():
    """Documented tie order: smallest objective, then smallest p, then s closest to 1 (log scale), then c closest to
    0, then smaller s, then smaller c."""
    from mixzoo.calibrate import GridEvaluation

    s, p, c = (torch.tensor(v, dtype=torch.float64) for v in ([1.0, 4.0], [1.0, 2.0], [-0.5, 0.0]))
    counts = torch.full((2, 2, 2), 7, dtype=torch.long)
    counts[0, 1, 1] = counts[1, 0, 0] = 3  # (s=1, p=2, c=0) against (s=4, p=1, c=-0.5)
    problem = CalibrationProblem(torch.zeros(1, 2), torch.zeros(1, 2), 0.5)
    ev = GridEvaluation(s, p, c, counts, 10, torch.zeros(2, 2, 2, dtype=torch.float64))
    assert problem.best_index(ev) == (1, 0, 0)
    result = problem.result(ev)
    assert (result.s, result.p, result.c, result.objective) == (4.0, 1.0, -0.5, 0.3)


def test_s_values_in_any_order_give_the_same_points():
    g = torch.Generator().manual_seed(2)
    clean = layer_norm(torch.randn(12, 7, generator=g, dtype=torch.float64))
    attacked = layer_norm(torch.randn(20, 7, generator=g, dtype=torch.float64))
    problem = CalibrationProblem(clean, attacked, 0.7, dtype=torch.float64)
    s = [4.0, 0.3, 1.0]
    m = problem.margins(torch.tensor(s, dtype=torch.float64), torch.tensor([1.0, 2.5]), -0.3)
    for a, sv in enumerate(s):
        for b, pv in enumerate([1.0, 2.5]):
            expected = _direct_margins(torch.cat([clean, attacked]), sv, pv, -0.3, "gelu")
            torch.testing.assert_close(m[a, b], expected, rtol=1e-9, atol=1e-12)
    ev = problem.evaluate(s, [1.0, 2.5], [-0.3])
    ev_sorted = problem.evaluate(sorted(s), [1.0, 2.5], [-0.3])
    order = [sorted(s).index(v) for v in s]
    assert torch.equal(ev.counts, ev_sorted.counts[order]) and torch.equal(ev.q, ev_sorted.q[order])


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.integers(9, 30), c=st.floats(-5.0, 1.0),
       clamp=st.sampled_from(["gelu", "sin", "neg_abs"]))
def test_margins_find_the_top_two_outside_the_leading_columns(seed, k, c, clamp):
    """_top2 is exact for any input: with a non-monotone clamp (GELU far below 0, or any callable, here also one
    that scrambles the order of the row) the two largest transformed logits may sit anywhere in the row, not in the
    leading columns the search looks at first."""
    fn = {"gelu": "gelu", "sin": lambda t: torch.sin(7 * t), "neg_abs": lambda t: -t.abs()}[clamp]
    g = torch.Generator().manual_seed(seed)
    z = layer_norm(torch.randn(40, k, generator=g, dtype=torch.float64) * 2)
    problem = CalibrationProblem(z[:20], z[20:], 0.5, clamp=fn, dtype=torch.float64)
    m = problem.margins(torch.tensor([0.7, 6.0], dtype=torch.float64), torch.tensor([1.0, 2.0]), c)
    for a, s in enumerate([0.7, 6.0]):
        for b, p in enumerate([1.0, 2.0]):
            torch.testing.assert_close(m[a, b], _direct_margins(z, s, p, c, fn), rtol=1e-9, atol=1e-12)


def test_prediction_change_share_ignores_ties_that_were_already_there():
    """App. D.8.2: a prediction changes when another class overtakes it, or ties with it where it was strictly
    ahead before; a row whose top two were tied to begin with does not change under a monotone map."""
    z = torch.tensor([[2.0, 2.0, 0.0], [3.0, 1.0, 0.0], [1.5, 1.5, 1.5], [0.5, 0.2, -1.0]], dtype=torch.float64)
    linear, relu = get_clamp("linear"), get_clamp("relu")
    assert prediction_change_share(z, linear, 0.0) == 0.0
    assert prediction_change_share(z, linear, -3.0) == 0.0
    # ReLU at c = -2.5 zeroes rows 0, 2 and 3; only row 3 had a strict leader, which now ties with the others
    h = relu(z - 2.5)
    assert h[0].eq(0).all() and h[2].eq(0).all() and h[3].eq(0).all() and h[1, 0] > h[1, 1:].max()
    assert prediction_change_share(z, relu, -2.5) == pytest.approx(1 / 4)


def _filter_data(n_unsure_clean: int = 0):
    """Clean images: confident LN rows (top LN value 2, never flipped by GELU at c >= -1.5), half of them RBC
    mistakes, plus ``n_unsure_clean`` unconfident correct rows. Attacked images: unconfident but correct rows,
    whose prediction GELU moves at c = -1.5 (their top two LN values lie below 0.75 + 1.5)."""
    k, n = 5, 40
    confident = torch.tensor([6.0, 0.0, 0.0, 0.0, 0.0])
    unsure = torch.tensor([1.0, 0.9, -3.0, -3.0, -3.0])
    clean = torch.stack([confident.roll(i % k) for i in range(n)] + [unsure] * n_unsure_clean)
    clean_labels = torch.tensor([(i % k) if i % 2 else (i + 1) % k for i in range(n)] + [0] * n_unsure_clean)
    attacked = torch.stack([unsure + 0.01 * torch.arange(k) * (i % 3) for i in range(30)])
    attacked_labels = torch.zeros(30, dtype=torch.long)
    return dict(clean_logits=clean, clean_labels=clean_labels, attacked_logits=attacked,
                attacked_labels=attacked_labels)


def _gelu_moved(raw: torch.Tensor, c: float) -> torch.Tensor:
    ln = layer_norm(raw.double())
    return torch.nn.functional.gelu(ln + c).argmax(1) != ln.argmax(1)


def test_argmax_filter_counts_the_attacked_correct_images():
    """App. D.8.2: the share of changed predictions is over the clean AND the attacked-correct calibration images;
    c values at or below max_argmax_change stay feasible."""
    data = _filter_data()
    grid = Grid(s_min=1.0, s_max=4.0, s_n=2, p_min=1.0, p_max=2.0, p_n=2, c_min=-1.5, c_max=0.0, c_n=2)
    assert not _gelu_moved(data["clean_logits"], -1.5).any()
    assert _gelu_moved(data["attacked_logits"], -1.5).all() and not _gelu_moved(data["attacked_logits"], 0.0).any()
    card = calibrate(**data, beta=0.9, grid=grid, max_argmax_change=0.0)
    objectives = torch.tensor(card.grid["objectives"])
    assert (objectives[:, :, 0] > 1).all()  # c = -1.5 changes 30 of 70 predictions: infeasible
    assert (objectives[:, :, 1] <= 1).all()  # c = 0 changes none: feasible, even with a zero tolerance
    assert card.c == 0.0 and card.objective <= 1
    assert any("c values -1.5 excluded" in n for n in card.notes)


def test_a_transform_that_moves_some_clean_predictions_gets_a_note():
    """calibrate notes when M(s*, p*, c*) moves more than 1% of the clean predictions (App. D.8.2)."""
    data = _filter_data(n_unsure_clean=3)  # 3 of 43 clean rows move at c = -1.5: 7%
    moved = float(_gelu_moved(data["clean_logits"], -1.5).double().mean())
    assert 0.01 < moved < 0.1
    card = calibrate(**data, beta=0.9, grid=Grid.point(2.0, 1.0, -1.5), max_argmax_change=None)
    assert card.data["transform_argmax_changed"] == pytest.approx(moved)
    assert any("changes the RBC's prediction on 7.0% of clean images" in n for n in card.notes)
    data = _filter_data(n_unsure_clean=0)
    card = calibrate(**data, beta=0.9, grid=Grid.point(2.0, 1.0, -1.5), max_argmax_change=None)
    assert card.data["transform_argmax_changed"] == 0.0
    assert not any("changes the RBC's prediction" in n for n in card.notes)


def test_card_alpha_is_exact_after_a_float32_search():
    """The search may run in float32, the card's alpha is recomputed in float64 at the chosen point: it equals
    1 / (1 + q) with q the Algorithm 1 quantile of float64 margins computed here from scratch."""
    g = torch.Generator().manual_seed(4)
    n, k = 300, 10
    labels = torch.randint(0, k, (n,), generator=g)
    clean = torch.randn(n, k, generator=g) * 1.5
    clean[torch.arange(n), labels] += torch.rand(n, generator=g) * 4
    attacked = clean.clone()
    attacked[torch.arange(n), labels] -= torch.rand(n, generator=g) * 2
    beta = 0.9
    grid = Grid(s_min=2.0, s_max=60.0, s_n=3, p_min=1.0, p_max=3.0, p_n=3, c_min=-0.5, c_max=0.0, c_n=2)
    card = calibrate(clean_logits=clean, clean_labels=labels, attacked_logits=attacked, attacked_labels=labels,
                     beta=beta, grid=grid, dtype=torch.float32, max_argmax_change=None)
    att = attacked.double()
    right = layer_norm(att).argmax(1) == labels
    m = confidence_margin(rbc_transform(att[right], card.s, card.p, card.c, clamp=card.clamp)).sort().values
    q = float(m[min(int(math.floor((1 - beta) * len(m) + 1e-9)), len(m) - 1)])
    assert card.alpha == pytest.approx(1 / (1 + q), rel=1e-10, abs=0)


# ---------------------------------------------------------------------------------------- App. D.9 helpers
def _check(**changes) -> ApproximationCheck:
    base = dict(alpha_card=0.8, objective_surrogate=0.5, objective_check=0.5, objective_worst=0.5,
                alpha_surrogate=0.8, alpha_check=0.8, alpha_worst=0.8, robust_accuracy_ln=0.6, robust_accuracy_m=0.6,
                robust_accuracy_worst=0.6, beta_kept_surrogate=0.9, beta_kept_check=0.9, beta_kept_worst=0.9,
                beta=0.9, n=100, seconds=1.0, cache_hits={})
    return ApproximationCheck(**{**base, **changes})


def test_check_notes_compare_a_refit_card_with_the_larger_alpha():
    assert _check().notes == []  # beta kept exactly is kept
    refit = _check(refit=True, alpha_card=0.8, alpha_surrogate=0.8, alpha_worst=0.7)
    assert refit.notes == []  # the refit card takes the larger of the two passes' alphas
    assert any("re-run `mixzoo mix`" in n for n in _check(refit=True, alpha_card=0.7, alpha_worst=0.7).notes)
    assert any("keeps" in n for n in _check(beta_kept_worst=0.89).notes)


def test_mmaa_settings_defaults_for_old_cards():
    record = dict(eps=0.03, norm="Linf", n_iter=100, n_target_classes=9, n_restarts=1, seed=0)
    assert mmaa_settings(record, top_k=5) == {**record, "top_k": 5, "batch_size": 250}
    newer = {**record, "top_k": 7, "batch_size": 64}
    assert mmaa_settings(newer, top_k=5) == {**record, "top_k": 7, "batch_size": 64}


def test_worst_points_take_the_smallest_margin_of_the_transformed_rbc():
    """Per image, the point where h^M = M(s, p, c)(RBC) has the smaller signed margin, a flip beating any margin.
    With the linear clamp, s = p = 1, c = 0, h^M is the layer-normed RBC; its margins are computed here by hand."""
    card = SimpleNamespace(s=1.0, p=1.0, c=0.0, clamp="linear", top_k=None)
    a = torch.tensor([[1.0, 0.0, 0.0], [4.0, 3.0, 0.0], [0.0, 2.0, 0.0], [5.0, 4.9, 0.0]])
    b = torch.tensor([[10.0, 9.0, 0.0], [3.0, 0.0, 0.0], [2.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    labels = torch.zeros(4, dtype=torch.long)

    def by_hand(raw):
        z = (raw - raw.mean(1, keepdim=True)) / (raw.var(1, unbiased=True, keepdim=True) + 1e-8).sqrt()
        prob = z.softmax(1)
        return prob[:, 0] - prob[:, 1:].max(1).values

    ma, mb = by_hand(a), by_hand(b)
    assert ma[0] > mb[0]  # row 0: b is closer, although its raw-logit margin is the larger one
    assert signed_margin(a[:1], labels[:1]) < signed_margin(b[:1], labels[:1])
    assert ma[1] < mb[1]  # row 1: a is closer
    # row 2: a is misclassified (margin < 0); row 3: b is misclassified although a's margin is only just positive
    expected = torch.stack([b[0], a[1], a[2], b[3]])
    assert torch.equal(worst_points(card, a, b, labels=labels), expected)
    assert torch.equal(worst_points(card, b, a, labels=labels), expected)



def test_check_approximation_counts_on_its_own_points(fixed_logits, tmp_path):
    """App. D.9 on made-up logits (the attacks replaced by fixed tensors): the kept shares count attacked-correct
    images whose h^M margin reaches the card's threshold q = 1 / alpha - 1, and the worst points flip h^M wherever
    either attack does."""
    import mixzoo.approximation as approximation
    from mixzoo.card import MixCard

    g = torch.Generator().manual_seed(8)
    n, k = 200, 6
    labels = torch.randint(0, k, (n,), generator=g)
    clean = torch.randn(n, k, generator=g)
    clean[torch.arange(n), labels] += torch.rand(n, generator=g) * 5
    surrogate = clean.clone()
    surrogate[torch.arange(n), labels] -= torch.rand(n, generator=g) * 2.5
    direct = clean.clone()
    direct[torch.arange(n), labels] -= torch.rand(n, generator=g) * 2.5
    beta = 0.8
    first = calibrate(clean_logits=clean, clean_labels=labels, attacked_logits=surrogate, attacked_labels=labels,
                      beta=beta, grid=Grid.point(3.0, 2.0, -0.4), max_argmax_change=None)
    card = MixCard(s=3.0, p=2.0, c=-0.4, alpha=first.alpha, beta=beta, objective=first.objective, method="mmaa",
                   data={"n": n, "fingerprint": "f00d"},
                   attack=dict(eps=0.1, norm="Linf", n_iter=5, n_target_classes=3, n_restarts=1, seed=0))

    def fake_mmaa(rbc, data, transform=None, **kw):
        return {"logits": direct if transform is not None else surrogate}

    fixed_logits(labels, clean, fake_mmaa)
    check = approximation.check_approximation(card, cache_dir=tmp_path, progress=False)

    def h_m(raw):
        return rbc_transform(raw.double(), card.s, card.p, card.c, clamp=card.clamp)

    threshold = 1 / card.alpha - 1

    def kept(raw):
        right = raw.argmax(1) == labels
        return float((confidence_margin(h_m(raw[right])) >= threshold * (1 - 1e-9)).double().mean())

    def flipped(raw):
        return h_m(raw).argmax(1) != labels

    assert check.alpha_surrogate == pytest.approx(card.alpha, rel=1e-12)
    assert check.beta_kept_surrogate == pytest.approx(kept(surrogate)) and check.beta_kept_surrogate >= beta
    assert check.beta_kept_check == pytest.approx(kept(direct))
    worst_flipped = flipped(surrogate) | flipped(direct)
    assert (worst_flipped & ~flipped(direct)).any()  # the worst points differ from the direct attack's
    assert check.robust_accuracy_worst == pytest.approx(1 - float(worst_flipped.double().mean()))
    assert check.robust_accuracy_ln == pytest.approx(float((surrogate.argmax(1) == labels).double().mean()))
