"""Algorithm 1 (Sec. 4.3): the vectorised search against a plain loop, the active constraint, ties, errors."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import assume, given, note, settings
from hypothesis import strategies as st

from mixzoo.core.card import MixCard
from mixzoo.core.errors import InputError, PluginError, UnknownNameError
from mixzoo.core.plugins import hookimpl, lookup, register_plugin, unregister_plugin
from mixzoo.methods.mixednuts.calibrate import CalibrationProblem, Grid, SearchResult, calibrate, grid_search
from mixzoo.methods.mixednuts.calibration_problem import prediction_change_share
from mixzoo.methods.mixednuts.grid import GridEvaluation
from mixzoo.methods.mixednuts.transforms import confidence_margin, get_clamp, layer_norm, rbc_transform, signed_power


def make_logits(n: int, k: int, seed: int, boost: float = 4.0, shift: float = 0.0):
    """Logits with a random-strength true-class boost: a mix of confident, unsure and wrong predictions."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, k, (n,), generator=g)
    logits = torch.randn(n, k, generator=g) * 1.5
    logits[torch.arange(n), labels] += torch.rand(n, generator=g) * boost - shift
    return logits, labels


def calibration_set(n=120, k=10, seed=0):
    clean, y = make_logits(n, k, seed)
    attacked = clean.clone()
    attacked[torch.arange(n), y] -= torch.rand(n, generator=torch.Generator().manual_seed(seed + 1)) * 2.0
    return dict(clean_logits=clean, clean_labels=y, attacked_logits=attacked, attacked_labels=y)


def loop_reference(clean_ln, attacked_ln, s_values, p_values, c_values, beta, clamp, weights=None):
    """Algorithm 1 as written in the paper: a triple loop, margins from the transformed logits one point at a time.

    Returns the counts, the thresholds, and whether any clean margin lies within 1e-9 (relative) of its threshold
    (such a margin may fall on either side in another correct implementation, unless both are exactly 0 or 1)."""
    fn = get_clamp(clamp)
    n = len(attacked_ln)
    i = min(int(math.floor((1 - beta) * n + 1e-9)), n - 1)
    weights = torch.ones(len(clean_ln), dtype=torch.bool) if weights is None else weights
    counts = torch.zeros(len(s_values), len(p_values), len(c_values), dtype=torch.long)
    qs, ambiguous = {}, False
    for (a, s), (b, p), (k, c) in itertools.product(enumerate(s_values), enumerate(p_values), enumerate(c_values)):
        mc = confidence_margin(s * signed_power(fn(clean_ln + c), p))
        ma = confidence_margin(s * signed_power(fn(attacked_ln + c), p))
        q = sorted(ma.tolist())[i]
        counts[a, b, k] = int(((mc >= q) & weights).sum())
        near = (mc - q).abs() <= 1e-9 * abs(q)
        exact = (mc == q) & (q in (0.0, 1.0))  # degenerate rows: 0 (top values tied) or saturated at 1 everywhere
        ambiguous |= bool((near & ~exact & weights).any())
        qs[a, b, k] = q
    return counts, qs, ambiguous


def tie_rule_best(counts, s_values, p_values, c_values):
    keys = {(a, b, k): (int(counts[a, b, k]), p, abs(math.log(s)), abs(c), s, c)
            for (a, s), (b, p), (k, c) in itertools.product(enumerate(s_values), enumerate(p_values),
                                                            enumerate(c_values))}
    return min(keys, key=keys.get)


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 10_000), n_clean=st.integers(1, 30), n_att=st.integers(1, 30), k=st.integers(2, 8),
       beta=st.floats(0.0, 1.0), clamp=st.sampled_from(["gelu", "relu", "elu", "softplus", "linear"]),
       relaxed=st.booleans())
def test_vectorised_search_equals_a_plain_loop(seed, n_clean, n_att, k, beta, clamp, relaxed):
    g = torch.Generator().manual_seed(seed)
    clean_ln = layer_norm(torch.randn(n_clean, k, generator=g, dtype=torch.float64) * 2)
    attacked_ln = layer_norm(torch.randn(n_att, k, generator=g, dtype=torch.float64) * 2)
    weights = torch.rand(n_clean, generator=g) < 0.6 if relaxed else None
    assume(weights is None or weights.any())
    grid = Grid(s_min=0.1, s_max=8.0, s_n=3, p_min=0.5, p_max=3.0, p_n=3, c_min=-1.5, c_max=0.5, c_n=3)
    problem = CalibrationProblem(clean_ln, attacked_ln, beta, clamp=clamp, clean_weights=weights,
                                 dtype=torch.float64, chunk_size=64)  # tiny chunks: exercise the chunking
    ev = problem.evaluate(grid.s_values(), grid.p_values(), grid.c_values())
    sv, pv, cv = grid.s_values().tolist(), grid.p_values().tolist(), grid.c_values().tolist()
    counts, qs, ambiguous = loop_reference(clean_ln, attacked_ln, sv, pv, cv, beta, clamp, weights)
    for idx, q in qs.items():
        assert float(ev.q[idx]) == pytest.approx(q, rel=1e-9, abs=1e-12)
    assert ev.denominator == (n_clean if weights is None else int(weights.sum()))
    note(f"ambiguous={ambiguous}")
    if not ambiguous:  # else a margin equal to its threshold up to rounding may count either way
        assert torch.equal(ev.counts, counts)
        assert problem.best_index(ev) == tie_rule_best(counts, sv, pv, cv)


@pytest.mark.parametrize("clamp", ["gelu", "relu"])
def test_vectorised_search_equals_a_plain_loop_on_realistic_logits(clamp):
    data = calibration_set(160, 10, seed=21)
    clean_ln, attacked_ln = layer_norm(data["clean_logits"].double()), layer_norm(data["attacked_logits"].double())
    clean_ln = clean_ln[clean_ln.argmax(1) != data["clean_labels"]]
    attacked_ln = attacked_ln[attacked_ln.argmax(1) == data["attacked_labels"]]
    grid = Grid(s_max=10.0, s_n=4, p_n=4, c_n=4)
    sv, pv, cv = grid.s_values().tolist(), grid.p_values().tolist(), grid.c_values().tolist()
    counts, _, ambiguous = loop_reference(clean_ln, attacked_ln, sv, pv, cv, 0.95, clamp)
    assert not ambiguous  # so the comparison below is exact
    for dtype in (torch.float64, torch.float32):
        problem = CalibrationProblem(clean_ln, attacked_ln, 0.95, clamp=clamp, dtype=dtype)
        ev = problem.evaluate(sv, pv, cv)
        assert torch.equal(ev.counts, counts)
        assert problem.best_index(ev) == tie_rule_best(counts, sv, pv, cv)


def test_float32_margins_agree_with_float64():
    data = calibration_set(300, 100, seed=3)
    ln = layer_norm(data["clean_logits"].double())
    half = len(ln) // 2
    grid = Grid()
    m = {}
    for dt in (torch.float32, torch.float64):
        prob = CalibrationProblem(ln[:half], ln[half:], 0.985, dtype=dt)
        m[dt] = torch.stack([prob.margins(grid.s_values(), grid.p_values(), c) for c in grid.c_values().tolist()])
    # the error grows with s * |u| (float32 rounds u = |LN + c|^p, and s multiplies that in exp(-s d)), and CPUs
    # differ in their float32 exp/log ulps: 1.6e-5 on Intel Xeon, 2.1e-5 on AMD EPYC for this grid. The search only
    # steers with these margins; calibrate() recomputes the chosen point's q and alpha in float64.
    assert (m[torch.float32] - m[torch.float64]).abs().max() < 1e-4


def test_returned_alpha_makes_the_robustness_constraint_active():
    data = calibration_set(400, 10, seed=5)
    beta = 0.9
    card = calibrate(**data, beta=beta)
    # margins of M(s*, p*, c*) on the attacked examples the RBC gets right, computed independently
    att, y = data["attacked_logits"].double(), data["attacked_labels"]
    right = att.argmax(1) == y
    m = confidence_margin(
        rbc_transform(att[right], card.params["s"], card.params["p"], card.params["c"], clamp=card.params["clamp"])
    )
    threshold = (1 - card.params["alpha"]) / card.params["alpha"]
    assert threshold < 0.999  # not saturated, so "slightly smaller alpha" is meaningful
    assert float((m >= threshold * (1 - 1e-9)).double().mean()) >= beta
    assert float((m >= threshold * (1 + 1e-6)).double().mean()) < beta  # a slightly smaller alpha fails
    # the objective in the card is the share of clean RBC mistakes whose margin reaches the threshold
    clean, yc = data["clean_logits"].double(), data["clean_labels"]
    wrong = clean.argmax(1) != yc
    mc = confidence_margin(
        rbc_transform(clean[wrong], card.params["s"], card.params["p"], card.params["c"], clamp=card.params["clamp"])
    )
    assert card.params["objective"] == pytest.approx(float((mc >= threshold * (1 - 1e-9)).double().mean()))
    assert card.data["n_clean_incorrect"] == int(wrong.sum())
    assert card.data["n_attacked_correct"] == int(right.sum())


def test_ties_prefer_modest_parameters():
    """Clean mistakes with two exactly tied top logits have margin 0 under every M: all objectives are 0, so the
    rule picks the smallest p, then s closest to 1, then c closest to 0."""
    k = 6
    clean = torch.zeros(20, k)
    clean[:, 1] = clean[:, 2] = 3.0
    clean_labels = torch.zeros(20, dtype=torch.long)
    attacked, attacked_labels = torch.zeros(10, k), torch.zeros(10, dtype=torch.long)
    attacked[:, 0] = 5.0
    grid = Grid(s_min=0.25, s_max=4.0, s_n=5, p_min=1.0, p_max=3.0, p_n=3, c_min=-1.0, c_max=0.5, c_n=4)
    card = calibrate(clean_logits=clean, clean_labels=clean_labels, attacked_logits=attacked,
                     attacked_labels=attacked_labels, beta=0.9, grid=grid)
    assert card.params["objective"] == 0.0
    assert (card.params["s"], card.params["p"], card.params["c"]) == pytest.approx((1.0, 1.0, 0.0))


def test_best_index_breaks_ties_in_documented_order():
    s, p, c = torch.tensor([0.5, 1.5, 3.0]), torch.tensor([1.0, 2.0]), torch.tensor([-1.0, -0.4, 0.5])
    counts = torch.full((3, 2, 3), 5, dtype=torch.long)
    counts[2, 1, 0] = counts[0, 1, 2] = counts[1, 1, 1] = 1  # three ties at the minimum, all with p = 2
    ev = GridEvaluation(s, p, c, counts, 10, torch.zeros(3, 2, 3, dtype=torch.float64))
    problem = CalibrationProblem(torch.zeros(1, 2), torch.zeros(1, 2), 0.5)
    # |log 1.5| = 0.405 < |log 0.5| = 0.693 < |log 3| = 1.099
    assert problem.best_index(ev) == (1, 1, 1)
    counts[1, 1, 1] = 5
    assert problem.best_index(ev) == (0, 1, 2)


def test_grid_values_and_validation():
    g = Grid(s_min=0.1, s_max=10, s_n=3, p_min=1, p_max=3, p_n=3, c_min=-1, c_max=0, c_n=2)
    assert g.s_values().tolist() == pytest.approx([0.1, 1.0, 10.0])
    assert g.p_values().tolist() == [1.0, 2.0, 3.0] and g.c_values().tolist() == [-1.0, 0.0] and g.size == 18
    assert Grid(s_n=1).s_values().tolist() == [0.05]
    d = Grid()
    assert d.s_min <= 0.05 and d.s_max >= 5 and d.p_min <= 1 and d.p_max >= 4 and d.c_min <= -1.1 and d.c_max >= 0
    for kwargs, msg in [({"s_n": 0}, "s_n"), ({"p_min": 5.0}, "swap"), ({"s_min": 0.0}, "s_min must be positive"),
                        ({"p_min": -1.0, "p_max": 1.0}, "p_min must be positive"), ({"c_n": 2.5}, "c_n")]:
        with pytest.raises(InputError, match=msg):
            Grid(**kwargs)


def test_relaxed_objective_counts_only_abc_correct_mistakes():
    data = calibration_set(200, 10, seed=7)
    abc_correct = torch.rand(200, generator=torch.Generator().manual_seed(0)) < 0.7
    card = calibrate(**data, objective="relaxed", abc_clean_correct=abc_correct)
    wrong = data["clean_logits"].argmax(1) != data["clean_labels"]
    sel = abc_correct[wrong]
    mc = confidence_margin(
        rbc_transform(data["clean_logits"].double()[wrong], card.params["s"], card.params["p"], card.params["c"])
    )
    q = (1 - card.params["alpha"]) / card.params["alpha"]
    assert card.params["objective"] == pytest.approx(float((mc[sel] >= q * (1 - 1e-9)).double().mean()))
    assert card.data["n_clean_incorrect_abc_correct"] == int(sel.sum())
    with pytest.raises(InputError, match="abc_clean_correct"):
        calibrate(**data, objective="relaxed")


def test_linear_baseline_and_alpha_d():
    data = calibration_set(300, 10, seed=11)
    beta = 0.95
    card = calibrate(**data, beta=beta, linear=True)
    # a card of the linear method (raw RBC logits, ABC at T = 1): no s, p, c or clamp; fitted at beta by Algorithm 1
    assert (card.method, card.params["fit"], card.params["temperature"], card.params["beta"]) == (
        "linear",
        "linear",
        1.0,
        beta,
    )
    assert not {"s", "p", "c", "clamp", "top_k"} & set(card.params)
    mixed = calibrate(**data, beta=beta)
    att, y = data["attacked_logits"].double(), data["attacked_labels"]
    right = att.argmax(1) == y
    for logits, alpha in ((att[right], card.params["alpha"]), (layer_norm(att[right]), mixed.params["alpha_d"])):
        m = confidence_margin(logits).sort().values
        q = float(m[int(math.floor((1 - beta) * len(m) + 1e-9))])
        assert alpha == pytest.approx(1 / (1 + q))
    other = calibrate(**data, beta=beta, clamp="relu", grid=Grid(s_n=3, p_n=2, c_n=2))
    assert (
        (other.params["clamp"], len(other.params["grid"]["s_values"]))
        == ("relu", 3)
        != (mixed.params["clamp"], len(mixed.params["grid"]["s_values"]))
    )
    assert other.params["alpha_d"] == pytest.approx(
        mixed.params["alpha_d"]
    )  # alpha_d does not depend on the clamp or grid
    from mixzoo.methods.linear import calibrate_alpha_linear

    assert calibrate_alpha_linear(**data, beta=beta).params["alpha"] == pytest.approx(card.params["alpha"])


def test_calibrate_alpha_linear_keeps_its_old_import_path_with_a_warning():
    import mixzoo.methods.mixednuts.calibrate as old
    from mixzoo.methods.linear import calibrate_alpha_linear

    with pytest.warns(DeprecationWarning, match="mixzoo.methods.linear.calibrate_alpha_linear"):
        assert old.calibrate_alpha_linear is calibrate_alpha_linear
    with pytest.raises(AttributeError):
        old.no_such_name  # noqa: B018


def test_refine_optimizer_is_no_worse_and_card_round_trips(tmp_path):
    data = calibration_set(200, 10, seed=16)
    grid = Grid(s_max=10.0, s_n=4, p_n=4, c_n=4)
    coarse = calibrate(**data, grid=grid)
    fine = calibrate(**data, grid=grid, optimizer="refine")
    assert fine.params["objective"] <= coarse.params["objective"]
    # the card's objective and alpha hold at the refined point, which here lies off the coarse grid (the objectives
    # tie, and the tie rule of the finer grid picks another point)
    at_point = calibrate(**data, grid=Grid.point(fine.params["s"], fine.params["p"], fine.params["c"]))
    assert (at_point.params["objective"], at_point.params["alpha"]) == (
        fine.params["objective"],
        pytest.approx(fine.params["alpha"]),
    )
    assert not any(fine.params["p"] == pytest.approx(v) for v in coarse.params["grid"]["p_values"])
    assert fine.params["grid"]["optimizer"] == "refine" and fine.params["grid"]["n_evaluated"] > 64
    assert any("refined" in n for n in fine.notes)
    loaded = MixCard.load(fine.save(tmp_path / "card.toml"))
    assert loaded.to_dict() == fine.to_dict()
    assert torch.tensor(loaded.params["grid"]["objectives"]).shape == (4, 4, 4)
    # the grid a card was searched on comes back from its record (the trade-off curve and transfer re-search it)
    again = Grid.from_record(coarse.params["grid"])
    assert (again.s_n, again.p_n, again.c_n) == (4, 4, 4)
    for axis in "spc":
        assert getattr(again, f"{axis}_values")().tolist() == pytest.approx(coarse.params['grid'][f"{axis}_values"])
    assert all(Grid.from_record(r) is None for r in (None, {}, {"s_values": []}))


class FixedPointOptimizer:
    """A third-party optimizer: evaluates one point through the public problem API."""

    @hookimpl
    def mixzoo_calibration_optimizers(self):
        def fixed(problem, grid):
            return problem.result(problem.evaluate([2.0], [2.0], [-0.5]), method="fixed")

        def broken(problem, grid):
            return {"s": 1.0}

        return {"test-fixed": fixed, "test-broken": broken}


def test_optimizers_come_from_the_plugin_hook():
    assert lookup("optimizer", "grid") is grid_search
    register_plugin(FixedPointOptimizer(), name="test-fixed-optimizer")
    try:
        card = calibrate(**calibration_set(100, 10, seed=2), optimizer="test-fixed")
        assert (card.params["s"], card.params["p"], card.params["c"]) == (2.0, 2.0, -0.5)
        with pytest.raises(PluginError, match="SearchResult"):
            calibrate(**calibration_set(100, 10, seed=2), optimizer="test-broken")
    finally:
        unregister_plugin("test-fixed-optimizer")
    with pytest.raises(UnknownNameError, match="refine"):
        calibrate(**calibration_set(100, 10, seed=2), optimizer="refien")


def test_bad_inputs_give_clear_errors():
    data = calibration_set(50, 5, seed=1)
    perfect = dict(data, clean_logits=torch.nn.functional.one_hot(data["clean_labels"], 5).float() * 5)
    with pytest.raises(InputError, match="no mistakes on the 50 calibration images; use more images"):
        calibrate(**perfect)
    broken = dict(data, attacked_logits=-torch.nn.functional.one_hot(data["attacked_labels"], 5).float() * 5)
    with pytest.raises(InputError, match="wrong on all 50 attacked"):
        calibrate(**broken)
    nan = data["clean_logits"].clone()
    nan[3, 1] = float("nan")
    cases = [
        (dict(data, beta=1.5), "beta must lie in"),
        (dict(data, clean_logits=nan), "NaN or infinite values in 1 rows"),
        (dict(data, clean_logits=data["clean_logits"][0]), "2-D float tensor"),
        (dict(data, clean_labels=data["clean_labels"][:-1]), "49 entries for 50"),
        (dict(data, attacked_logits=data["attacked_logits"][:, :4]), "5 classes but attacked_logits have 4"),
        (dict(data, clean_labels=data["clean_labels"].float()), "integer"),
        (dict(data, objective="best"), "objective"),
        (dict(data, top_k=1), "top_k"),
        (dict(data, grid="fine"), "Grid"),
    ]
    for kwargs, msg in cases:
        with pytest.raises(InputError, match=msg):
            calibrate(**kwargs)
    with pytest.raises(UnknownNameError, match="gelu"):
        calibrate(**data, clamp="gelo")


def test_search_result_and_edge_notes():
    data = calibration_set(150, 10, seed=4)
    grid = Grid(s_min=1.0, s_max=1.0, s_n=1, p_min=1.0, p_max=1.5, p_n=2, c_min=0.0, c_max=0.0, c_n=1)
    problem = CalibrationProblem(layer_norm(data["clean_logits"].double()), layer_norm(data["attacked_logits"]
                                                                                       .double()), 0.9)
    res = grid_search(problem, grid)
    assert isinstance(res, SearchResult) and res.n_evaluated == 2
    assert res.alpha == pytest.approx(1 / (1 + res.q)) and 0.5 <= res.alpha <= 1
    card = calibrate(**data, grid=grid)
    assert any("edge of the grid" in n and "p =" in n for n in card.notes)


def test_argmax_change_constraint_excludes_flipping_c_values():
    """App. D.8.2: GELU is not monotone below 0, so c far below 0 flips unconfident predictions; such c values are
    infeasible under max_argmax_change and the chosen transform keeps the RBC's predictions."""
    from mixzoo.methods.mixednuts.transforms import get_clamp, layer_norm

    g = torch.Generator().manual_seed(0)
    n, k = 400, 10
    labels = torch.randint(0, k, (n,), generator=g)
    clean = torch.randn(n, k, generator=g) * 0.6
    clean[torch.arange(n), labels] += torch.rand(n, generator=g) * 2.0  # mixture of confident and unconfident rows
    clean[:, 0] -= 4.0  # one very negative class: GELU maps it back towards 0, above moderately negative ones
    attacked = clean + torch.randn(n, k, generator=g) * 0.3
    grid = Grid(s_min=0.5, s_max=20, s_n=4, p_min=1, p_max=3, p_n=3, c_min=-3.0, c_max=0.0, c_n=7)
    kw = dict(clean_logits=clean, clean_labels=labels, attacked_logits=attacked, attacked_labels=labels, beta=0.9,
              grid=grid)
    strict = calibrate(**kw, max_argmax_change=0.0)
    ln = layer_norm(torch.cat([clean, attacked]).double())
    flips = [float((get_clamp("gelu")(ln + c).argmax(1) != ln.argmax(1)).double().mean())
             for c in grid.c_values().tolist()]
    assert max(flips) > 0, "the data must contain c values that flip predictions"
    assert any("excluded" in note for note in strict.notes)
    ln_clean = layer_norm(clean.double())
    assert torch.equal(get_clamp("gelu")(ln_clean + strict.params["c"]).argmax(1), ln_clean.argmax(1))
    objectives = torch.tensor(strict.params["grid"]["objectives"])
    assert (objectives > 1).any() and strict.params["objective"] <= 1
    alphas = torch.tensor(strict.params["grid"]["alphas"])
    assert (alphas[objectives > 1] == 1.0).all()  # infeasible points record the RBC alone (q = 0)
    assert (alphas[objectives <= 1] < 1.0).any()
    loose = calibrate(**kw, max_argmax_change=None)
    assert (torch.tensor(loose.params["grid"]["objectives"]) <= 1).all()
    with pytest.raises(InputError, match="max_argmax_change"):
        calibrate(**kw, max_argmax_change=1.5)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.integers(2, 40), c=st.floats(-4.0, 1.0),
       clamp=st.sampled_from(["gelu", "relu", "elu", "softplus", "linear"]))
def test_argmax_change_equals_direct_argmax(seed, k, c, clamp):
    """The fast D.8.2 check (top-first rows, a max instead of an argmax) is the share of rows whose argmax moves."""
    z = torch.randn(64, k, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 2
    problem = CalibrationProblem(z[:2], z[2:4], 0.5, clamp=clamp, reference=z, dtype=torch.float64)
    h = get_clamp(clamp)(z + c)
    top2 = h.topk(2, dim=1).values
    moved = (h.argmax(1) != z.argmax(1)) | (top2[:, 0] == top2[:, 1])  # a new tie leaves no prediction
    assert problem.argmax_change(c) == pytest.approx(float(moved.double().mean()))


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
    objectives = torch.tensor(card.params["grid"]["objectives"])
    assert (objectives[:, :, 0] > 1).all()  # c = -1.5 changes 30 of 70 predictions: infeasible
    assert (objectives[:, :, 1] <= 1).all()  # c = 0 changes none: feasible, even with a zero tolerance
    assert card.params["c"] == 0.0 and card.params["objective"] <= 1
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
    m = (
        confidence_margin(
            rbc_transform(att[right], card.params["s"], card.params["p"], card.params["c"], clamp=card.params["clamp"])
        )
        .sort()
        .values
    )
    q = float(m[min(int(math.floor((1 - beta) * len(m) + 1e-9)), len(m) - 1)])
    assert card.params["alpha"] == pytest.approx(1 / (1 + q), rel=1e-10, abs=0)


def test_settings_objects_and_keywords_give_the_same_card():
    """calibrate takes CalibrationSettings and CardRecords; keywords named after their fields change a copy (the
    same card, number for number); a keyword that is no field is refused as Python refuses it."""
    from mixzoo.methods.mixednuts.calibrate import CalibrationSettings, CardRecords

    data = calibration_set(300, 10, seed=3)
    by_keywords = calibrate(**data, beta=0.9, clamp="relu", grid=Grid(s_n=3, p_n=3, c_n=3), dataset="digits",
                            abc={"name": "a"})
    settings = CalibrationSettings(beta=0.9, clamp="relu", grid=Grid(s_n=3, p_n=3, c_n=3))
    by_objects = calibrate(**data, settings=settings, records=CardRecords(dataset="digits", abc={"name": "a"}))
    assert by_objects.params == by_keywords.params and by_objects.data == by_keywords.data
    assert by_objects.dataset == "digits" and by_objects.abc == {"name": "a"}
    assert calibrate(**data, settings=settings, beta=0.5).params["beta"] == 0.5
    with pytest.raises(TypeError, match="unexpected keyword argument 'betta'"):
        calibrate(**data, betta=0.9)
