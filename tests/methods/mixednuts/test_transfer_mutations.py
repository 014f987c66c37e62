"""Mutation audit of black-box transfer calibration and the App. D.9 approximation check.

Audited: ``mixzoo/transfer.py`` (transfer_params / transfer_params_by_name: the per-image choice of the attacked
point, the surrogate checks, the query bill, settings passed on, card recording), ``mixzoo/approximation.py``
(worst_points, check_approximation, refit_alpha, transformed_rbc) and ``plugins/transfer.py``. Each test kills
mutants the older tests let through. Expected values are written out from the paper: LN and M(s, p, c) of Eq. 4, the
margin of Def. 2.1, MMAA's selection rule (App. B.1: lowest LN margin, a flip beating any margin) and Algorithm 1's
alpha = 1 / (1 + q) at a fixed (s, p, c), q the (1 - beta)-quantile of the attacked-correct margins (line 15).
Black boxes here answer from a table of logits, so every margin is chosen by hand.
"""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

import mixzoo.methods.mixednuts.calibration_data
from mixzoo.blackbox import BlackBoxModel, QueryBudgetExceeded
from mixzoo.card import MixCard
from mixzoo.data import load_dataset
from mixzoo.errors import InputError
from mixzoo.transfer import WEAK_SQUARE_QUERIES, transfer_params, transfer_params_by_name

pytestmark = pytest.mark.usefixtures("one_thread")

EPS = 0.1
K = 6
N = 40


# ------------------------------------------------------------------------------------ references, by hand
def _ln(z: torch.Tensor, top_k: int | None = None) -> torch.Tensor:
    """LN (Sec. 4.2, App. D.7): standardise each row by the mean and sqrt(unbiased variance + 1e-8) of its top_k
    logits (the authors' normalize_topk)."""
    ref = z if top_k is None or top_k >= z.shape[1] else z.topk(top_k, dim=1).values
    mean = ref.mean(1, keepdim=True)
    return (z - mean) / (((ref - mean) ** 2).sum(1, keepdim=True) / (ref.shape[1] - 1) + 1e-8).sqrt()


def _signed(z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Def. 2.1, signed: softmax probability of y minus the largest other one."""
    prob = z.softmax(1)
    rows = torch.arange(len(y))
    others = prob.clone()
    others[rows, y] = -1.0
    return prob[rows, y] - others.max(1).values


def _key(z: torch.Tensor, y: torch.Tensor, top_k: int | None) -> torch.Tensor:
    """MMAA's selection (App. B.1): signed margin of h^LN, minus 2 where the (first) argmax is not y."""
    return _signed(_ln(z.float(), top_k), y) - 2.0 * (z.argmax(1) != y).float()


def _m(z: torch.Tensor, s: float, p: float, c: float, clamp: str = "gelu", top_k: int | None = None,
       dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Eq. 4: s * |Clamp(LN(h) + c)|^p * sgn(Clamp(LN(h) + c)); GELU exact, softplus = log(1 + e^x)."""
    h = _ln(z.to(dtype), top_k) + c
    h = F.gelu(h) if clamp == "gelu" else torch.log1p(torch.exp(h))
    return s * h.abs() ** p * h.sign()


def _conf(m: torch.Tensor) -> torch.Tensor:
    top = m.softmax(1).topk(2, dim=1).values
    return top[:, 0] - top[:, 1]


def _alpha(attacked: torch.Tensor, y: torch.Tensor, s: float, p: float, c: float, beta: float, clamp: str = "gelu",
           top_k: int | None = None) -> float:
    """Algorithm 1 line 15 at a fixed (s, p, c): q = sorted attacked-correct margins at floor((1 - beta) n)."""
    right = attacked.argmax(1) == y
    m = _conf(_m(attacked[right], s, p, c, clamp, top_k)).sort().values
    return 1.0 / (1.0 + float(m[min(int(math.floor((1 - beta) * len(m) + 1e-9)), len(m) - 1)]))


def _pick(a: torch.Tensor, b: torch.Tensor, y: torch.Tensor, top_k: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    use_b = _key(b, y, top_k) < _key(a, y, top_k)
    return torch.where(use_b.view(-1, 1), b, a), use_b


class Table(nn.Module):
    """A black box that answers from a table: the logits listed for each image it knows, nothing else."""

    def __init__(self, images: torch.Tensor, logits: torch.Tensor):
        super().__init__()
        self.keys, self.values = images.flatten(1), logits

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dist = (x.flatten(1)[:, None, :] - self.keys[None]).abs().amax(2)
        assert bool((dist.min(1).values == 0).all()), "the table box was asked about an unknown image"
        return self.values[dist.argmin(1)]


@pytest.fixture(scope="module")
def table():
    """N digits images, their transferred points (every pixel moved by EPS in Linf), random K-class logits."""
    x = load_dataset("digits", "calibration", n=N).images
    adv = torch.where(x > 0.5, x - EPS, x + EPS)
    g = torch.Generator().manual_seed(3)
    y = torch.randint(0, K, (N,), generator=g)
    clean = torch.randn(N, K, generator=g)
    clean[torch.arange(N), y] += 2.5 * torch.rand(N, generator=g)
    moved = clean + 0.8 * torch.randn(N, K, generator=g)
    moved[torch.arange(N), y] -= 1.5 * torch.rand(N, generator=g)
    box = Table(torch.cat([x, adv]), torch.cat([clean, moved]))
    return SimpleNamespace(x=x, adv=adv, y=y, clean=clean, moved=moved, box=box)


def _card(**kw) -> MixCard:
    base = dict(s=2.0, p=2.0, c=-0.5, alpha=0.8, beta=0.9, clamp="gelu", top_k=None, temperature=0.5, objective=0.25,
                method="mmaa", dataset="digits", rbc={"name": "surrogate", "weight_hash": "feed"},
                abc={"name": "digits-std"}, attack={"eps": EPS, "norm": "Linf"})
    return MixCard(**{**base, **kw})


def _run(t, card: MixCard, **kw) -> MixCard:
    kw.setdefault("surrogate", t.adv)
    return transfer_params(card, t.box, t.x, t.y, progress=False, **kw)


# ------------------------------------------------------------------------------------ transfer: the points
def test_transferred_points_are_chosen_and_calibrated_with_the_cards_top_k(table):
    """With a top_k card (App. D.7) the per-image choice (lower LN key wins, LN over the top_k logits) and the
    margins of Algorithm 1 both use top_k; here the choice differs from full-LN on some images."""
    t, top_k = table, 3
    card = _card(top_k=top_k)
    attacked, used_clean = _pick(t.moved, t.clean, t.y, top_k)
    assert (used_clean != _pick(t.moved, t.clean, t.y, None)[1]).any()  # top_k matters for this table
    out = _run(t, card)
    assert out.top_k == top_k
    assert out.data["transfer_kept_clean_point"] == int(used_clean.sum())
    assert out.alpha == pytest.approx(_alpha(attacked, t.y, 2.0, 2.0, -0.5, 0.9, top_k=top_k), rel=1e-6)


def test_an_argmax_tie_counts_as_a_flip_when_choosing_the_attacked_point(table):
    """MMAA's key subtracts 2 where the first argmax is not the label, also at a tie (margin 0): a clean point that
    the tie already misclassifies beats a transferred point at which the tie goes the label's way."""
    t = table
    clean, moved = t.clean.clone(), t.moved.clone()
    y = t.y.clone()
    y[0] = 1
    clean[0] = torch.tensor([1.0, 1.0, 0.0, 0.0, 0.0, 0.0])  # first argmax 0 != 1: a flip with margin 0
    moved[0] = torch.tensor([0.0, 1.0, 1.0, 0.0, 0.0, 0.0])  # first argmax 1 == 1: correct with margin 0
    box = Table(torch.cat([t.x, t.adv]), torch.cat([clean, moved]))
    attacked, used_clean = _pick(moved, clean, y, None)
    assert bool(used_clean[0])
    out = transfer_params(_card(), box, t.x, y, surrogate=t.adv, progress=False)
    assert out.data["transfer_kept_clean_point"] == int(used_clean.sum())
    assert out.data["n_attacked_correct"] == int((attacked.argmax(1) == y).sum())


def test_transfer_card_records_the_surrogate_and_the_black_box_faithfully(table):
    """The card keeps the surrogate card's temperature, clamp, ABC and objective (as surrogate_objective), the
    black box's query count, and Algorithm 1's auxiliary alpha_d (Eq. 8: linear clamp, s = p = 1, c = 0)."""
    t = table
    card = _card(clamp="softplus")
    out = _run(t, card)
    attacked, _ = _pick(t.moved, t.clean, t.y, None)
    assert out.alpha == pytest.approx(_alpha(attacked, t.y, 2.0, 2.0, -0.5, 0.9, clamp="softplus"), rel=1e-6)
    assert out.clamp == "softplus" and out.temperature == 0.5 and out.beta == 0.9 and out.abc == card.abc
    assert out.objective != pytest.approx(0.25) and out.data["surrogate_objective"] == 0.25
    right = attacked.argmax(1) == t.y
    m = _conf(_ln(attacked[right].double())).sort().values
    alpha_d = 1.0 / (1.0 + float(m[int(math.floor(0.1 * len(m) + 1e-9))]))
    assert out.alpha_d == pytest.approx(alpha_d, rel=1e-6)
    assert out.provenance["black_box"]["queries"] == 2 * N == out.attack["queries"]["total"]
    assert out.attack["queries"] == {"clean": N, "transfer": N, "total": 2 * N}


def test_a_given_beta_overrides_the_cards(table):
    t = table
    out = _run(t, _card(), beta=0.75)
    attacked, _ = _pick(t.moved, t.clean, t.y, None)
    assert out.beta == 0.75
    assert out.alpha == pytest.approx(_alpha(attacked, t.y, 2.0, 2.0, -0.5, 0.75), rel=1e-6)
    with pytest.warns(UserWarning, match="unverified"):
        guess = transfer_params(None, t.box, t.x, t.y, method="guess", beta=0.8, progress=False)
    assert _run(t, _card(), beta=1.0).beta == 1.0  # beta = 1 is allowed: every attacked-correct margin kept
    assert guess.beta == 0.8  # educated guess (App. D.5): Table 3's CIFAR-10 s, p, c, alpha from clean margins
    assert guess.alpha == pytest.approx(_alpha(t.clean, t.y, 5.0, 4.0, -1.1, 0.8), rel=1e-6)


def test_given_eps_and_norm_override_the_cards_and_bound_the_transferred_points(table):
    t = table
    with pytest.raises(InputError, match="beyond eps"):
        _run(t, _card(), eps=EPS / 2)
    with pytest.raises(InputError, match="beyond eps"):
        _run(t, _card(), norm="L2")  # EPS in every pixel is 0.8 in L2
    wide = _run(t, _card(), eps=2 * EPS)
    assert wide.attack["eps"] == 2 * EPS and wide.attack["norm"] == "Linf"
    assert any("attack radius 0.2 differs from the surrogate card's 0.1" in n for n in wide.notes)
    assert not any("attack radius" in n for n in _run(t, _card()).notes)
    for bad in (0.0, -0.1):
        with pytest.raises(InputError, match="no attack radius"):
            _run(t, _card(), eps=bad)


def test_one_image_moved_slightly_beyond_eps_or_a_wrong_shape_is_refused(table):
    t = table
    adv = t.adv.clone()
    adv[5] = (t.x[5] + 1.05 * EPS).clamp(0, 1)  # one image, 5 % beyond the radius
    assert float((adv[5] - t.x[5]).abs().max()) > EPS * 1.04
    with pytest.raises(InputError, match="beyond eps"):
        _run(t, _card(), surrogate=adv)
    with pytest.raises(InputError, match="shape"):
        _run(t, _card(), surrogate=t.adv[:-1])


@pytest.mark.parametrize("method,extra", [("transfer", N), ("square", N * (7 + 1)), ("both", N + N * (7 + 1))])
def test_the_whole_query_bill_is_refused_up_front(table, method, extra):
    """clean logits (N) + transferred points (N, transfer/both) + Square's worst case N * (queries + 1)."""
    t = table
    needed = N + extra
    bb = BlackBoxModel(t.box, query_budget=needed - 1)
    with pytest.raises(QueryBudgetExceeded, match=f"needs up to {needed} queries"):
        transfer_params(_card(), bb, t.x, t.y, method=method, surrogate=t.adv, queries=7, progress=False)
    assert bb.queries == 0
    if method == "transfer":
        ok = BlackBoxModel(t.box, query_budget=needed)
        assert transfer_params(_card(), ok, t.x, t.y, surrogate=t.adv, progress=False).alpha > 0
        assert ok.queries == needed


def test_class_and_top_k_checks_against_the_black_box(table):
    t = table
    assert _run(t, _card(top_k=K)).top_k == K  # top_k equal to the number of classes is plain LN
    with pytest.raises(InputError, match=f"top_k = {K + 1}"):
        _run(t, _card(top_k=K + 1))
    five = nn.Sequential(nn.Flatten(), nn.Linear(64, 5))
    with pytest.raises(InputError, match="returns 5 classes"):
        _run(t, _card(), surrogate=five)
    with pytest.raises(InputError, match="linear-mixture"):
        _run(t, _card(method="linear", clamp="linear"))
    with pytest.raises(InputError, match="empty"):
        transfer_params(_card(), t.box, t.x[:0], t.y[:0], surrogate=t.adv[:0], progress=False)
    assert _run(t, _card(), queries=1).alpha > 0  # one Square query per image is a valid (if useless) setting


def _fake_square(t, calls):
    def fake(model, images, labels, **kw):
        calls.append(kw)
        logits = model(t.adv)  # a Square run that ended at the transferred points
        return SimpleNamespace(logits=logits, misclassified=logits.argmax(1) != labels,
                               settings={"attack": "fake", "seed": kw["seed"], "top_k": kw["top_k"],
                                         "n_queries": kw["n_queries"], "eps": kw["eps"], "norm": kw["norm"]})
    return fake


def test_square_gets_the_settings_and_a_weak_budget_is_flagged_below_1000_queries(table, monkeypatch):
    import mixzoo.attacks.square as square

    t, calls = table, []
    monkeypatch.setattr(square, "min_margin_square", _fake_square(t, calls))
    card = _card(top_k=4)
    weak = _run(t, card, method="square", search=False, queries=WEAK_SQUARE_QUERIES - 1, seed=5)
    assert calls[-1]["seed"] == 5 and calls[-1]["top_k"] == 4 and calls[-1]["n_queries"] == WEAK_SQUARE_QUERIES - 1
    assert weak.attack["square"]["seed"] == 5 and weak.attack["square"]["top_k"] == 4
    assert any("robustness unverified" in n for n in weak.notes)
    enough = _run(t, card, method="square", search=False, queries=WEAK_SQUARE_QUERIES)
    assert not any("queries per image" in n for n in enough.notes)


def test_search_uses_the_cards_grid_and_max_argmax_change_and_scores_the_cards_point(table, monkeypatch):
    """search=True runs Algorithm 1 on the card's grid (even a 2-point one), with the given App. D.8.2 filter;
    ``alpha_transferred`` stays the alpha of the card's own (s, p, c) on the same margins."""
    t = table
    attacked, _ = _pick(t.moved, t.clean, t.y, None)
    grid = {"s_values": [0.5, 1.0], "p_values": [1.0], "c_values": [0.0], "objectives": [[[0.0]], [[0.0]]],
            "alphas": [[[0.5]], [[0.5]]]}
    out = _run(t, _card(grid=grid), search=True)
    assert out.grid["s_values"] == [0.5, 1.0] and out.grid["p_values"] == [1.0] and out.grid["c_values"] == [0.0]
    at_card = _alpha(attacked, t.y, 2.0, 2.0, -0.5, 0.9)
    assert out.alpha != pytest.approx(at_card, rel=1e-6)
    assert out.data["alpha_transferred"] == pytest.approx(at_card, rel=1e-6)
    # c = -2 flips many predictions of GELU(LN + c) (GELU is not monotone below 0)
    ln = _ln(t.clean.double())
    assert float((F.gelu(ln - 2.0).argmax(1) != ln.argmax(1)).double().mean()) > 0.05
    two_c = {"s_values": [2.0], "p_values": [2.0], "c_values": [-2.0, -0.5], "objectives": [[[0.0, 0.0]]],
             "alphas": [[[0.5, 0.5]]]}
    filtered = _run(t, _card(grid=two_c), search=True)
    assert any("excluded" in n for n in filtered.notes)
    unfiltered = _run(t, _card(grid=two_c), search=True, max_argmax_change=None)
    assert not any("excluded" in n for n in unfiltered.notes)


class Linear6(nn.Module):
    """A white-box surrogate without a registry spec, named by its ``name`` attribute."""

    name = "linear-six"

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)  # fixed weights, the global RNG untouched
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, K))
        with torch.no_grad():
            self.net[1].weight.copy_(torch.randn(K, 64, generator=g) * 0.3)
            self.net[1].bias.copy_(torch.randn(K, generator=g) * 0.1)

    def forward(self, x):
        return self.net(x)


def test_a_surrogate_model_is_attacked_with_the_given_settings_and_recorded(table):
    """MMAA on the surrogate gets eps, norm, n_iter, seed and the card's top_k; the card records the surrogate's
    own name and weight hash and notes when the hash differs from the surrogate card's."""
    from mixzoo.models import weight_hash

    t = table
    sur = Linear6().eval().requires_grad_(False)
    with torch.no_grad():
        y = sur(t.x).argmax(1)
    y[:4] = (y[:4] + 1) % K  # a few clean mistakes for Algorithm 1
    card = _card(top_k=4)
    out = transfer_params(card, sur, t.x, y, surrogate=sur, n_iter=3, seed=2, norm="L2", eps=0.5, progress=False)
    rec = out.attack["transfer"]
    assert (rec["n_iter"], rec["seed"], rec["top_k"], rec["norm"], rec["eps"]) == (3, 2, 4, "L2", 0.5)
    sur_info = out.provenance["surrogate"]
    assert sur_info["name"] == "linear-six" and sur_info["weight_hash"] == weight_hash(sur)
    assert any("differs from the card's feed" in n for n in out.notes)
    same = _card(top_k=4, rbc={"name": "surrogate", "weight_hash": weight_hash(sur)})
    out = transfer_params(same, sur, t.x, y, surrogate=sur, n_iter=3, seed=2, norm="L2", eps=0.5, progress=False)
    assert not any("differs from the card's" in n for n in out.notes)


# ------------------------------------------------------------------------------------ transfer by name
@pytest.fixture()
def pgd_card(tmp_path):
    from mixzoo.models import load_model

    path = tmp_path / "sur.toml"
    _card(top_k=5, rbc={"name": "digits-pgd", "weight_hash": "feed"},
          attack={"eps": EPS, "norm": "Linf", "n_iter": 2, "n_target_classes": 2, "n_restarts": 1, "seed": 3,
                  "batch_size": 10}).save(path)
    return path, load_model("digits-pgd")


def test_by_name_passes_the_cards_mmaa_settings_and_its_own_options_on(pgd_card, tmp_path, monkeypatch):
    import mixzoo.pipeline as pipeline

    path, _ = pgd_card
    calls, real = [], pipeline.cached_mmaa

    def spy(model, data, **kw):
        calls.append(kw)
        return real(model, data, **kw)

    monkeypatch.setattr(mixzoo.methods.mixednuts.calibration_data, "cached_mmaa", spy)
    out = transfer_params_by_name(path, "digits-std", n_calib=60, beta=0.8, seed=7, cache_dir=tmp_path / "c",
                                  progress=False)
    kw = calls[0]
    # the card's eps (0.1) and not digits-pgd's spec epsilon (0.2); the card's top_k
    assert (kw["eps"], kw["norm"], kw["n_iter"], kw["n_target_classes"], kw["seed"], kw["top_k"]) == \
        (EPS, "Linf", 2, 2, 3, 5)
    assert out.beta == 0.8 and out.provenance["seed"] == 7
    assert any("differs from the card's feed" in n for n in out.notes)
    assert "cached_mmaa" in out.attack["transfer"]["source"]
    assert not {"name", "eps", "norm"} & set(out.attack["transfer"])


def test_by_name_checks_before_loading_or_attacking(pgd_card, tmp_path):
    path, _ = pgd_card
    with pytest.raises(InputError, match="--n-calib must be positive"):
        transfer_params_by_name(path, "digits-std", n_calib=0, progress=False)
    other = tmp_path / "fm.toml"
    MixCard.from_dict({**MixCard.load(path).to_dict(), "dataset": "fashion-mnist"}).save(other)
    with pytest.raises(InputError, match=re.escape(f"surrogate card {str(other)!r} was calibrated on dataset")):
        transfer_params_by_name(other, "digits-std", n_calib=12, cache_dir=tmp_path / "c", progress=False)
    # a surrogate of another task is refused before its MMAA (the cached MMAA images carry no class count)
    import mixzoo.models
    import mixzoo.pipeline
    from mixzoo.models import BaseClassifier
    from mixzoo.registry import ModelSpec

    real = mixzoo.models.load_model
    spec = ModelSpec(name="digits-pgd", role="robust", dataset="digits", num_classes=5, input_size=(1, 8, 8),
                     source={"kind": "test"}, threat_model="Linf", epsilon=EPS)
    five = BaseClassifier(nn.Sequential(nn.Flatten(), nn.Linear(64, 5)).eval(), spec)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mixzoo.models, "load_model", lambda name, **kw: five if name == "digits-pgd" else real(name, **kw))
        mp.setattr(mixzoo.methods.mixednuts.calibration_data, "cached_mmaa",
                   lambda *a, **kw: pytest.fail("MMAA ran on a wrong surrogate"))
        with pytest.raises(InputError, match="has 5 classes but black-box model 'digits-std' has 10"):
            transfer_params_by_name(path, "digits-std", n_calib=12, cache_dir=tmp_path / "c", progress=False)
    # an explicit dataset wins over the card's, and its images must fit the black box
    with pytest.raises(InputError, match=r"gives images of shape \(1, 28, 28\)"):
        transfer_params_by_name(path, "digits-std", dataset="fashion-mnist", n_calib=12, cache_dir=tmp_path / "c",
                                progress=False)


# ------------------------------------------------------------------------------------ approximation (App. D.9)
def test_transformed_rbc_uses_the_cards_clamp_and_top_k():
    from mixzoo.approximation import transformed_rbc

    net = Linear6().eval()
    card = _card(clamp="softplus", top_k=3)
    x = load_dataset("digits", "calibration", n=8).images
    with torch.no_grad():
        got = transformed_rbc(net, card)(x).softmax(1).double()
        want = _m(net(x), 2.0, 2.0, -0.5, "softplus", 3).softmax(1)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_worst_points_use_the_cards_top_k_and_need_logits():
    from mixzoo.approximation import worst_points

    g = torch.Generator().manual_seed(1)
    y = torch.randint(0, K, (60,), generator=g)
    a, b = (torch.randn(60, K, generator=g) + 3 * F.one_hot(y, K) for _ in range(2))
    card = SimpleNamespace(s=1.0, p=1.0, c=0.0, clamp="softplus", top_k=3)

    def key(z, top_k):
        m = _m(z, 1.0, 1.0, 0.0, "softplus", top_k)
        return _signed(m, y) - 2.0 * (m.argmax(1) != y).double()

    use_b = key(b, 3) < key(a, 3)
    assert (use_b != (key(b, None) < key(a, None))).any()  # top_k changes the choice on this data
    torch.testing.assert_close(worst_points(card, a, b, labels=y), torch.where(use_b.view(-1, 1), b, a))
    with pytest.raises(InputError, match="at least one logits tensor"):
        worst_points(card, labels=y)
    # at an exact tie of h^M the first argmax decides: [1, 1, 0, ...] with label 1 is a flip (margin 0) and beats
    # [0, 1, 1, ...], which is correct with margin 0, whichever tensor comes first
    tie_flip = torch.tensor([[1.0, 1.0, 0.0, 0.0, 0.0, 0.0]])
    tie_right = torch.tensor([[0.0, 1.0, 1.0, 0.0, 0.0, 0.0]])
    one = torch.tensor([1])
    assert torch.equal(worst_points(card, tie_right, tie_flip, labels=one), tie_flip)
    assert torch.equal(worst_points(card, tie_flip, tie_right, labels=one), tie_flip)



def _d9(seed: int = 4, n: int = 300):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, K, (n,), generator=g)
    clean = torch.randn(n, K, generator=g)
    clean[torch.arange(n), y] += 4 * torch.rand(n, generator=g)
    sur, direct = clean.clone(), clean.clone()
    sur[torch.arange(n), y] -= 2.5 * torch.rand(n, generator=g)
    direct[torch.arange(n), y] -= 2.5 * torch.rand(n, generator=g)
    return y, clean, sur, direct


def test_check_approximation_counts_by_algorithm_1s_rules(fixed_logits, tmp_path):
    """App. D.9 with the attacks replaced by fixed logits: alphas at (s*, p*, c*) with the card's beta and top_k on
    each set of points; robust accuracy of h^LN by the raw argmax and of h^M by its own argmax; the kept shares count,
    among the images whose RBC argmax is right (Algorithm 1's attacked-correct set), those whose h^M margin reaches
    q = 1 / alpha - 1 (Eq. 7 with alpha = 1 / (1 + q))."""
    import mixzoo.approximation as approximation

    y, clean, sur, direct = _d9()
    s, p, c, beta, top_k = 3.0, 2.0, -1.0, 0.8, 4
    alpha = _alpha(sur, y, s, p, c, beta, top_k=top_k)
    card = _card(s=s, p=p, c=c, alpha=alpha, beta=beta, top_k=top_k, data={"n": len(y), "fingerprint": "f00d",
                 "alpha_refit": {}}, attack=dict(eps=0.1, norm="Linf", n_iter=5, n_target_classes=3, n_restarts=1,
                                                 seed=0))
    calls = []

    def fake_mmaa(rbc, data, transform=None, **kw):
        calls.append(kw)
        return {"logits": direct if transform is not None else sur}

    fixed_logits(y, clean, fake_mmaa)
    check = approximation.check_approximation(card, cache_dir=tmp_path, progress=False)
    assert all(kw["top_k"] == top_k for kw in calls)  # the card's top_k, as mix attacked it

    def h_m(z):
        return _m(z, s, p, c, top_k=top_k)

    def key(z):
        m = h_m(z)
        return _signed(m, y) - 2.0 * (m.argmax(1) != y).double()

    worst = torch.where((key(direct) < key(sur)).view(-1, 1), direct, sur)
    assert check.refit is True
    assert check.alpha_surrogate == pytest.approx(alpha, rel=1e-9)
    assert check.alpha_check == pytest.approx(_alpha(direct, y, s, p, c, beta, top_k=top_k), rel=1e-9)
    assert check.alpha_worst == pytest.approx(_alpha(worst, y, s, p, c, beta, top_k=top_k), rel=1e-9)
    assert check.robust_accuracy_ln == pytest.approx(float((sur.argmax(1) == y).double().mean()))
    flips = h_m(direct).argmax(1) != direct.argmax(1)
    assert flips.any()  # c = -1 changes some predictions: raw and transformed argmax differ
    # the mixed classifier (and this share) runs in float32, where GELU's far tail is exactly 0
    judged = _m(direct, s, p, c, top_k=top_k, dtype=torch.float32)
    assert check.robust_accuracy_m == pytest.approx(float((judged.argmax(1) == y).double().mean()))
    q = 1.0 / alpha - 1.0

    def kept(z):
        right = z.argmax(1) == y
        return float((_conf(h_m(z[right])) >= q - 1e-12).double().mean())

    assert check.beta_kept_surrogate == pytest.approx(kept(sur)) and check.beta_kept_surrogate >= beta
    assert check.beta_kept_check == pytest.approx(kept(direct))
    assert check.beta_kept_worst == pytest.approx(kept(worst))


def test_check_counts_kept_margins_in_float64_like_algorithm_1(fixed_logits, tmp_path):
    """Algorithm 1 thresholds float64 margins; the kept share must too. Here most attacked-correct images share one
    row whose float32 margin falls just below its float64 one, so q is that margin and, counted in float64 on the
    card's own points, a share >= beta keeps it (Eq. 7), while a float32 count would lose all the copies."""
    import mixzoo.approximation as approximation
    from mixzoo.transforms import confidence_margin, rbc_transform

    s, p, c, beta = 2.0, 2.0, -0.5, 0.8
    g = torch.Generator().manual_seed(11)

    def margin(z):
        return float(confidence_margin(rbc_transform(z, s, p, c)))

    row = next(r for r in (torch.randn(1, K, generator=g) + 2 * F.one_hot(torch.tensor([0]), K) for _ in range(500))
               if r.argmax() == 0 and margin(r) < margin(r.double()) - 1e-10)
    strong = torch.randn(30, K, generator=g)
    strong[:, 0] += 8.0
    wrong = torch.randn(10, K, generator=g)
    wrong[:, 1] += 8.0
    sur = torch.cat([row.repeat(60, 1), strong, wrong])
    y = torch.zeros(len(sur), dtype=torch.long)
    alpha = _alpha(sur, y, s, p, c, beta)
    assert 1.0 / alpha - 1.0 == pytest.approx(margin(row.double()), rel=1e-9)
    card = _card(s=s, p=p, c=c, alpha=alpha, beta=beta, data={"n": len(y), "fingerprint": "f00d"},
                 attack=dict(eps=0.1, norm="Linf", n_iter=5, n_target_classes=3, n_restarts=1, seed=0))
    fixed_logits(y, sur, lambda *a, **kw: {"logits": sur})
    check = approximation.check_approximation(card, cache_dir=tmp_path, progress=False)
    assert check.beta_kept_surrogate == 1.0 and check.notes == []


def test_refit_alpha_takes_the_larger_alpha_of_the_two_passes_on_the_worst_points(monkeypatch, tmp_path):
    """Second pass (App. D.9, --refit-alpha): alpha by Algorithm 1 at (s*, p*, c*) on the per-image worst of the
    first pass's points and MMAA(h^M)'s; the card keeps the larger alpha with that pass's objective; a 1-point grid
    is never filtered by App. D.8.2 (c = -1 changes many predictions)."""
    import mixzoo.pipeline
    from mixzoo.approximation import refit_alpha

    y, clean, sur, direct = _d9(seed=6)
    s, p, c, beta, top_k = 3.0, 2.0, -1.0, 0.8, 4
    calls = []

    def fake_mmaa(rbc, data, transform=None, **kw):
        calls.append(kw)
        return {"logits": direct}

    monkeypatch.setattr(mixzoo.methods.mixednuts.calibration_data, "cached_mmaa", fake_mmaa)

    def key(z):
        m = _m(z, s, p, c, top_k=top_k)
        return _signed(m, y) - 2.0 * (m.argmax(1) != y).double()

    ln = _ln(clean.double(), top_k)
    assert float((F.gelu(ln + c).argmax(1) != ln.argmax(1)).double().mean()) > 0.005  # D.8.2 would drop this c
    worst = torch.where((key(direct) < key(sur)).view(-1, 1), direct, sur)
    second = _alpha(worst, y, s, p, c, beta, top_k=top_k)
    assert second != pytest.approx(_alpha(direct, y, s, p, c, beta, top_k=top_k), rel=1e-6)
    cdata = SimpleNamespace(attack=dict(eps=0.1, norm="Linf", n_iter=5, n_target_classes=3, n_restarts=1, seed=0),
                            dataset=None, attacked_logits=sur, clean_logits=clean, labels=y)
    assert second < 1
    for first_alpha in (second - 0.01, (second + 1.0) / 2):  # below and above the second pass's alpha
        card = _card(s=s, p=p, c=c, alpha=first_alpha, beta=beta, top_k=top_k, objective=0.5)
        out = refit_alpha(card, nn.Identity(), cdata, cache=None, progress=False)
        assert calls[-1]["top_k"] == top_k
        rec = out.data["alpha_refit"]
        assert rec["alpha_second_pass"] == pytest.approx(second, rel=1e-9)
        assert out.alpha == pytest.approx(max(first_alpha, second), rel=1e-9)
        assert out.objective == (rec["objective_second_pass"] if second > first_alpha else 0.5)
    assert rec["objective_second_pass"] != 0.5


def test_the_plugin_registers_min_margin_square():
    from mixzoo.attacks.evaluation import MinMarginSquareAttack
    from mixzoo.plugins import lookup

    assert lookup("attack", "min-margin-square") is MinMarginSquareAttack


def _by_name_setup(tmp_path, monkeypatch, attack: dict, **black_spec) -> tuple:
    """A surrogate card for ``digits-pgd`` with ``attack`` as its record, a black box (``digits-std``'s network with
    ``black_spec`` in its spec) served by ``load_black_box``, and a spy on the pipeline's cached MMAA: (card path,
    list of the MMAA calls' keyword arguments)."""
    from dataclasses import replace

    import mixzoo.blackbox
    import mixzoo.pipeline as pipeline
    from mixzoo.blackbox import as_black_box
    from mixzoo.models import BaseClassifier, load_model

    path = tmp_path / "sur.toml"
    _card(rbc={"name": "digits-pgd", "weight_hash": "feed"},
          attack={"n_iter": 2, "n_target_classes": 2, "n_restarts": 1, "seed": 3, "batch_size": 10,
                  **attack}).save(path)
    std = load_model("digits-std")
    black = BaseClassifier(std.network, replace(std.spec, **black_spec))
    monkeypatch.setattr(mixzoo.blackbox, "load_black_box", lambda name, query_budget=None, **kw: as_black_box(black))
    calls, real = [], pipeline.cached_mmaa

    def spy(model, data, **kw):
        calls.append(kw)
        return real(model, data, **kw)

    monkeypatch.setattr(mixzoo.methods.mixednuts.calibration_data, "cached_mmaa", spy)
    return path, calls


def test_by_name_without_a_recorded_eps_attacks_the_surrogate_at_the_black_boxs_radius(tmp_path, monkeypatch):
    """A card with no eps in its attack record: the surrogate's MMAA runs at the radius transfer_params then checks
    the points against, the black box's (its threat model is the one being calibrated), not at the surrogate's
    own spec epsilon (digits-pgd: 0.2), which failed with "beyond eps"."""
    from mixzoo.models import load_model

    path, calls = _by_name_setup(tmp_path, monkeypatch, {"norm": "Linf"}, threat_model="Linf", epsilon=EPS)
    out = transfer_params_by_name(path, "digits-std", n_calib=30, cache_dir=tmp_path / "c", progress=False)
    assert load_model("digits-pgd").spec.epsilon != EPS
    assert [(kw["eps"], kw["norm"]) for kw in calls] == [(EPS, "Linf")]
    assert out.attack["eps"] == EPS


def test_by_name_takes_eps_and_norm_when_neither_card_nor_black_box_has_a_radius(tmp_path, monkeypatch):
    """``transfer-params --eps``: with no radius in the card and none in the black box's spec, the error names the
    option; given, the surrogate's MMAA, the checks and the new card all use it."""
    path, calls = _by_name_setup(tmp_path, monkeypatch, {}, threat_model=None, epsilon=None)
    kw = dict(n_calib=30, cache_dir=tmp_path / "c", progress=False)
    with pytest.raises(InputError, match="pass --eps"):
        transfer_params_by_name(path, "digits-std", **kw)
    out = transfer_params_by_name(path, "digits-std", eps=0.05, out=tmp_path / "new.toml", **kw)
    assert [(c["eps"], c["norm"]) for c in calls] == [(0.05, "Linf")]
    assert out.attack["eps"] == 0.05 and out.attack["norm"] == "Linf"
    assert MixCard.load(tmp_path / "new.toml").attack["eps"] == 0.05
    for bad, match in ((dict(eps=0.0), "--eps must be a positive"), (dict(eps=float("nan")), "--eps must be"),
                       (dict(eps=True), "--eps must be"), (dict(eps=0.1, norm="L1"), "unknown --norm 'L1'")):
        with pytest.raises(InputError, match=match):
            transfer_params_by_name(path, "digits-std", out=tmp_path / "bad.toml", **bad, **kw)
    assert len(calls) == 1 and not (tmp_path / "bad.toml").exists()
