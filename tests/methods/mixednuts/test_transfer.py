"""transfer_params (paper App. D.5): transfer, square, both and guess routes on digits-sized models."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re
from types import SimpleNamespace

import pytest
import torch
from card_fields import nuts_card
from mixednuts_reference import alpha as _alpha
from mixednuts_reference import conf as _conf
from mixednuts_reference import ln as _ln
from mixednuts_reference import signed as _signed
from torch import nn
from torch.nn import functional as F  # noqa: N812

import mixzoo.methods.mixednuts.calibration_data
import mixzoo.zoo.models
from mixzoo.attacks import mmaa
from mixzoo.attacks.apgd import ApgdSettings
from mixzoo.attacks.margins import ln_signed_margin, selection_key
from mixzoo.attacks.square import SquareSettings
from mixzoo.core.card import MixCard
from mixzoo.core.errors import InputError, MissingFileError
from mixzoo.core.registry import ModelSpec
from mixzoo.methods.mixednuts.calibrate import Grid, calibrate
from mixzoo.methods.mixednuts.transfer import (
    DEFAULT_GUESS,
    WEAK_SQUARE_QUERIES,
    transfer_params,
    transfer_params_by_name,
)
from mixzoo.methods.mixednuts.transforms import confidence_margin, rbc_transform
from mixzoo.zoo.blackbox import BlackBoxModel, BlackBoxOutputError, QueryBudgetExceeded
from mixzoo.zoo.data import load_dataset
from mixzoo.zoo.models import BaseClassifier

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
    res = mmaa(a, x, y, ApgdSettings(**MMAA_KW), progress=False, index=torch.arange(len(y)), attack_all=True)
    with torch.no_grad():
        clean = a(x)
    card = calibrate(clean_logits=clean, clean_labels=y, attacked_logits=res.logits, attacked_labels=y, beta=0.95,
                     grid=Grid(s_n=4, p_n=4, c_n=4), rbc=a, abc={"name": "digits-std", "weight_hash": "abc"},
                     dataset="digits", attack_info={"eps": EPS, "norm": "Linf"})
    return {"a": a, "b": b, "x": x, "y": y, "card": card, "mmaa": res}


def _q(margins: torch.Tensor, beta: float) -> float:
    """The quantile rule of mixzoo.methods.mixednuts.calibrate, written out: sorted margins, index
    floor((1 - beta) n)."""
    m = margins.sort().values
    return float(m[min(int(math.floor((1 - beta) * len(m) + 1e-9)), len(m) - 1)])


def _alpha_at(card: MixCard, logits: torch.Tensor, labels: torch.Tensor) -> float:
    mapped = rbc_transform(
        logits.double(), card.params["s"], card.params["p"], card.params["c"], clamp=card.params["clamp"]
    )
    right = logits.argmax(1) == labels
    return 1.0 / (1.0 + _q(confidence_margin(mapped)[right], card.params["beta"]))


@pytest.mark.parametrize("method", ["transfer", "square", "both", "guess"])
def test_every_method_gives_a_valid_card(setup, method, tmp_path):
    bb = BlackBoxModel(setup["b"])
    surrogate = setup["a"] if method in ("transfer", "both") else None
    with pytest.warns(UserWarning, match="unverified") if method == "guess" else contextlib.nullcontext():
        card = transfer_params(setup["card"], bb, setup["x"], setup["y"], method=method, surrogate=surrogate,
                               queries=30, progress=False, n_iter=MMAA_KW["n_iter"])
    assert card.params["fit"] == method and 0.5 <= card.params["alpha"] <= 1 and card.params["objective"] is not None
    assert card.rbc == {"name": "tiny-b", "weight_hash": setup["b"].weight_hash, "black_box": True}
    assert (
        card.abc == setup["card"].abc
        and card.dataset == "digits"
        and card.params["clamp"] == setup["card"].params["clamp"]
    )
    sur = card.provenance["surrogate"]
    assert (sur["name"], sur["weight_hash"]) == ("tiny-a", setup["a"].weight_hash)
    q = card.attack["queries"]
    assert q["clean"] == N_CALIB and q["total"] == bb.queries
    assert q.get("transfer", 0) == (N_CALIB if method in ("transfer", "both") else 0)
    if method in ("square", "both"):
        assert 2 * N_CALIB <= q["square"] <= N_CALIB * 31
    if method in ("transfer", "both", "guess"):
        assert (card.params["s"], card.params["p"], card.params["c"]) == (
            (setup["card"].params["s"], setup["card"].params["p"], setup["card"].params["c"])
            if method != "guess"
            else (DEFAULT_GUESS["s"], DEFAULT_GUESS["p"], DEFAULT_GUESS["c"])
        )
    path = card.save(tmp_path / "card.toml")
    back = MixCard.load(path)
    assert (back.params["fit"], back.params["s"], back.params["p"], back.params["c"], back.params["alpha"]) == (
        method,
        card.params["s"],
        card.params["p"],
        card.params["c"],
        card.params["alpha"],
    )


def test_transfer_to_the_same_model_reproduces_white_box_calibration(setup):
    """With the surrogate as its own black box, the transferred points are its MMAA points: same card values."""
    for surrogate in (setup["mmaa"], setup["a"], setup["mmaa"].adv_images):
        card = transfer_params(setup["card"], setup["a"], setup["x"], setup["y"], surrogate=surrogate,
                               progress=False, n_iter=MMAA_KW["n_iter"])
        assert card.params["alpha"] == pytest.approx(setup["card"].params["alpha"], abs=1e-12)
        assert card.params["objective"] == pytest.approx(setup["card"].params["objective"])
        assert card.data["objective_transferred"] == pytest.approx(setup["card"].params["objective"])


def test_transfer_alpha_follows_algorithm_1_on_black_box_margins(setup):
    b, x, y = setup["b"], setup["x"], setup["y"]
    card = transfer_params(setup["card"], b, x, y, surrogate=setup["mmaa"], progress=False)
    with torch.no_grad():
        clean, moved = b(x), b(setup["mmaa"].adv_images)
    key = [selection_key(z, ln_signed_margin()(z, y), y) for z in (clean, moved)]
    attacked = torch.where((key[0] < key[1]).view(-1, 1), clean, moved)  # the clean image is a visited point
    assert card.params["alpha"] == pytest.approx(_alpha_at(card, attacked, y), rel=1e-6)
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
    assert len(card.params["grid"]["s_values"]) == 4 and len(card.params["grid"]["p_values"]) == 4
    objectives = torch.as_tensor(card.params["grid"]["objectives"])
    assert card.params["objective"] == pytest.approx(float(objectives.min()))
    assert (
        card.data["objective_transferred"] >= card.params["objective"] - 1e-12
    )  # the card's point is one of the grid's


def test_guess_alpha_comes_from_clean_margins(setup):
    b, x, y = setup["b"], setup["x"], setup["y"]
    with pytest.warns(UserWarning, match="unverified"):
        card = transfer_params(setup["card"], b, x, y, method="guess", progress=False)
    with torch.no_grad():
        clean = b(x)
    assert card.params["alpha"] == pytest.approx(_alpha_at(card, clean, y), rel=1e-6)
    assert any("unverified" in n for n in card.notes)
    with pytest.warns(UserWarning):
        free = transfer_params(None, b, x, y, method="guess", guess=(1.0, 2.0, -0.5), progress=False)
    assert (free.params["s"], free.params["p"], free.params["c"], free.params["beta"]) == (1.0, 2.0, -0.5, 0.985)


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
    from mixzoo.methods.mixednuts.fitting import mix
    from mixzoo.zoo.models import load_model

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
    assert out.exists() and MixCard.load(out).params["fit"] == "transfer"
    white = MixCard.load(path)
    assert card.params["alpha"] == pytest.approx(white.params["alpha"]) and (
        card.params["s"],
        card.params["p"],
        card.params["c"],
    ) == (white.params["s"], white.params["p"], white.params["c"])
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
    key_clean, key_moved = _key(clean, y, card.params["top_k"]), _key(moved, y, card.params["top_k"])
    keep_clean = key_clean < key_moved
    assert keep_clean.sum() > N_CALIB // 2  # the case this test is about: mostly worse than clean
    attacked = torch.where(keep_clean.view(-1, 1), clean, moved)
    out = transfer_params(card, box, x, y, surrogate=adv, progress=False)
    assert out.data["transfer_kept_clean_point"] == int(keep_clean.sum())
    assert out.data["transfer_flipped"] == int((moved.argmax(1) != y).sum())
    assert out.data["n_attacked_correct"] == int((attacked.argmax(1) == y).sum())
    assert out.params["alpha"] == pytest.approx(_alpha_at(out, attacked, y), rel=1e-6)
    assert out.params["alpha"] != pytest.approx(
        _alpha_at(out, moved, y), rel=1e-6
    )  # the transferred points alone differ


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
    top_k = card.params["top_k"]
    transfer_side = torch.where((_key(clean, y, top_k) < _key(moved, y, top_k)).view(-1, 1), clean, moved)
    sq = min_margin_square(b, x, y, SquareSettings(eps=EPS, norm="Linf", n_queries=queries, seed=0), top_k=top_k,
                           batch_size=250, progress=False, index=torch.arange(len(y)))
    key_t, key_s = _key(transfer_side, y, top_k), _key(sq.logits, y, top_k)
    square_won, transfer_won = key_s < key_t, key_t < key_s
    assert 0 < int(square_won.sum()) != int(transfer_won.sum())  # the two counts tell the roles apart
    assert out.data["both_square_won"] == int(square_won.sum())
    attacked = torch.where(square_won.view(-1, 1), sq.logits, transfer_side)
    assert out.data["n_attacked_correct"] == int((attacked.argmax(1) == y).sum())
    assert out.params["alpha"] == pytest.approx(_alpha_at(out, attacked, y), rel=1e-6)


def test_fixed_transferred_point_is_exempt_from_the_argmax_change_filter(setup):
    """A 1 x 1 x 1 grid (the card's s, p, c kept) is calibrated even when its transform changes far more than 0.5%
    of the black box's predictions (App. D.8.2 filters grid points of a search, it cannot drop the only one);
    searching the card's grid does filter that c."""
    from mixzoo.methods.mixednuts.transforms import get_clamp, layer_norm

    b, x, y = setup["b"], setup["x"], setup["y"]
    c = -2.0  # GELU is not monotone below 0: a large negative c flips unconfident predictions
    assert c in setup["card"].params["grid"]["c_values"]
    edited = setup["card"].to_dict()
    edited["mixednuts"]["c"] = c
    card = MixCard.from_dict(edited)
    with torch.no_grad():
        ln = layer_norm(b(x).double(), card.params["top_k"])
    changed = float((get_clamp(card.params["clamp"])(ln + c).argmax(1) != ln.argmax(1)).double().mean())
    assert changed > 0.05  # well beyond the default max_argmax_change = 0.005
    with pytest.raises(InputError, match="every c in the grid"):  # what the filter would do to a 1-point grid
        calibrate(
            clean_logits=b(x),
            clean_labels=y,
            attacked_logits=b(setup["mmaa"].adv_images),
            attacked_labels=y,
            beta=card.params["beta"],
            clamp=card.params["clamp"],
            grid=Grid.point(card.params["s"], card.params["p"], c),
        )
    fixed = transfer_params(card, b, x, y, surrogate=setup["mmaa"], progress=False)
    assert (fixed.params["s"], fixed.params["p"], fixed.params["c"]) == (
        card.params["s"],
        card.params["p"],
        c,
    ) and 0.5 <= fixed.params["alpha"] <= 1
    assert fixed.data["transform_argmax_changed"] > 0.05
    searched = transfer_params(card, b, x, y, surrogate=setup["mmaa"], progress=False, search=True)
    assert searched.params["c"] != c and any("excluded" in n and "-2" in n for n in searched.notes)


TABLE_EPS = 0.1
K = 6
N = 40


# ------------------------------------------------------------------------------------ references, by hand

def _hand_key(z: torch.Tensor, y: torch.Tensor, top_k: int | None) -> torch.Tensor:
    """MMAA's selection (App. B.1): signed margin of h^LN, minus 2 where the (first) argmax is not y."""
    return _signed(_ln(z.float(), top_k), y) - 2.0 * (z.argmax(1) != y).float()



def _pick(a: torch.Tensor, b: torch.Tensor, y: torch.Tensor, top_k: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    use_b = _hand_key(b, y, top_k) < _hand_key(a, y, top_k)
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
    adv = torch.where(x > 0.5, x - TABLE_EPS, x + TABLE_EPS)
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
                abc={"name": "digits-std"}, attack={"eps": TABLE_EPS, "norm": "Linf"})
    return nuts_card(**{**base, **kw})


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
    assert out.params["top_k"] == top_k
    assert out.data["transfer_kept_clean_point"] == int(used_clean.sum())
    assert out.params["alpha"] == pytest.approx(_alpha(attacked, t.y, 2.0, 2.0, -0.5, 0.9, top_k=top_k), rel=1e-6)


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
    assert out.params["alpha"] == pytest.approx(_alpha(attacked, t.y, 2.0, 2.0, -0.5, 0.9, clamp="softplus"), rel=1e-6)
    assert (
        out.params["clamp"] == "softplus"
        and out.params["temperature"] == 0.5
        and out.params["beta"] == 0.9
        and out.abc == card.abc
    )
    assert out.params["objective"] != pytest.approx(0.25) and out.data["surrogate_objective"] == 0.25
    right = attacked.argmax(1) == t.y
    m = _conf(_ln(attacked[right].double())).sort().values
    alpha_d = 1.0 / (1.0 + float(m[int(math.floor(0.1 * len(m) + 1e-9))]))
    assert out.params["alpha_d"] == pytest.approx(alpha_d, rel=1e-6)
    assert out.provenance["black_box"]["queries"] == 2 * N == out.attack["queries"]["total"]
    assert out.attack["queries"] == {"clean": N, "transfer": N, "total": 2 * N}


def test_a_given_beta_overrides_the_cards(table):
    t = table
    out = _run(t, _card(), beta=0.75)
    attacked, _ = _pick(t.moved, t.clean, t.y, None)
    assert out.params["beta"] == 0.75
    assert out.params["alpha"] == pytest.approx(_alpha(attacked, t.y, 2.0, 2.0, -0.5, 0.75), rel=1e-6)
    with pytest.warns(UserWarning, match="unverified"):
        guess = transfer_params(None, t.box, t.x, t.y, method="guess", beta=0.8, progress=False)
    assert _run(t, _card(), beta=1.0).params["beta"] == 1.0  # beta = 1 is allowed: every attacked-correct margin kept
    assert (
        guess.params["beta"] == 0.8
    )  # educated guess (App. D.5): Table 3's CIFAR-10 s, p, c, alpha from clean margins
    assert guess.params["alpha"] == pytest.approx(_alpha(t.clean, t.y, 5.0, 4.0, -1.1, 0.8), rel=1e-6)


def test_given_eps_and_norm_override_the_cards_and_bound_the_transferred_points(table):
    t = table
    with pytest.raises(InputError, match="beyond eps"):
        _run(t, _card(), eps=TABLE_EPS / 2)
    with pytest.raises(InputError, match="beyond eps"):
        _run(t, _card(), norm="L2")  # EPS in every pixel is 0.8 in L2
    wide = _run(t, _card(), eps=2 * TABLE_EPS)
    assert wide.attack["eps"] == 2 * TABLE_EPS and wide.attack["norm"] == "Linf"
    assert any("attack radius 0.2 differs from the surrogate card's 0.1" in n for n in wide.notes)
    assert not any("attack radius" in n for n in _run(t, _card()).notes)
    for bad in (0.0, -0.1):
        with pytest.raises(InputError, match="no attack radius"):
            _run(t, _card(), eps=bad)


def test_one_image_moved_slightly_beyond_eps_or_a_wrong_shape_is_refused(table):
    t = table
    adv = t.adv.clone()
    adv[5] = (t.x[5] + 1.05 * TABLE_EPS).clamp(0, 1)  # one image, 5 % beyond the radius
    assert float((adv[5] - t.x[5]).abs().max()) > TABLE_EPS * 1.04
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
        assert transfer_params(_card(), ok, t.x, t.y, surrogate=t.adv, progress=False).params["alpha"] > 0
        assert ok.queries == needed


def test_class_and_top_k_checks_against_the_black_box(table):
    t = table
    assert _run(t, _card(top_k=K)).params["top_k"] == K  # top_k equal to the number of classes is plain LN
    with pytest.raises(InputError, match=f"top_k = {K + 1}"):
        _run(t, _card(top_k=K + 1))
    five = nn.Sequential(nn.Flatten(), nn.Linear(64, 5))
    with pytest.raises(InputError, match=f"has 5 classes but black-box model .* has {K}"):
        _run(t, _card(), surrogate=five)
    with pytest.raises(InputError, match="linear-mixture"):
        _run(t, _card(method="linear", clamp="linear"))
    with pytest.raises(InputError, match="empty"):
        transfer_params(_card(), t.box, t.x[:0], t.y[:0], surrogate=t.adv[:0], progress=False)
    assert _run(t, _card(), queries=1).params["alpha"] > 0  # one Square query per image is a valid (if useless) setting


def _fake_square(t, calls):
    def fake(model, images, labels, cfg, **kw):
        kw = {**dataclasses.asdict(cfg), **kw}
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
    assert (
        out.params["grid"]["s_values"] == [0.5, 1.0]
        and out.params["grid"]["p_values"] == [1.0]
        and out.params["grid"]["c_values"] == [0.0]
    )
    at_card = _alpha(attacked, t.y, 2.0, 2.0, -0.5, 0.9)
    assert out.params["alpha"] != pytest.approx(at_card, rel=1e-6)
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
    from mixzoo.zoo.models import weight_hash

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
    from mixzoo.zoo.models import load_model

    path = tmp_path / "sur.toml"
    _card(top_k=5, rbc={"name": "digits-pgd", "weight_hash": "feed"},
          attack={"eps": TABLE_EPS, "norm": "Linf", "n_iter": 2, "n_target_classes": 2, "n_restarts": 1, "seed": 3,
                  "batch_size": 10}).save(path)
    return path, load_model("digits-pgd")


def test_by_name_passes_the_cards_mmaa_settings_and_its_own_options_on(pgd_card, tmp_path, monkeypatch):
    path, _ = pgd_card
    calls, real = [], mixzoo.methods.mixednuts.calibration_data.cached_mmaa

    def spy(model, data, mmaa, **kw):
        calls.append({**dataclasses.asdict(mmaa), **kw})
        return real(model, data, mmaa, **kw)

    monkeypatch.setattr(mixzoo.methods.mixednuts.calibration_data, "cached_mmaa", spy)
    out = transfer_params_by_name(path, "digits-std", n_calib=60, beta=0.8, seed=7, cache_dir=tmp_path / "c",
                                  progress=False)
    kw = calls[0]
    # the card's eps (0.1) and not digits-pgd's spec epsilon (0.2); the card's top_k
    assert (kw["eps"], kw["norm"], kw["n_iter"], kw["n_target_classes"], kw["seed"], kw["top_k"]) == \
        (TABLE_EPS, "Linf", 2, 2, 3, 5)
    assert out.params["beta"] == 0.8 and out.provenance["seed"] == 7
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
    import mixzoo.methods.mixednuts.fitting
    import mixzoo.zoo.models
    from mixzoo.core.registry import ModelSpec
    from mixzoo.zoo.models import BaseClassifier

    real = mixzoo.zoo.models.load_model
    spec = ModelSpec(name="digits-pgd", role="robust", dataset="digits", num_classes=5, input_size=(1, 8, 8),
                     source={"kind": "test"}, threat_model="Linf", epsilon=TABLE_EPS)
    five = BaseClassifier(nn.Sequential(nn.Flatten(), nn.Linear(64, 5)).eval(), spec)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mixzoo.zoo.models, "load_model",
                   lambda name, **kw: five if name == "digits-pgd" else real(name, **kw))
        mp.setattr(mixzoo.methods.mixednuts.calibration_data, "cached_mmaa",
                   lambda *a, **kw: pytest.fail("MMAA ran on a wrong surrogate"))
        with pytest.raises(InputError, match="has 5 classes but black-box model 'digits-std' has 10"):
            transfer_params_by_name(path, "digits-std", n_calib=12, cache_dir=tmp_path / "c", progress=False)
    # an explicit dataset wins over the card's, and its images must fit the black box
    with pytest.raises(InputError, match=r"gives images of shape \(1, 28, 28\)"):
        transfer_params_by_name(path, "digits-std", dataset="fashion-mnist", n_calib=12, cache_dir=tmp_path / "c",
                                progress=False)


def test_the_plugin_registers_min_margin_square():
    from mixzoo.attacks.suites import MinMarginSquareAttack
    from mixzoo.core.plugins import lookup

    assert lookup("attack", "min-margin-square") is MinMarginSquareAttack


def _by_name_setup(tmp_path, monkeypatch, attack: dict, **black_spec) -> tuple:
    """A surrogate card for ``digits-pgd`` with ``attack`` as its record, a black box (``digits-std``'s network with
    ``black_spec`` in its spec) served by ``load_black_box``, and a spy on the pipeline's cached MMAA: (card path,
    list of the MMAA calls' keyword arguments)."""
    from dataclasses import replace

    import mixzoo.zoo.blackbox
    from mixzoo.zoo.blackbox import as_black_box
    from mixzoo.zoo.models import BaseClassifier, load_model

    path = tmp_path / "sur.toml"
    _card(rbc={"name": "digits-pgd", "weight_hash": "feed"},
          attack={"n_iter": 2, "n_target_classes": 2, "n_restarts": 1, "seed": 3, "batch_size": 10,
                  **attack}).save(path)
    std = load_model("digits-std")
    black = BaseClassifier(std.network, replace(std.spec, **black_spec))
    monkeypatch.setattr(mixzoo.zoo.blackbox, "load_black_box",
                        lambda name, query_budget=None, **kw: as_black_box(black))
    calls, real = [], mixzoo.methods.mixednuts.calibration_data.cached_mmaa

    def spy(model, data, mmaa, **kw):
        calls.append({**dataclasses.asdict(mmaa), **kw})
        return real(model, data, mmaa, **kw)

    monkeypatch.setattr(mixzoo.methods.mixednuts.calibration_data, "cached_mmaa", spy)
    return path, calls


def test_by_name_without_a_recorded_eps_attacks_the_surrogate_at_the_black_boxs_radius(tmp_path, monkeypatch):
    """A card with no eps in its attack record: the surrogate's MMAA runs at the radius transfer_params then checks
    the points against, the black box's (its threat model is the one being calibrated), not at the surrogate's
    own spec epsilon (digits-pgd: 0.2), which failed with "beyond eps"."""
    from mixzoo.zoo.models import load_model

    path, calls = _by_name_setup(tmp_path, monkeypatch, {"norm": "Linf"}, threat_model="Linf", epsilon=TABLE_EPS)
    out = transfer_params_by_name(path, "digits-std", n_calib=30, cache_dir=tmp_path / "c", progress=False)
    assert load_model("digits-pgd").spec.epsilon != TABLE_EPS
    assert [(kw["eps"], kw["norm"]) for kw in calls] == [(TABLE_EPS, "Linf")]
    assert out.attack["eps"] == TABLE_EPS


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


def test_settings_objects_and_keywords_give_the_same_card(setup):
    """transfer_params takes a TransferSettings; keywords named after its fields change a copy (same card, number
    for number); a keyword that is no field is refused as Python refuses it."""
    from mixzoo.methods.mixednuts.transfer import TransferSettings

    settings = TransferSettings(method="square", queries=30, progress=False, n_iter=MMAA_KW["n_iter"])
    by_settings = transfer_params(setup["card"], BlackBoxModel(setup["b"]), setup["x"], setup["y"], settings)
    by_keywords = transfer_params(setup["card"], BlackBoxModel(setup["b"]), setup["x"], setup["y"], method="square",
                                  queries=30, progress=False, n_iter=MMAA_KW["n_iter"])
    changed = transfer_params(setup["card"], BlackBoxModel(setup["b"]), setup["x"], setup["y"],
                              settings.changed(method="transfer"), queries=30, surrogate=setup["a"])
    assert by_settings.params == by_keywords.params and by_settings.attack == by_keywords.attack
    assert by_settings.data == by_keywords.data and by_settings.params["fit"] == "square"
    assert changed.params["fit"] == "transfer"
    with pytest.raises(TypeError, match="unexpected keyword argument 'querys'"):
        transfer_params(setup["card"], BlackBoxModel(setup["b"]), setup["x"], setup["y"], querys=30)
    from mixzoo.methods.mixednuts.transfer import BlackBoxSource, transfer_params_by_name

    with pytest.raises(InputError, match="--n-calib must be positive"):
        transfer_params_by_name(None, "digits-pgd", TransferSettings(method="guess"), BlackBoxSource(n_calib=0))
    with pytest.raises(InputError, match="--n-calib must be positive"):
        transfer_params_by_name(None, "digits-pgd", method="guess", n_calib=0)
