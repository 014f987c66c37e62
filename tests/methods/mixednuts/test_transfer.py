"""transfer_params (paper App. D.5): transfer, square, both and guess routes on digits-sized models."""

from __future__ import annotations

import contextlib
import math

import pytest
import torch
from torch import nn

from mixzoo.attacks import mmaa
from mixzoo.attacks.margins import ln_signed_margin, selection_key
from mixzoo.blackbox import BlackBoxModel, BlackBoxOutputError, QueryBudgetExceeded
from mixzoo.calibrate import Grid, calibrate
from mixzoo.card import MixCard
from mixzoo.data import load_dataset
from mixzoo.errors import InputError, MissingFileError
from mixzoo.models import BaseClassifier
from mixzoo.registry import ModelSpec
from mixzoo.transfer import DEFAULT_GUESS, transfer_params, transfer_params_by_name
from mixzoo.transforms import confidence_margin, rbc_transform

pytestmark = pytest.mark.usefixtures("one_thread")

EPS = 0.2
N_CALIB = 150
MMAA_KW = {"eps": EPS, "norm": "Linf", "n_iter": 10, "seed": 0}


def _spec(name: str, num_classes: int = 10, black_box: bool = False) -> ModelSpec:
    source = {"kind": "test", "black_box": True} if black_box else {"kind": "test"}
    return ModelSpec(name=name, role="robust", dataset="digits", num_classes=num_classes, input_size=(1, 8, 8),
                     source=source, threat_model="Linf", epsilon=EPS)


def train_robust_mlp(name: str, seed: int, hidden: int, num_classes: int = 10) -> BaseClassifier:
    """PGD-3 adversarial training (Linf 0.2) of a small MLP on the digits training split, a few seconds."""
    data = load_dataset("digits", "train")
    x, y = data.images, data.labels % num_classes
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Flatten(), nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    for _ in range(120):
        delta = (torch.rand_like(x) * 2 - 1) * EPS
        for _ in range(3):
            delta.requires_grad_(True)
            loss = nn.functional.cross_entropy(net((x + delta).clamp(0, 1)), y)
            (g,) = torch.autograd.grad(loss, delta)
            delta = (delta.detach() + 0.1 * g.sign()).clamp(-EPS, EPS)
        opt.zero_grad()
        nn.functional.cross_entropy(net((x + delta).clamp(0, 1)), y).backward()
        opt.step()
    net.eval().requires_grad_(False)
    return BaseClassifier(net, _spec(name, num_classes))


@pytest.fixture(scope="module")
def setup(one_thread):
    """Surrogate A (white box, with its MMAA card), black box B, and the calibration images."""
    a = train_robust_mlp("tiny-a", seed=0, hidden=64)
    b = train_robust_mlp("tiny-b", seed=1, hidden=48)
    data = load_dataset("digits", "calibration", n=N_CALIB)
    x, y = data.images, data.labels
    # what transfer_params runs on a surrogate model: starts per image index, every image attacked (lowest margins)
    res = mmaa(a, x, y, progress=False, index=torch.arange(len(y)), attack_all=True, **MMAA_KW)
    with torch.no_grad():
        clean = a(x)
    card = calibrate(clean_logits=clean, clean_labels=y, attacked_logits=res.logits, attacked_labels=y, beta=0.95,
                     grid=Grid(s_n=4, p_n=4, c_n=4), rbc=a, abc={"name": "digits-std", "weight_hash": "abc"},
                     dataset="digits", attack_info={"eps": EPS, "norm": "Linf"})
    return {"a": a, "b": b, "x": x, "y": y, "card": card, "mmaa": res}


def _q(margins: torch.Tensor, beta: float) -> float:
    """The quantile rule of mixzoo.calibrate, written out: sorted margins, index floor((1 - beta) n)."""
    m = margins.sort().values
    return float(m[min(int(math.floor((1 - beta) * len(m) + 1e-9)), len(m) - 1)])


def _alpha_at(card: MixCard, logits: torch.Tensor, labels: torch.Tensor) -> float:
    mapped = rbc_transform(logits.double(), card.s, card.p, card.c, clamp=card.clamp)
    right = logits.argmax(1) == labels
    return 1.0 / (1.0 + _q(confidence_margin(mapped)[right], card.beta))


@pytest.mark.parametrize("method", ["transfer", "square", "both", "guess"])
def test_every_method_gives_a_valid_card(setup, method, tmp_path):
    bb = BlackBoxModel(setup["b"])
    surrogate = setup["a"] if method in ("transfer", "both") else None
    with pytest.warns(UserWarning, match="unverified") if method == "guess" else contextlib.nullcontext():
        card = transfer_params(setup["card"], bb, setup["x"], setup["y"], method=method, surrogate=surrogate,
                               queries=30, progress=False, n_iter=MMAA_KW["n_iter"])
    assert card.fit == method and 0.5 <= card.alpha <= 1 and card.objective is not None
    assert card.rbc == {"name": "tiny-b", "weight_hash": setup["b"].weight_hash, "black_box": True}
    assert card.abc == setup["card"].abc and card.dataset == "digits" and card.clamp == setup["card"].clamp
    sur = card.provenance["surrogate"]
    assert (sur["name"], sur["weight_hash"]) == ("tiny-a", setup["a"].weight_hash)
    q = card.attack["queries"]
    assert q["clean"] == N_CALIB and q["total"] == bb.queries
    assert q.get("transfer", 0) == (N_CALIB if method in ("transfer", "both") else 0)
    if method in ("square", "both"):
        assert 2 * N_CALIB <= q["square"] <= N_CALIB * 31
    if method in ("transfer", "both", "guess"):
        assert (card.s, card.p, card.c) == ((setup["card"].s, setup["card"].p, setup["card"].c) if method != "guess"
                                            else (DEFAULT_GUESS["s"], DEFAULT_GUESS["p"], DEFAULT_GUESS["c"]))
    path = card.save(tmp_path / "card.toml")
    back = MixCard.load(path)
    assert (back.fit, back.s, back.p, back.c, back.alpha) == (method, card.s, card.p, card.c, card.alpha)


def test_transfer_to_the_same_model_reproduces_white_box_calibration(setup):
    """With the surrogate as its own black box, the transferred points are its MMAA points: same card values."""
    for surrogate in (setup["mmaa"], setup["a"], setup["mmaa"].adv_images):
        card = transfer_params(setup["card"], setup["a"], setup["x"], setup["y"], surrogate=surrogate,
                               progress=False, n_iter=MMAA_KW["n_iter"])
        assert card.alpha == pytest.approx(setup["card"].alpha, abs=1e-12)
        assert card.objective == pytest.approx(setup["card"].objective)
        assert card.data["objective_transferred"] == pytest.approx(setup["card"].objective)


def test_transfer_alpha_follows_algorithm_1_on_black_box_margins(setup):
    b, x, y = setup["b"], setup["x"], setup["y"]
    card = transfer_params(setup["card"], b, x, y, surrogate=setup["mmaa"], progress=False)
    with torch.no_grad():
        clean, moved = b(x), b(setup["mmaa"].adv_images)
    key = [selection_key(z, ln_signed_margin()(z, y), y) for z in (clean, moved)]
    attacked = torch.where((key[0] < key[1]).view(-1, 1), clean, moved)  # the clean image is a visited point
    assert card.alpha == pytest.approx(_alpha_at(card, attacked, y), rel=1e-6)
    assert card.data["n_attacked_correct"] == int((attacked.argmax(1) == y).sum())
    assert card.data["n_clean_incorrect"] == int((clean.argmax(1) != y).sum())


def test_both_is_at_least_as_strong_as_each_attack(setup):
    kw = dict(surrogate=setup["mmaa"], queries=40, progress=False, search=False)
    cards = {m: transfer_params(setup["card"], setup["b"], setup["x"], setup["y"], method=m, **kw)
             for m in ("transfer", "square", "both")}
    right = {m: c.data["n_attacked_correct"] for m, c in cards.items()}
    assert right["both"] <= min(right["transfer"], right["square"])  # per example the better attack wins
    assert cards["both"].data["both_square_won"] > 0


def test_square_runs_algorithm_1_on_the_cards_grid(setup):
    card = transfer_params(setup["card"], BlackBoxModel(setup["b"]), setup["x"], setup["y"], method="square",
                           queries=30, progress=False)
    assert len(card.grid["s_values"]) == 4 and len(card.grid["p_values"]) == 4
    objectives = torch.as_tensor(card.grid["objectives"])
    assert card.objective == pytest.approx(float(objectives.min()))
    assert card.data["objective_transferred"] >= card.objective - 1e-12  # the card's point is one of the grid's


def test_guess_alpha_comes_from_clean_margins(setup):
    b, x, y = setup["b"], setup["x"], setup["y"]
    with pytest.warns(UserWarning, match="unverified"):
        card = transfer_params(setup["card"], b, x, y, method="guess", progress=False)
    with torch.no_grad():
        clean = b(x)
    assert card.alpha == pytest.approx(_alpha_at(card, clean, y), rel=1e-6)
    assert any("unverified" in n for n in card.notes)
    with pytest.warns(UserWarning):
        free = transfer_params(None, b, x, y, method="guess", guess=(1.0, 2.0, -0.5), progress=False)
    assert (free.s, free.p, free.c, free.beta) == (1.0, 2.0, -0.5, 0.985)


# ------------------------------------------------------------------------------------------------ bad inputs
def test_dataset_mismatch(setup):
    other = MixCard.from_dict({**setup["card"].to_dict(), "dataset": "fashion-mnist"})
    bb = BlackBoxModel(setup["b"])
    with pytest.raises(InputError, match=r"dataset 'fashion-mnist' but black-box model 'tiny-b' is for 'digits'"):
        transfer_params(other, bb, setup["x"], setup["y"], surrogate=setup["mmaa"], progress=False)
    assert bb.queries == 0  # refused before the first query


def test_class_count_mismatch(setup):
    five = BaseClassifier(nn.Sequential(nn.Flatten(), nn.Linear(64, 5)).eval(), _spec("tiny-five", 5))
    with pytest.raises(InputError, match=r"5-class model but black-box model 'tiny-b' returns 10 classes"):
        transfer_params(setup["card"], setup["b"], setup["x"], setup["y"], surrogate=five, progress=False)


def test_budget_too_small_names_what_is_needed(setup):
    bb = BlackBoxModel(setup["b"], query_budget=5000)
    needed = N_CALIB + N_CALIB * 101
    with pytest.raises(QueryBudgetExceeded, match=f"needs up to {needed} queries"):
        transfer_params(setup["card"], bb, setup["x"], setup["y"], method="square", queries=100, progress=False)
    assert bb.queries == 0


class _Bad(nn.Module):
    def __init__(self, model, kind):
        super().__init__()
        self.model, self.kind = model, kind

    def forward(self, x):
        out = self.model(x)
        return out * float("nan") if self.kind == "nan" else out[:, :, None]


@pytest.mark.parametrize("kind,match", [("nan", "NaN"), ("shape", "shape")])
def test_broken_black_box(setup, kind, match):
    with pytest.raises(BlackBoxOutputError, match=match):
        transfer_params(setup["card"], _Bad(setup["b"], kind), setup["x"], setup["y"], surrogate=setup["mmaa"],
                        progress=False)


def test_other_bad_inputs(setup):
    card, b, x, y = setup["card"], setup["b"], setup["x"], setup["y"]
    with pytest.raises(InputError, match="unknown method"):
        transfer_params(card, b, x, y, method="magic")
    with pytest.raises(InputError, match="needs the surrogate's mix card"):
        transfer_params(None, b, x, y, method="square")
    with pytest.raises(InputError, match="needs a surrogate"):
        transfer_params(card, b, x, y, method="transfer", progress=False)
    with pytest.raises(InputError, match="beyond eps"):
        transfer_params(card, b, x, y, surrogate=(x + 0.5).clamp(0, 1), progress=False)
    with pytest.raises(InputError, match="itself a black box"):
        transfer_params(card, b, x, y, surrogate=BlackBoxModel(setup["a"]), progress=False)
    with pytest.raises(InputError, match="calib_labels"):
        transfer_params(card, b, x, y[:-1], surrogate=setup["mmaa"], progress=False)


# ------------------------------------------------------------------------------------------------ by name
@pytest.fixture(scope="module")
def zoo_card(tmp_path_factory, one_thread):
    from mixzoo.models import load_model
    from mixzoo.pipeline import mix

    try:
        load_model("digits-pgd")
    except MissingFileError:
        pytest.skip("built-in zoo weights for digits-pgd are not trained")
    root = tmp_path_factory.mktemp("zoo")
    path = root / "card.toml"
    mix("digits-std", "digits-pgd", n_calib=300, n_iter=5, grid=Grid(s_n=3, p_n=3, c_n=3), out=path,
        cache_dir=root / "cache", progress=False)
    return path, root / "cache"


def test_by_name_transfer_reuses_the_surrogates_mmaa(zoo_card, tmp_path):
    path, cache = zoo_card
    out = tmp_path / "bb.toml"
    card = transfer_params_by_name(path, "digits-pgd", n_calib=300, method="transfer", out=out, cache_dir=cache,
                                   progress=False)
    assert out.exists() and MixCard.load(out).fit == "transfer"
    white = MixCard.load(path)
    assert card.alpha == pytest.approx(white.alpha) and (card.s, card.p, card.c) == (white.s, white.p, white.c)
    assert card.provenance["surrogate"]["card"] == str(path) and card.rbc["black_box"] is True
    assert card.attack["queries"]["total"] == 600
    assert "cached_mmaa" in card.attack["transfer"]["source"]


def test_by_name_errors(zoo_card, tmp_path):
    path, cache = zoo_card
    bad = tmp_path / "fmnist.toml"
    MixCard.from_dict({**MixCard.load(path).to_dict(), "dataset": "fashion-mnist"}).save(bad)
    with pytest.raises(InputError, match="calibrated on dataset 'fashion-mnist'"):
        transfer_params_by_name(bad, "digits-pgd", n_calib=20, method="guess", cache_dir=cache, progress=False)
    with pytest.raises(InputError, match=r"\.toml or \.json"):
        transfer_params_by_name(path, "digits-pgd", out=tmp_path / "x.txt")
    with pytest.raises(QueryBudgetExceeded):
        transfer_params_by_name(path, "digits-pgd", n_calib=20, method="square", queries=100, query_budget=50,
                                cache_dir=cache, progress=False)
    # settings that would fail after the surrogate's MMAA fail before it: nothing new in a fresh cache
    for bad, match in (({"queries": 0}, "queries must be at least 1"), ({"beta": 1.5}, "beta must lie")):
        with pytest.raises(InputError, match=match):
            transfer_params_by_name(path, "digits-pgd", n_calib=20, cache_dir=tmp_path / "fresh", progress=False,
                                    **bad)
        assert not (tmp_path / "fresh").exists()


def test_cli_transfer_params_budget_and_weak_square(zoo_card, tmp_path, monkeypatch):
    """`mixzoo transfer-params`: a budget too small is refused before any query, a weak Square run is flagged."""
    import json

    from typer.testing import CliRunner

    from mixzoo.cli import app

    path, cache = zoo_card
    monkeypatch.setenv("MIXZOO_CACHE", str(cache))
    runner = CliRunner()
    out = tmp_path / "bb.toml"
    base = ["transfer-params", "--from", str(path), "--rbc", "digits-pgd", "--method", "square", "--n-calib", "300",
            "--queries", "20", "--out", str(out)]
    refused = runner.invoke(app, [*base, "--query-budget", "100"])
    assert refused.exit_code == 2 and "budget" in refused.output and not out.exists()
    res = runner.invoke(app, [*base, "--json"])
    assert res.exit_code == 0, res.output
    payload = json.loads(res.stdout)
    assert payload["method"] == "square" and out.exists()
    assert any("20 queries per image" in n and "robustness unverified" in n for n in payload["notes"])


# ---------------------------------------------------------------------------------------- survivors of the audit
def _key(logits: torch.Tensor, y: torch.Tensor, top_k: int | None) -> torch.Tensor:
    """The attacker's key, written out: signed LN margin, minus 2 where misclassified (lower is better)."""
    return selection_key(logits, ln_signed_margin(top_k)(logits, y), y)


class SaferAwayFromClean(nn.Module):
    """``model`` plus a true-class bonus growing with the L1 distance from the clean image of the same row: the
    clean images are answered as by ``model``, every moved point (e.g. a transferred MMAA point) is safer."""

    def __init__(self, model: nn.Module, clean: torch.Tensor, labels: torch.Tensor):
        super().__init__()
        self.model, self.clean, self.labels = model, clean, labels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert len(x) == len(self.clean)  # one chunk: rows are the calibration images in order
        out = self.model(x).clone()
        far = (x - self.clean).flatten(1).abs().sum(dim=1)
        out[torch.arange(len(x)), self.labels] += 5.0 * far
        return out


def test_transfer_keeps_the_clean_point_where_the_transferred_one_is_worse(setup):
    """Per example the attacked point is the better of (transferred point, clean point) for the attacker: where
    the transfer only made the black box safer, Algorithm 1 must see the clean logits."""
    x, y, card = setup["x"], setup["y"], setup["card"]
    adv = setup["mmaa"].adv_images
    box = SaferAwayFromClean(setup["b"], x, y)
    with torch.no_grad():
        clean, moved = box(x), box(adv)
    key_clean, key_moved = _key(clean, y, card.top_k), _key(moved, y, card.top_k)
    keep_clean = key_clean < key_moved
    assert keep_clean.sum() > N_CALIB // 2  # the case this test is about: mostly worse than clean
    attacked = torch.where(keep_clean.view(-1, 1), clean, moved)
    out = transfer_params(card, box, x, y, surrogate=adv, progress=False)
    assert out.data["transfer_kept_clean_point"] == int(keep_clean.sum())
    assert out.data["transfer_flipped"] == int((moved.argmax(1) != y).sum())
    assert out.data["n_attacked_correct"] == int((attacked.argmax(1) == y).sum())
    assert out.alpha == pytest.approx(_alpha_at(out, attacked, y), rel=1e-6)
    assert out.alpha != pytest.approx(_alpha_at(out, moved, y), rel=1e-6)  # the transferred points alone differ


def test_both_counts_the_images_where_square_won(setup):
    """method 'both': per image Square's point replaces the (transfer or clean) point only where its key is strictly
    lower; ``both_square_won`` counts those images, and Algorithm 1 sees the winners."""
    from mixzoo.attacks.square import min_margin_square

    b, x, y, card = setup["b"], setup["x"], setup["y"], setup["card"]
    queries = 20
    half = (torch.arange(len(y)) % 2 == 0).view(-1, 1, 1, 1)
    adv = torch.where(half, setup["mmaa"].adv_images, x)  # MMAA points for half the images: both attacks win some
    out = transfer_params(card, BlackBoxModel(b), x, y, method="both", surrogate=adv, queries=queries,
                          progress=False, search=False)
    with torch.no_grad():
        clean, moved = b(x), b(adv)
    top_k = card.top_k
    transfer_side = torch.where((_key(clean, y, top_k) < _key(moved, y, top_k)).view(-1, 1), clean, moved)
    sq = min_margin_square(b, x, y, eps=EPS, norm="Linf", n_queries=queries, seed=0, top_k=top_k, batch_size=250,
                           progress=False, index=torch.arange(len(y)))
    key_t, key_s = _key(transfer_side, y, top_k), _key(sq.logits, y, top_k)
    square_won, transfer_won = key_s < key_t, key_t < key_s
    assert 0 < int(square_won.sum()) != int(transfer_won.sum())  # the two counts tell the roles apart
    assert out.data["both_square_won"] == int(square_won.sum())
    attacked = torch.where(square_won.view(-1, 1), sq.logits, transfer_side)
    assert out.data["n_attacked_correct"] == int((attacked.argmax(1) == y).sum())
    assert out.alpha == pytest.approx(_alpha_at(out, attacked, y), rel=1e-6)


def test_fixed_transferred_point_is_exempt_from_the_argmax_change_filter(setup):
    """A 1 x 1 x 1 grid (the card's s, p, c kept) is calibrated even when its transform changes far more than 0.5%
    of the black box's predictions (App. D.8.2 filters grid points of a search, it cannot drop the only one);
    searching the card's grid does filter that c."""
    from mixzoo.transforms import get_clamp, layer_norm

    b, x, y = setup["b"], setup["x"], setup["y"]
    c = -2.0  # GELU is not monotone below 0: a large negative c flips unconfident predictions
    assert c in setup["card"].grid["c_values"]
    edited = setup["card"].to_dict()
    edited["mixednuts"]["c"] = c
    card = MixCard.from_dict(edited)
    with torch.no_grad():
        ln = layer_norm(b(x).double(), card.top_k)
    changed = float((get_clamp(card.clamp)(ln + c).argmax(1) != ln.argmax(1)).double().mean())
    assert changed > 0.05  # well beyond the default max_argmax_change = 0.005
    with pytest.raises(InputError, match="every c in the grid"):  # what the filter would do to a 1-point grid
        calibrate(clean_logits=b(x), clean_labels=y, attacked_logits=b(setup["mmaa"].adv_images), attacked_labels=y,
                  beta=card.beta, clamp=card.clamp, grid=Grid.point(card.s, card.p, c))
    fixed = transfer_params(card, b, x, y, surrogate=setup["mmaa"], progress=False)
    assert (fixed.s, fixed.p, fixed.c) == (card.s, card.p, c) and 0.5 <= fixed.alpha <= 1
    assert fixed.data["transform_argmax_changed"] > 0.05
    searched = transfer_params(card, b, x, y, surrogate=setup["mmaa"], progress=False, search=True)
    assert searched.c != c and any("excluded" in n and "-2" in n for n in searched.notes)
