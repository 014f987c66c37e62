"""Issue 29: with per-example seeds (the default), the bench's outcome per example does not depend on the batch size
(every random draw comes from each example's index, mixzoo.core.rng), extra attacks on subsets included."""

from __future__ import annotations

import json

import pytest
import torch

from mixzoo.attacks.suites import APGDEnsemble
from mixzoo.core.errors import InputError
from mixzoo.core.plugins import hookimpl, register_plugin, unregister_plugin
from mixzoo.evaluation.bench import MatchSettings, bench

BENCH = dict(attack="adaptive-apgd", n=60, attack_options={"n_iter": 6, "n_target_classes": 2, "n_restarts": 2},
             curve=None, plots=False, baseline=None, progress=False)


@pytest.fixture()
def card(digits_card):
    return digits_card


def points(pts: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    order = pts["index"].argsort()
    return pts["index"][order], pts["images"][order]


def outcomes(report) -> dict[str, str]:
    return {r.kind: r.robust_outcomes for r in report.models}


def assert_same_runs(one, other) -> None:
    """The same outcome per example, and the same adversarial point for every broken example."""
    assert outcomes(one) == outcomes(other)
    for kind, pts in one.adversarial.items():
        a, b = points(pts), points(other.adversarial[kind])
        assert torch.equal(a[0], b[0])
        torch.testing.assert_close(a[1], b[1], rtol=0, atol=1e-4)


@pytest.mark.slow
def test_per_example_seeds_make_the_bench_independent_of_the_batch_size(card, tmp_path, one_thread):
    runs = {bs: bench(card, batch_size=bs, per_example_seeds=True, out=tmp_path / f"b{bs}", save_adversarial=True,
                      cache_dir=tmp_path / "cache", **BENCH) for bs in (60, 17)}
    # not only the outcomes: every broken example's adversarial point is the same (APGD's trajectories are)
    assert_same_runs(runs[60], runs[17])
    assert set(outcomes(runs[60])) == {"abc", "rbc", "mixednuts"}
    # the attack broke something on every row and the card's extra attack ran: the comparison has content
    assert all("0" in o for o in outcomes(runs[60]).values())
    mixed = next(r for r in runs[17].models if r.kind == "mixednuts")
    assert any(c["name"] == "apgd-bypass" for c in mixed.components)
    settings = json.loads((tmp_path / "b17" / "report.json").read_text())["settings"]
    assert settings["per_example_seeds"] is True
    assert "per-example randomness" in (tmp_path / "b17" / "report.md").read_text()
    # per-batch seeds are a different cache entry: nothing computed one way is reused the other way
    plain = bench(card, batch_size=60, out=None, cache_dir=tmp_path / "cache", per_example_seeds=False, **BENCH)
    assert not any(r.cached for r in plain.models)


class LegacyAttackPlugin:
    """A third-party attack whose run() takes no index."""

    @hookimpl
    def mixzoo_attacks(self):
        class Legacy(APGDEnsemble):
            name = "test-legacy-run"

            def run(self, model, images, labels, progress=True):
                return super().run(model, images, labels, progress)

        return {"test-legacy-run": Legacy}


@pytest.mark.slow
def test_an_attack_without_per_example_support_runs_with_batch_seeds_and_says_so(card, tmp_path, one_thread):
    """A third-party attack whose run() takes no index still runs by default: batch k at seed + k,
    the same outcome as an explicit batch-seeded run, with a warning that results depend on the batch."""
    register_plugin(LegacyAttackPlugin(), name="test-legacy-run-plugin")
    try:
        kw = dict(BENCH, attack="test-legacy-run", n=10)
        default = bench(card, **kw, batch_size=5, cache_dir=tmp_path / "c1")
        explicit = bench(card, **kw, batch_size=5, per_example_seeds=False, cache_dir=tmp_path / "c2")
        assert outcomes(default) == outcomes(explicit)
        rbc = default.row("rbc")
        assert rbc.n == 10
        assert any("cannot draw its randomness per example" in w for w in rbc.warnings)
        assert not any("cannot draw" in w for w in explicit.row("rbc").warnings)
    finally:
        unregister_plugin("test-legacy-run-plugin")


@pytest.mark.slow
def test_per_example_seeds_reach_the_matched_baseline(card, tmp_path, one_thread):
    """The matched linear row's alpha search runs with per-example seeds too (its cached evaluations are keyed so)."""
    report = bench(card, **{**BENCH, "n": 20,
                            "baseline": MatchSettings(n=20, options={"n_iter": 3, "n_target_classes": 1})},
                   batch_size=20, per_example_seeds=True, cache_dir=tmp_path / "cache")
    assert {r.kind for r in report.models} == {"abc", "rbc", "mixednuts", "linear"}
    assert report.settings["linear_alpha_search"]


def test_adaptive_with_square_and_fab_is_independent_of_the_batch_size(card, tmp_path, one_thread):
    """The default evaluation's every component draws per example: transfer and exact APGD, FAB-T (one restart,
    no random draw) on the exact gradient, and Square (windows per example). Two batch sizes, the same outcome and the
    same adversarial point for every example."""
    kw = dict(BENCH, attack="adaptive", n=24, attack_options={"n_iter": 3, "n_target_classes": 1, "n_queries": 30},
              extra_attacks=False)
    runs = {bs: bench(card, batch_size=bs, out=tmp_path / f"b{bs}", save_adversarial=True,
                      cache_dir=tmp_path / "cache", **kw) for bs in (24, 7)}
    assert_same_runs(runs[24], runs[7])
    mixed = runs[7].row("mixednuts")
    assert [c["name"] for c in mixed.components] == ["apgd-ce", "apgd-t", "apgd-ce-exact", "fab-t-exact", "square"]
    assert not any("per batch" in w for r in runs[7].models for w in r.warnings)


def test_mmaa_with_indices_is_independent_of_the_batch_size(one_thread):
    """MMAA for calibration (mix) draws its random starts per image index: margins identical for two batch sizes
    and for a shuffled order; without indices (AutoAttack's generators per batch) they differ."""
    from digits_models import train_digits_mlp

    from mixzoo.attacks import mmaa
    from mixzoo.attacks.apgd import ApgdSettings

    model, x, y = train_digits_mlp(steps=150)
    x, y = x[:36], y[:36]
    cfg = ApgdSettings(eps=0.1, n_iter=5, n_target_classes=2, n_restarts=1, seed=4)
    kw = dict(progress=False, attack_all=False)
    index = torch.arange(36)
    whole = mmaa(model, x, y, cfg, batch_size=36, index=index, **kw)
    split = mmaa(model, x, y, cfg, batch_size=8, index=index, **kw)
    torch.testing.assert_close(split.margins, whole.margins, rtol=0, atol=1e-6)
    torch.testing.assert_close(split.adv_images, whole.adv_images, rtol=0, atol=1e-6)
    perm = torch.randperm(36, generator=torch.Generator().manual_seed(1))
    shuffled = mmaa(model, x[perm], y[perm], cfg, batch_size=10, index=index[perm], **kw)
    torch.testing.assert_close(shuffled.margins, whole.margins[perm], rtol=0, atol=1e-6)
    assert whole.settings["randomness"] == "per-example"
    batchwise = [mmaa(model, x, y, cfg, batch_size=bs, **kw).margins for bs in (36, 8)]
    assert not torch.equal(batchwise[0], batchwise[1])
    with pytest.raises(InputError, match="one index per image"):
        mmaa(model, x, y, cfg, batch_size=8, index=index[:5], **kw)


def test_an_attacks_code_version_keys_its_cached_outcomes(card, tmp_path, monkeypatch, one_thread):
    """An attack whose outcomes changed sets ``code_version``: outcomes cached by the older code are attacked again,
    and the new ones are reused."""
    from mixzoo.core.plugins import lookup

    kw = dict(BENCH, attack="apgd", n=6, attack_options={"n_iter": 2, "n_target_classes": 1}, extra_attacks=False,
              cache_dir=tmp_path / "cache")
    bench(card, **kw)
    assert all(r.cached for r in bench(card, **kw).models)
    monkeypatch.setattr(lookup("attack", "apgd"), "code_version", "test-2")
    assert not any(r.cached for r in bench(card, **kw).models)
    assert all(r.cached for r in bench(card, **kw).models)
