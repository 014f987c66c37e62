"""Issue 25, section 3: Algorithm 1 with ``search="authors"`` reproduces the authors' ``calc_spca.py`` exactly, and the
default search differs from it in the three documented ways (mixzoo/calibrate.py module docstring):
(a) order statistic vs ``np.percentile`` threshold, (b) App. D.8.2 filter vs warning only, (c) no cap vs a cap at
1 - 1e-9 on saturated thresholds. Degenerate betas and saturation warn in both modes.

``authors_loop`` is written here from the logic of the authors' script, in float64 NumPy, one grid point at a time,
independently of mixzoo's vectorised code."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from scipy.special import erf

from mixzoo.core.errors import InputError
from mixzoo.methods.mixednuts.calibrate import CalibrationProblem, Grid, calibrate


# -------------------------------------------------------------------------------------- the authors' loop, by hand
def _normalize_topk(z: np.ndarray, k: int) -> np.ndarray:
    z = np.clip(z, -1e15, 1e15)
    ref = z if k >= z.shape[1] else -np.sort(-z, axis=1)[:, :k]
    mean = ref.mean(1, keepdims=True)
    return (z - mean) / np.sqrt(ref.var(1, ddof=1, keepdims=True) + 1e-8)


def _margins(z: np.ndarray, s: float, p: float, c: float, k: int) -> np.ndarray:
    """LNClampPowerScaleMap with nn.GELU() (exact erf form), then softmax; top-1 minus top-2 probability."""
    x = _normalize_topk(z, k) + c
    h = x * 0.5 * (1.0 + erf(x / np.sqrt(2.0)))
    u = s * (np.abs(h) ** p * np.sign(h))
    e = np.exp(u - u.max(1, keepdims=True))
    prob = np.sort(e / e.sum(1, keepdims=True), axis=1)
    return prob[:, -1] - prob[:, -2]


def authors_loop(clean, clean_y, attacked, attacked_y, beta_percent, ss, cc, pp, ln_k=250):
    """calc_spca.py: margins per (s, c, p), cutoff = np.percentile(attacked margins, 100 - beta), capped at 1 - 1e-9
    for the objective; the optimum is the first of np.where(obj == min) and alpha = 1 / (1 + uncapped cutoff)."""
    cln = clean[clean.argmax(1) != clean_y]
    atk = attacked[attacked.argmax(1) == attacked_y]
    obj = np.empty((len(ss), len(cc), len(pp)))
    cutoffs = np.empty_like(obj)
    for si, s in enumerate(ss):
        for ci, c in enumerate(cc):
            for pi, p in enumerate(pp):
                cutoff = np.percentile(_margins(atk, s, p, c, ln_k), 100.0 - beta_percent)
                cutoffs[si, ci, pi] = cutoff
                cutoff = np.minimum(cutoff, 1.0 - 1e-9)
                obj[si, ci, pi] = (_margins(cln, s, p, c, ln_k) >= cutoff).mean() * 100
    idx = tuple(a[0] for a in np.where(obj == np.min(obj)))
    return {"s": ss[idx[0]], "c": cc[idx[1]], "p": pp[idx[2]], "alpha": 1 / (1 + cutoffs[idx]),
            "objective": obj[idx] / 100, "cutoffs": cutoffs, "obj": obj}


def _data(n: int, k: int, seed: int, spread: float = 2.0):
    g = np.random.default_rng(seed)
    y = g.integers(0, k, n)
    clean = g.normal(size=(n, k)) * g.uniform(0.5, spread, (n, 1))
    clean[np.arange(n), y] += g.uniform(0, 3, n)
    attacked = clean.copy()
    attacked[np.arange(n), y] -= g.uniform(0, 2, n)
    return clean, y, attacked, y


def _mixzoo(clean, cy, attacked, ay, **kw):
    t = torch.from_numpy
    return calibrate(clean_logits=t(clean), clean_labels=t(cy), attacked_logits=t(attacked), attacked_labels=t(ay),
                     **kw)


@pytest.mark.parametrize(("n", "k", "seed", "s_max", "beta"), [
    (300, 10, 0, 5.0, 0.985), (300, 10, 1, 5.0, 0.95), (200, 100, 2, 4.0, 0.985), (300, 10, 3, 400.0, 0.985),
])
def test_authors_search_picks_the_authors_point_and_alpha(n, k, seed, s_max, beta):
    clean, cy, attacked, ay = _data(n, k, seed)
    grid = Grid(s_min=0.05, s_max=s_max, s_n=4, p_min=1.0, p_max=4.0, p_n=3, c_min=-1.1, c_max=0.0, c_n=3)
    ss = np.logspace(np.log10(grid.s_min), np.log10(grid.s_max), grid.s_n)
    cc, pp = np.linspace(grid.c_min, grid.c_max, grid.c_n), np.linspace(grid.p_min, grid.p_max, grid.p_n)
    want = authors_loop(clean, cy, attacked, ay, beta * 100, ss, cc, pp)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # saturation and App. D.8.2 warnings are tested below
        card = _mixzoo(clean, cy, attacked, ay, beta=beta, grid=grid, search="authors")
    assert (card.params["s"], card.params["p"], card.params["c"]) == (
        pytest.approx(want["s"], rel=1e-12),
        pytest.approx(want["p"], rel=1e-12),
        pytest.approx(want["c"], rel=1e-12, abs=1e-12),
    )
    assert card.params["alpha"] == pytest.approx(want["alpha"], rel=1e-9)
    assert card.params["objective"] == pytest.approx(want["objective"], rel=1e-12)
    # the whole grid, not only the optimum: objectives [s][p][c] against theirs [s][c][p]
    np.testing.assert_allclose(
        np.asarray(card.params["grid"]["objectives"]), want["obj"].transpose(0, 2, 1) / 100, rtol=1e-12
    )
    np.testing.assert_allclose(1 / np.asarray(card.params["grid"]["alphas"]) - 1, want["cutoffs"].transpose(0, 2, 1),
                               rtol=1e-9, atol=1e-12)
    assert card.data["search"] == "authors"


def test_the_saturated_case_above_really_saturates_and_is_capped():
    """The s_max = 400 case reaches q = 1: without the cap the objective would differ there."""
    clean, cy, attacked, ay = _data(300, 10, 3)
    atk = attacked[attacked.argmax(1) == ay]
    assert np.percentile(_margins(atk, 400.0, 4.0, 0.0, 250), 1.5) >= 1.0 - 1e-9
    with pytest.warns(UserWarning, match=r"saturates .*capped at 1 - 1e-9"):
        _mixzoo(clean, cy, attacked, ay, beta=0.985, grid=Grid(s_min=400.0, s_max=400.0, s_n=1, p_min=4.0, p_max=4.0,
                                                                p_n=1, c_min=0.0, c_max=0.0, c_n=1), search="authors")


# ---------------------------------------------------------------------------------------- the documented differences
def test_a_threshold_order_statistic_vs_numpy_percentile():
    """(a) mixzoo: m_(floor((1 - beta) n)), so at least beta * n margins reach q; authors: np.percentile (linear)."""
    m = torch.tensor([[0.9, 0.1, 0.5, 0.3, 0.7, 0.2, 0.8]], dtype=torch.float64)
    dummy = torch.zeros(1, 3, dtype=torch.float64)
    for beta in (0.985, 0.8, 0.5, 0.0, 1.0):
        ours = CalibrationProblem(dummy, dummy, beta).thresholds(m)
        theirs = CalibrationProblem(dummy, dummy, beta, search="authors").thresholds(m)
        i = min(int(np.floor((1 - beta) * 7 + 1e-9)), 6)
        assert float(ours) == sorted(m[0].tolist())[i]
        assert float(theirs) == pytest.approx(np.percentile(m[0].numpy(), 100 - 100 * beta), rel=1e-12)
        assert int((m >= ours).sum()) >= beta * 7
    # beta = 0.8: theirs interpolates between 0.2 and 0.3 and keeps 5 of 7 < 0.8 * 7 = 5.6; ours keeps 6
    ours, theirs = (CalibrationProblem(dummy, dummy, 0.8, search=r).thresholds(m) for r in ("mixzoo", "authors"))
    assert (int((m >= ours).sum()), int((m >= theirs).sum())) == (6, 5)


def _flipping_set():
    """Logits where GELU(LN + c) at c = -2 swaps the prediction of many unconfident rows (App. D.8.2)."""
    clean, cy, attacked, ay = _data(300, 10, 5, spread=0.6)
    return clean, cy, attacked, ay, Grid(s_min=1.0, s_max=4.0, s_n=3, p_min=1.0, p_max=2.0, p_n=2, c_min=-2.0,
                                         c_max=0.0, c_n=3)


def test_b_the_default_drops_c_that_changes_predictions_the_authors_only_warn():
    clean, cy, attacked, ay, grid = _flipping_set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = _mixzoo(clean, cy, attacked, ay, beta=0.9, grid=grid)
    objectives = np.asarray(ours.params["grid"]["objectives"])
    assert (objectives[:, :, 0] > 1).all()  # c = -2 infeasible in the default search
    assert any("excluded" in n for n in ours.notes)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        theirs = _mixzoo(clean, cy, attacked, ay, beta=0.9, grid=grid, search="authors")
    assert (np.asarray(theirs.params["grid"]["objectives"]) <= 1).all()  # nothing dropped
    if theirs.params["c"] == -2.0:
        assert any("only warns" in str(w.message) for w in rec)


def test_c_and_saturation_warn_in_the_default_search_without_a_cap():
    clean, cy, attacked, ay = _data(300, 10, 3)
    point = Grid(s_min=400.0, s_max=400.0, s_n=1, p_min=4.0, p_max=4.0, p_n=1, c_min=0.0, c_max=0.0, c_n=1)
    with pytest.warns(UserWarning, match=r"saturates \(>= 1 - 1e-9\) at 1 of 1 grid points including the chosen one"
                                         r" \(not capped"):
        ours = _mixzoo(clean, cy, attacked, ay, beta=0.985, grid=point)
    with pytest.warns(UserWarning, match="capped at 1 - 1e-9"):
        theirs = _mixzoo(clean, cy, attacked, ay, beta=0.985, grid=point, search="authors")
    # ours counts clean margins >= q = 1 exactly; theirs >= 1 - 1e-9, never fewer
    assert ours.params["objective"] <= theirs.params["objective"]
    assert ours.params["alpha"] == pytest.approx(0.5) and theirs.params["alpha"] == pytest.approx(
        0.5
    )  # alpha from the uncapped q


@pytest.mark.parametrize("search", ["mixzoo", "authors"])
def test_a_degenerate_beta_warns_with_the_number_of_tied_points(search):
    clean, cy, attacked, ay = _data(300, 10, 0)
    grid = Grid(s_min=0.05, s_max=5.0, s_n=8, p_n=8, c_min=-1.1, c_max=0.0, c_n=8)
    with pytest.warns(UserWarning, match=r"Algorithm 1: \d+ of 512 grid points tie at the best objective with"
                                         r" beta = 0") as rec:
        card = _mixzoo(clean, cy, attacked, ay, beta=0.0, grid=grid, search=search)
    assert any("tie" in n for n in card.notes)
    assert all("\n" not in str(w.message) for w in rec)


def test_no_warning_on_an_ordinary_search():
    clean, cy, attacked, ay = _data(300, 10, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _mixzoo(clean, cy, attacked, ay, beta=0.985, grid=Grid(s_min=0.05, s_max=5.0, s_n=4, p_n=3, c_min=-1.1,
                                                                c_max=0.0, c_n=3))


def test_an_unknown_search_or_a_non_grid_optimizer_is_a_one_line_error():
    clean, cy, attacked, ay = _data(50, 10, 0)
    with pytest.raises(InputError, match="search must be one of 'mixzoo', 'authors'"):
        _mixzoo(clean, cy, attacked, ay, search="theirs")
    with pytest.raises(InputError, match="use optimizer 'grid'"):
        _mixzoo(clean, cy, attacked, ay, search="authors", optimizer="refine")


def test_a_tie_is_a_note_not_a_warning_when_the_split_has_no_more_images():
    """"use more calibration images" only when there are more: with the split exhausted the tie is noted, unwarned."""
    clean, cy, attacked, ay = _data(300, 10, 0)
    grid = Grid(s_min=0.05, s_max=5.0, s_n=8, p_n=8, c_min=-1.1, c_max=0.0, c_n=8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        card = _mixzoo(clean, cy, attacked, ay, beta=0.0, grid=grid, more_images=False)
    tie = [n for n in card.notes if "tie" in n]
    assert tie and "every image of the calibration split was used" in tie[0]
    assert "use more calibration images" not in tie[0]
