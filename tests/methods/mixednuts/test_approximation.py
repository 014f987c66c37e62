"""App. D.9 approximation-quality check on the digits zoo: MMAA on the transformed RBC, Algorithm 1 at (s*, p*, c*)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from typer.testing import CliRunner

from mixzoo.approximation import ApproximationCheck, check_approximation, mmaa_settings, transformed_rbc, worst_points
from mixzoo.attacks import signed_margin
from mixzoo.calibrate import Grid, calibrate
from mixzoo.card import MixCard
from mixzoo.errors import InputError
from mixzoo.pipeline import mix
from mixzoo.transforms import confidence_margin, rbc_transform

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
    assert first.objective_surrogate == pytest.approx(res.card.objective, abs=1e-12)
    assert first.alpha_surrogate == pytest.approx(res.card.alpha, abs=1e-12) and first.alpha_card == res.card.alpha
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
    from mixzoo.cache import Cache
    from mixzoo.data import load_dataset
    from mixzoo.models import load_model
    from mixzoo.pipeline import cached_mmaa

    res, root = calibrated
    card, rbc = res.card, load_model("digits-pgd")
    data = load_dataset("digits", "calibration", n=150)
    settings = dict(eps=0.2, norm="Linf", n_iter=8, n_target_classes=2, batch_size=75, progress=False,
                    cache=Cache(root / "cache"))
    direct = cached_mmaa(rbc, data, transform=card, **settings)
    surrogate = cached_mmaa(rbc, data, **settings)
    m = rbc_transform(direct["logits"], card.s, card.p, card.c, clamp=card.clamp)
    correct = m.argmax(1) == data.labels
    torch.testing.assert_close(signed_margin(m, data.labels)[correct], direct["margins"][correct], atol=1e-5, rtol=0)
    assert not torch.equal(direct["logits"], surrogate["logits"])  # separate cache entries, separate attacks
    # h^M as a model is the mixed classifier at alpha = 1: log-softmax of M(s*, p*, c*) of the RBC's logits
    x = data.images[:20]
    torch.testing.assert_close(transformed_rbc(rbc, card)(x).softmax(1),
                               rbc_transform(rbc(x), card.s, card.p, card.c, clamp=card.clamp).softmax(1))


def test_a_stale_alpha_is_noted(calibrated):
    res, root = calibrated
    card = MixCard.load(root / "card.toml")
    card.alpha -= 1e-6
    check = check_approximation(card, cache_dir=root / "cache", progress=False)
    assert check.alpha_card == card.alpha and check.alpha_surrogate == pytest.approx(res.card.alpha, abs=1e-12)
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
    assert (second.s, second.p, second.c) == (first.s, first.p, first.c)  # only alpha is chosen again
    record = second.data["alpha_refit"]
    assert record["alpha_first_pass"] == first.alpha
    assert second.alpha == max(first.alpha, record["alpha_second_pass"])  # beta holds on both sets of points
    assert any("--refit-alpha" in note for note in second.notes) and refit.card.alpha == second.alpha
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
