"""Issue 29, first step: with per-example seeds, the bench's outcome per example does not depend on the batch size
(APGD's random starts come from each example's index, mixzoo.core.rng), extra attacks on subsets included."""

from __future__ import annotations

import json

import pytest
import torch

from mixzoo.attacks.evaluation import APGDEnsemble
from mixzoo.core.errors import InputError
from mixzoo.core.plugins import hookimpl, register_plugin, unregister_plugin
from mixzoo.evaluation.bench import bench

BENCH = dict(attack="adaptive-apgd", n=60, attack_options={"n_iter": 6, "n_target_classes": 2, "n_restarts": 2},
             curve=False, plots=False, baseline=False, progress=False)


@pytest.fixture()
def card(digits_card):
    return digits_card


def points(pts: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    order = pts["index"].argsort()
    return pts["index"][order], pts["images"][order]


def outcomes(report) -> dict[str, str]:
    return {r.kind: r.robust_outcomes for r in report.models}


def test_per_example_seeds_make_the_bench_independent_of_the_batch_size(card, tmp_path, one_thread):
    runs = {bs: bench(card, batch_size=bs, per_example_seeds=True, out=tmp_path / f"b{bs}", save_adversarial=True,
                      cache_dir=tmp_path / "cache", **BENCH) for bs in (60, 17)}
    assert outcomes(runs[60]) == outcomes(runs[17])
    # not only the outcomes: every broken example's adversarial point is the same (APGD's trajectories are)
    for kind, pts in runs[60].adversarial.items():
        a, b = points(pts), points(runs[17].adversarial[kind])
        assert torch.equal(a[0], b[0])
        torch.testing.assert_close(a[1], b[1], rtol=0, atol=1e-4)
    assert set(outcomes(runs[60])) == {"abc", "rbc", "mixednuts"}
    # the attack broke something on every row and the card's extra attack ran: the comparison has content
    assert all("0" in o for o in outcomes(runs[60]).values())
    mixed = next(r for r in runs[17].models if r.kind == "mixednuts")
    assert any(c["name"] == "apgd-bypass" for c in mixed.components)
    settings = json.loads((tmp_path / "b17" / "report.json").read_text())["settings"]
    assert settings["per_example_seeds"] is True
    assert "per-example random starts" in (tmp_path / "b17" / "report.md").read_text()
    # per-batch seeds (the default) are a different cache entry: nothing computed one way is reused the other way
    plain = bench(card, batch_size=60, out=None, cache_dir=tmp_path / "cache", **BENCH)
    assert not any(r.cached for r in plain.models)


class LegacyAttackPlugin:
    """A third-party attack written before issue 29: its run() takes no index."""

    @hookimpl
    def mixzoo_attacks(self):
        class Legacy(APGDEnsemble):
            name = "test-legacy-run"

            def run(self, model, images, labels, progress=True):
                return super().run(model, images, labels, progress)

        return {"test-legacy-run": Legacy}


def test_an_attack_without_per_example_support_is_refused_in_one_line(card, tmp_path, one_thread):
    register_plugin(LegacyAttackPlugin(), name="test-legacy-run-plugin")
    try:
        with pytest.raises(InputError, match="cannot draw its randomness per example"):
            bench(card, **{**BENCH, "attack": "test-legacy-run", "n": 10}, batch_size=10, per_example_seeds=True,
                  cache_dir=tmp_path / "cache")
        plain = bench(card, **{**BENCH, "attack": "test-legacy-run", "n": 10}, batch_size=10,
                      cache_dir=tmp_path / "cache")  # without per-example seeds it runs as before
        assert plain.row("rbc").n == 10
    finally:
        unregister_plugin("test-legacy-run-plugin")


def test_per_example_seeds_reach_the_matched_baseline(card, tmp_path, one_thread):
    """The matched linear row's alpha search runs with per-example seeds too (its cached evaluations are keyed so)."""
    report = bench(card, **{**BENCH, "n": 20, "baseline": True, "match_n": 20,
                            "match_options": {"n_iter": 3, "n_target_classes": 1}},
                   batch_size=20, per_example_seeds=True, cache_dir=tmp_path / "cache")
    assert {r.kind for r in report.models} == {"abc", "rbc", "mixednuts", "linear"}
    assert report.settings["linear_alpha_search"]
