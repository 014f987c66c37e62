"""The bench's job (mixzoo/evaluation/job.py): one value built once, whose work list the plan and the run both
execute; the budget applied once (the curve's size follows it), the matched baseline under the rows' attack when
the command names its own."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from mixzoo.core.budget import BUDGETS, component_options
from mixzoo.core.card import MixCard
from mixzoo.core.settings import RunSettings
from mixzoo.evaluation.job import BENCH_MATCH_ATTACK, BenchJob, MatchSettings, budgeted


def test_the_matched_baseline_follows_a_custom_attack_and_the_budget_otherwise():
    s, match, _ = budgeted(RunSettings(attack="adaptive", budget="quick"), True, None, default_attack="adaptive")
    assert match.attack == BENCH_MATCH_ATTACK
    assert match.options == component_options("quick", BENCH_MATCH_ATTACK, BUDGETS["quick"].match_options)
    assert match.n == BUDGETS["quick"].match_n
    s, match, _ = budgeted(RunSettings(attack="apgd", attack_options={"n_iter": 3}, budget="quick"), True, None,
                           default_attack="adaptive")
    assert (match.attack, match.options) == ("apgd", s.attack_options) and s.attack_options["n_iter"] == 3
    # the matching attack itself as the shared one (README's quick start): the budget's cheaper matching counts
    s, match, _ = budgeted(RunSettings(attack=BENCH_MATCH_ATTACK), True, None, default_attack="adaptive")
    assert (match.attack, match.options) == (BENCH_MATCH_ATTACK, dict(BUDGETS["standard"].match_options))
    assert match.options != s.attack_options
    given = MatchSettings(attack="fast", options={"n_iter": 2}, n=7)  # one the caller chose is kept
    assert budgeted(RunSettings(attack="apgd"), given, None, default_attack="adaptive")[1] == given


@pytest.mark.parametrize("budget", ["quick", "standard"])
def test_the_curve_size_follows_the_budget(digits_card, budget):
    from mixzoo.core.budget import curve_points
    from mixzoo.methods.mixednuts.figures import DEFAULT_BETAS, DEFAULT_LINEAR_ALPHAS

    card = MixCard.load(digits_card)
    job = BenchJob.of(RunSettings(budget=budget), True, True, [card])
    step = job.steps()[-2]
    assert step.kind == "curve" and step.points == card.mixing_method.curve_size(card, BUDGETS[budget].curve_points)
    betas = {*curve_points(DEFAULT_BETAS, BUDGETS[budget].curve_points), card.params["beta"]}
    assert step.points == len(betas) + len(curve_points(DEFAULT_LINEAR_ALPHAS, BUDGETS[budget].curve_points)) + 1
    if budget == "quick":
        assert step.points < len(DEFAULT_BETAS) + len(DEFAULT_LINEAR_ALPHAS)


def test_the_work_list_has_the_baseline_only_for_one_card_of_another_method(digits_card):
    card = MixCard.load(digits_card)
    kinds = [s.kind for s in BenchJob.of(RunSettings(), True, None, [card]).steps()]
    assert kinds == ["abc", "rbc", "card", "baseline", "report"]
    kinds = [s.kind for s in BenchJob.of(RunSettings(), True, True, [card, card]).steps()]
    assert kinds == ["abc", "rbc", "card", "card", "curve", "report"]
    assert [s.kind for s in BenchJob.of(RunSettings(), None, None, [card]).steps()] == \
        ["abc", "rbc", "card", "report"]


def test_the_plan_has_one_phase_per_step_of_the_runs_work_list(digits_card, tmp_path, monkeypatch):
    import mixzoo.evaluation.plan as plan_module
    from mixzoo.evaluation.plan import plan_bench

    monkeypatch.setattr(plan_module.Probes, "cost", lambda self, *a, **k: plan_module.Cost(0.01))  # no timing
    card = MixCard.load(digits_card)
    plan = plan_bench(card, n=8, budget="quick", cache_dir=tmp_path)
    steps = BenchJob.of(RunSettings(n=8, budget="quick"), True, True, [card]).steps()
    assert len(plan.phases) == len(steps)
    assert f"{steps[-2].points} classifiers" in plan.phases[-2].what


def test_a_row_names_its_cards_stem_once():
    from mixzoo.evaluation.bench import row_name

    def card(title: str, stem: str) -> types.SimpleNamespace:
        return types.SimpleNamespace(mixing_method=types.SimpleNamespace(title=title, name="m"),
                                     path=Path(f"{stem}.toml"))

    assert row_name(card("Max-confidence selector (trial)", "trial"), "m", 2) == "Max-confidence selector (trial)"
    assert row_name(card("Max-confidence selector", "trial"), "m", 2) == "Max-confidence selector (trial)"
    assert row_name(card("Max-confidence selector", "trial"), "m", 1) == "Max-confidence selector"
