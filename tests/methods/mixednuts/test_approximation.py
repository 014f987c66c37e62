"""App. D.9 approximation-quality check on the digits zoo: MMAA on the transformed RBC, Algorithm 1 at (s*, p*, c*)."""

from __future__ import annotations

import dataclasses
import json
import types
from types import SimpleNamespace

import pytest
import torch
from card_fields import nuts_card
from mixednuts_reference import alpha as _alpha
from mixednuts_reference import conf as _conf
from mixednuts_reference import ln as _ln
from mixednuts_reference import signed as _signed
from mixednuts_reference import transform as _m
from torch import nn
from torch.nn import functional as F  # noqa: N812
from typer.testing import CliRunner

from mixzoo.attacks import signed_margin
from mixzoo.core.card import MixCard
from mixzoo.core.errors import InputError
from mixzoo.methods.mixednuts.approximation import (
    ApproximationCheck,
    check_approximation,
    transformed_rbc,
    worst_points,
)
from mixzoo.methods.mixednuts.calibrate import Grid, calibrate
from mixzoo.methods.mixednuts.fitting import mix
from mixzoo.methods.mixednuts.transforms import confidence_margin, rbc_transform
from mixzoo.zoo.data import load_dataset

FAST = dict(n_calib=150, n_iter=8, n_target_classes=2, batch_size=75, progress=False)


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    root = tmp_path_factory.mktemp("d9")
    res = mix("digits-std", "digits-pgd", out=root / "card.toml", cache_dir=root / "cache", **FAST)
    return res, root


def test_check_reproduces_the_card_and_attacks_the_transformed_rbc(calibrated):
    res, root = calibrated
    first = check_approximation(root / "card.toml", cache_dir=root / "cache", progress=False)
    # the h^LN side is the card's own computation, read from mix's cache; h^M is attacked afresh
    assert first.cache_hits == {"mmaa_ln": True, "mmaa_m": False}
    assert first.objective_surrogate == pytest.approx(res.card.params["objective"], abs=1e-12)
    assert (
        first.alpha_surrogate == pytest.approx(res.card.params["alpha"], abs=1e-12)
        and first.alpha_card == res.card.params["alpha"]
    )
    assert not any("re-run `mixzoo mix`" in note for note in first.notes)
    assert any("keeps" in note for note in first.notes) == (first.beta_kept_worst < first.beta)
    assert first.n == 150 and first.beta == 0.985
    for name in ("objective_check", "objective_worst", "alpha_check", "alpha_worst", "beta_kept_check",
                 "beta_kept_worst"):
        assert 0.0 <= getattr(first, name) <= 1.0
    # on its own points the card's alpha keeps at least beta of the attacked-correct margins (Eq. 7 is active)
    assert first.beta <= first.beta_kept_surrogate < first.beta + 0.02
    # a larger alpha (less weight on the ABC) is exactly what keeping beta of h^M's own margins would need
    assert (first.alpha_check > first.alpha_surrogate) == (first.beta_kept_check < first.beta)
    # a point that flips h^M for either attack flips it in the per-image worst
    assert first.robust_accuracy_worst <= min(first.robust_accuracy_m, first.robust_accuracy_ln) + 0.01
    assert first.robust_accuracy_worst <= first.robust_accuracy_m
    again = check_approximation(root / "card.toml", cache_dir=root / "cache", progress=False)
    assert again.cache_hits == {"mmaa_ln": True, "mmaa_m": True}
    assert {k: v for k, v in again.to_dict().items() if k not in ("seconds", "cache_hits")} == \
        {k: v for k, v in first.to_dict().items() if k not in ("seconds", "cache_hits")}


def test_transformed_mmaa_returns_raw_logits_whose_transform_gives_its_margins(calibrated):
    from mixzoo.core.cache import Cache
    from mixzoo.methods.mixednuts.calibration_data import MMAASettings, cached_mmaa
    from mixzoo.zoo.data import load_dataset
    from mixzoo.zoo.models import load_model

    res, root = calibrated
    card, rbc = res.card, load_model("digits-pgd")
    data = load_dataset("digits", "calibration", n=150)
    mmaa = MMAASettings(eps=0.2, norm="Linf", n_iter=8, n_target_classes=2, batch_size=75)
    settings = dict(progress=False, cache=Cache(root / "cache"))
    direct = cached_mmaa(rbc, data, mmaa, transform=card, **settings)
    surrogate = cached_mmaa(rbc, data, mmaa, **settings)
    m = rbc_transform(
        direct["logits"], card.params["s"], card.params["p"], card.params["c"], clamp=card.params["clamp"]
    )
    correct = m.argmax(1) == data.labels
    torch.testing.assert_close(signed_margin(m, data.labels)[correct], direct["margins"][correct], atol=1e-5, rtol=0)
    assert not torch.equal(direct["logits"], surrogate["logits"])  # separate cache entries, separate attacks
    # h^M as a model is the mixed classifier at alpha = 1: log-softmax of M(s*, p*, c*) of the RBC's logits
    x = data.images[:20]
    torch.testing.assert_close(
        transformed_rbc(rbc, card)(x).softmax(1),
        rbc_transform(rbc(x), card.params["s"], card.params["p"], card.params["c"], clamp=card.params["clamp"]).softmax(
            1
        ),
    )


def test_a_stale_alpha_is_noted(calibrated):
    res, root = calibrated
    card = MixCard.load(root / "card.toml")
    card.params["alpha"] -= 1e-6
    check = check_approximation(card, cache_dir=root / "cache", progress=False)
    assert check.alpha_card == card.params["alpha"] and check.alpha_surrogate == pytest.approx(
        res.card.params["alpha"], abs=1e-12
    )
    assert any("re-run `mixzoo mix`" in note for note in check.notes)


def test_check_refuses_cards_it_cannot_check(calibrated, tmp_path):
    res, root = calibrated
    card = MixCard.load(root / "card.toml")
    card.method = "guess"
    with pytest.raises(InputError, match="made by `mixzoo mix`"):
        check_approximation(card, cache_dir=root / "cache", progress=False)
    card = MixCard.load(root / "card.toml")
    card.data = {**card.data, "fingerprint": "0000000000000000"}
    with pytest.raises(InputError, match="not the ones the card was calibrated on"):
        check_approximation(card, cache_dir=root / "cache", progress=False)


def test_cli_check_prints_and_writes_json(calibrated, tmp_path):
    from mixzoo.cli import app

    _, root = calibrated
    out = tmp_path / "sub" / "check.json"
    out.parent.mkdir()
    result = CliRunner().invoke(app, ["check", str(root / "card.toml"), "--cache-dir", str(root / "cache"),
                                      "--json", "--out", str(out)])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert json.loads(out.read_text()) == printed
    assert set(printed) >= {"objective_surrogate", "objective_check", "objective_worst", "alpha_check"}
    missing = CliRunner().invoke(app, ["check", str(tmp_path / "nope.toml")])
    assert missing.exit_code == 2 and "does not exist" in missing.output


def test_refit_alpha_keeps_beta_on_the_transformed_rbcs_own_points(calibrated, tmp_path):
    res, root = calibrated
    refit = mix("digits-std", "digits-pgd", refit_alpha=True, out=tmp_path / "refit.toml", cache_dir=root / "cache",
                **FAST)
    first, second = res.card, MixCard.load(tmp_path / "refit.toml")
    assert (second.params["s"], second.params["p"], second.params["c"]) == (
        first.params["s"],
        first.params["p"],
        first.params["c"],
    )  # only alpha is chosen again
    record = second.data["alpha_refit"]
    assert record["alpha_first_pass"] == first.params["alpha"]
    assert second.params["alpha"] == max(
        first.params["alpha"], record["alpha_second_pass"]
    )  # beta holds on both sets of points
    assert (
        any("--refit-alpha" in note for note in second.notes) and refit.card.params["alpha"] == second.params["alpha"]
    )
    check = check_approximation(tmp_path / "refit.toml", cache_dir=root / "cache", progress=False)
    assert check.refit and check.alpha_worst == pytest.approx(record["alpha_second_pass"], abs=1e-12)
    assert check.beta_kept_surrogate >= check.beta and check.beta_kept_worst >= check.beta and check.notes == []
    assert check.cache_hits == {"mmaa_ln": True, "mmaa_m": True}  # the second pass cached its attack


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
    from mixzoo.methods.mixednuts.calibration_data import MMAASettings, mmaa_of_card

    record = dict(eps=0.03, norm="Linf", n_iter=100, n_target_classes=9, n_restarts=1, seed=0)
    card = types.SimpleNamespace(attack=record, params={"top_k": 5})
    assert mmaa_of_card(card) == MMAASettings(**record, top_k=5, batch_size=250)
    card.attack = {**record, "top_k": 7, "batch_size": 64}
    assert mmaa_of_card(card) == MMAASettings(**record, top_k=7, batch_size=64)


def test_worst_points_take_the_smallest_margin_of_the_transformed_rbc():
    """Per image, the point where h^M = M(s, p, c)(RBC) has the smaller signed margin, a flip beating any margin.
    With the linear clamp, s = p = 1, c = 0, h^M is the layer-normed RBC; its margins are computed here by hand."""
    card = SimpleNamespace(params={"s": 1.0, "p": 1.0, "c": 0.0, "clamp": "linear", "top_k": None})
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
    import mixzoo.methods.mixednuts.approximation as approximation
    from mixzoo.core.card import MixCard

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
    card = MixCard(
        "mixednuts",
        {
            "s": 3.0,
            "p": 2.0,
            "c": -0.4,
            "alpha": first.params["alpha"],
            "beta": beta,
            "objective": first.params["objective"],
            "fit": "mmaa",
        },
        data={"n": n, "fingerprint": "f00d"},
        attack=dict(eps=0.1, norm="Linf", n_iter=5, n_target_classes=3, n_restarts=1, seed=0),
    )

    def fake_mmaa(rbc, data, mmaa, transform=None, **kw):
        return {"logits": direct if transform is not None else surrogate}

    fixed_logits(labels, clean, fake_mmaa)
    check = approximation.check_approximation(card, cache_dir=tmp_path, progress=False)

    def h_m(raw):
        return rbc_transform(
            raw.double(), card.params["s"], card.params["p"], card.params["c"], clamp=card.params["clamp"]
        )

    threshold = 1 / card.params["alpha"] - 1

    def kept(raw):
        right = raw.argmax(1) == labels
        return float((confidence_margin(h_m(raw[right])) >= threshold * (1 - 1e-9)).double().mean())

    def flipped(raw):
        return h_m(raw).argmax(1) != labels

    assert check.alpha_surrogate == pytest.approx(card.params["alpha"], rel=1e-12)
    assert check.beta_kept_surrogate == pytest.approx(kept(surrogate)) and check.beta_kept_surrogate >= beta
    assert check.beta_kept_check == pytest.approx(kept(direct))
    worst_flipped = flipped(surrogate) | flipped(direct)
    assert (worst_flipped & ~flipped(direct)).any()  # the worst points differ from the direct attack's
    assert check.robust_accuracy_worst == pytest.approx(1 - float(worst_flipped.double().mean()))
    assert check.robust_accuracy_ln == pytest.approx(float((surrogate.argmax(1) == labels).double().mean()))


EPS = 0.1
K = 6


# ------------------------------------------------------------------------------------ references, by hand

def _card(**kw) -> MixCard:
    base = dict(s=2.0, p=2.0, c=-0.5, alpha=0.8, beta=0.9, clamp="gelu", top_k=None, temperature=0.5, objective=0.25,
                method="mmaa", dataset="digits", rbc={"name": "surrogate", "weight_hash": "feed"},
                abc={"name": "digits-std"}, attack={"eps": EPS, "norm": "Linf"})
    return nuts_card(**{**base, **kw})


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


# ------------------------------------------------------------------------------------ approximation (App. D.9)
def test_transformed_rbc_uses_the_cards_clamp_and_top_k():
    from mixzoo.methods.mixednuts.approximation import transformed_rbc

    net = Linear6().eval()
    card = _card(clamp="softplus", top_k=3)
    x = load_dataset("digits", "calibration", n=8).images
    with torch.no_grad():
        got = transformed_rbc(net, card)(x).softmax(1).double()
        want = _m(net(x), 2.0, 2.0, -0.5, "softplus", 3).softmax(1)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_worst_points_use_the_cards_top_k_and_need_logits():
    from mixzoo.methods.mixednuts.approximation import worst_points

    g = torch.Generator().manual_seed(1)
    y = torch.randint(0, K, (60,), generator=g)
    a, b = (torch.randn(60, K, generator=g) + 3 * F.one_hot(y, K) for _ in range(2))
    card = SimpleNamespace(params={"s": 1.0, "p": 1.0, "c": 0.0, "clamp": "softplus", "top_k": 3})

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
    import mixzoo.methods.mixednuts.approximation as approximation

    y, clean, sur, direct = _d9()
    s, p, c, beta, top_k = 3.0, 2.0, -1.0, 0.8, 4
    alpha = _alpha(sur, y, s, p, c, beta, top_k=top_k)
    card = _card(s=s, p=p, c=c, alpha=alpha, beta=beta, top_k=top_k, data={"n": len(y), "fingerprint": "f00d",
                 "alpha_refit": {}}, attack=dict(eps=0.1, norm="Linf", n_iter=5, n_target_classes=3, n_restarts=1,
                                                 seed=0))
    calls = []

    def fake_mmaa(rbc, data, mmaa, transform=None, **kw):
        calls.append({**dataclasses.asdict(mmaa), **kw})
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
    import mixzoo.methods.mixednuts.approximation as approximation
    from mixzoo.methods.mixednuts.transforms import confidence_margin, rbc_transform

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
    import mixzoo.methods.mixednuts.fitting
    from mixzoo.methods.mixednuts.approximation import refit_alpha

    y, clean, sur, direct = _d9(seed=6)
    s, p, c, beta, top_k = 3.0, 2.0, -1.0, 0.8, 4
    calls = []

    def fake_mmaa(rbc, data, mmaa, transform=None, **kw):
        calls.append({**dataclasses.asdict(mmaa), **kw})
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
        assert out.params["alpha"] == pytest.approx(max(first_alpha, second), rel=1e-9)
        assert out.params["objective"] == (rec["objective_second_pass"] if second > first_alpha else 0.5)
    assert rec["objective_second_pass"] != 0.5
