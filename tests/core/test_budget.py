"""``--budget quick|standard|strong`` and ``-O`` counts reach every component of bench and sanity: the shared
attack, the declared attacks, the matched baseline and the curve (mixzoo/core/budget.py)."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from mixzoo.cli import app
from mixzoo.core.budget import BUDGETS, component_options, curve_points, shared_options
from mixzoo.core.errors import InputError
from mixzoo.core.settings import RunSettings
from mixzoo.evaluation.bench import bench
from mixzoo.evaluation.job import CurveSettings, MatchSettings, budgeted
from mixzoo.evaluation.worst_case import declared_attacks


def test_standard_is_what_the_bench_ran_before_budgets():
    s, match, curve = budgeted(RunSettings(), True, True, default_attack="adaptive")
    assert (s.attack, s.attack_options) == ("adaptive", {})
    assert match == MatchSettings() == MatchSettings(options={"n_iter": 25, "n_target_classes": 3}, n=500)
    assert curve == CurveSettings() and (curve.attack, curve.options, curve.n, curve.points) == (
        "fast", {"n_iter": 25, "n_target_classes": 3}, 300, None)
    declared = {"n_iter": 20, "n_restarts": 3, "screen_n_iter": 20}
    assert component_options("standard", "adaptive-smoothing-gate", declared) == declared
    assert component_options("standard", "apgd", {}) == {}  # APGD's own defaults, as before


def test_quick_caps_every_count_the_attack_has_and_keeps_smaller_ones():
    # only the counts above a cap change (adaptive's one restart is within quick's)
    assert shared_options("quick", "adaptive", None) == {"n_iter": 10, "n_target_classes": 3, "n_queries": 200}
    assert shared_options("quick", "adaptive", {"n_iter": 40}) ["n_iter"] == 40  # the user's -O wins
    assert component_options("quick", "apgd", {}) == {"n_iter": 10, "n_target_classes": 3}
    gate = component_options("quick", "adaptive-smoothing-gate", {"n_iter": 40, "n_restarts": 3, "screen_n_iter": 5,
                                                     "screen_n_target_classes": 9})
    assert gate == {"n_iter": 10, "n_restarts": 1, "screen_n_iter": 5, "screen_n_target_classes": 3}
    assert component_options("quick", "adaptive", {"components": ["square"], "n_queries": 5000}) == {
        "components": ["square"], "n_queries": 200, "n_iter": 10, "n_target_classes": 3}


def test_a_count_given_with_O_sets_it_on_every_component_that_has_it():
    # n_iter=5 on APGD (declared with its defaults) and on the gate attack's screen; components stays the shared one's
    given = {"n_iter": 5, "components": ["apgd-ce"]}
    assert component_options("standard", "apgd", {}, given) == {"n_iter": 5}
    assert component_options("standard", "adaptive-smoothing-gate", {"n_iter": 40, "screen_n_iter": 20}, given) == {
        "n_iter": 5, "screen_n_iter": 5}
    assert component_options("standard", "min-margin-square", {}, given) == {}  # it has no n_iter


def test_curve_points_keep_both_ends():
    values = (0.9, 0.95, 0.97, 0.98, 0.985, 0.99, 0.995)
    assert curve_points(values, 3) == (0.9, 0.98, 0.995)
    assert curve_points(values, None) == values and curve_points(values, 20) == values


def test_an_unknown_budget_is_one_line_naming_them():
    with pytest.raises(InputError, match="unknown budget 'cheap'; choose quick | standard | strong"):
        RunSettings(budget="cheap")


def test_strong_names_adaptive_strong_only_where_no_attack_was_named():
    s, _, _ = budgeted(RunSettings(attack=None, budget="strong"), True, True, default_attack="adaptive")
    assert s.attack == "adaptive-strong" and BUDGETS["strong"].attack == "adaptive-strong"
    s, _, _ = budgeted(RunSettings(attack="apgd", budget="strong"), True, True, default_attack="adaptive")
    assert s.attack == "apgd"


@pytest.mark.slow
def test_bench_at_quick_with_O_n_iter_reaches_the_declared_attack_the_baseline_and_the_curve(digits_card, tmp_path):
    report = bench(digits_card, n=8, batch_size=8, budget="quick", attack_options={"n_iter": 5},
                   cache_dir=tmp_path / "cache", progress=False, out=tmp_path / "out", plots=False)
    st = report.settings
    comps = st["components"]
    assert st["budget"] == "quick"
    assert comps["attack"] == {"attack": "adaptive", "options": {"n_iter": 5, "n_target_classes": 3,
                                                                 "n_queries": 200}}
    assert comps["MixedNUTS: apgd-bypass"] == {"attack": "apgd", "options": {"n_iter": 5, "n_target_classes": 3}}
    # adaptive-apgd accepts n_queries (adaptive's option), so the cap is recorded though it runs no Square
    assert comps["baseline"].pop("seconds") > 0 and comps["curve"].pop("seconds") > 0  # what each one cost
    assert comps["baseline"] == {"attack": "adaptive-apgd", "options": {"n_iter": 5, "n_target_classes": 3,
                                                                        "n_queries": 200}, "n": 8}
    assert comps["curve"]["options"]["n_iter"] == 5 and comps["curve"]["points"] == 3
    betas = {r["beta"] for r in report.curve["mixednuts"]} - {report.curve["card_beta"]}  # the card's is added
    assert len(betas) == 3 and len(report.curve["linear"]) == 3
    assert st["linear_alpha_match"]["options"]["n_iter"] == 5  # what the bisection ran with
    written = json.loads((tmp_path / "out" / "report.json").read_text())
    assert {k: {f: v for f, v in c.items() if f != "seconds"} for k, c in written["settings"]["components"].items()
            } == comps and written["settings"]["budget"] == "quick"
    assert (tmp_path / "out" / "report.md").read_text().startswith("# mixzoo bench report (quick budget)")
    # the declared attack ran with what the report says: its rows are read back from the cache under those options
    ce_card = report.cards[0]
    assert [opts for _, opts in declared_attacks(ce_card, "quick", {"n_iter": 5})] == [
        comps["MixedNUTS: apgd-bypass"]["options"]]


def test_the_terminal_table_and_the_report_title_name_the_budget():
    from rich.console import Console

    from mixzoo.evaluation.report import budget_text, print_report

    assert budget_text({"budget": "quick"}) == " (quick budget)" and budget_text({}) == ""

    class Row:
        name, kind, clean_accuracy, robust_accuracy, clean_ci, robust_ci = "m", "abc", 0.5, 0.25, [0, 1], [0, 1]
        components, warnings, device, cached, seconds, alpha = [], [], "cpu", False, 1.0, None

    class Rep:
        dataset = {"name": "digits", "n": 4}
        settings = {"attack": "adaptive", "norm": "Linf", "eps": 0.2, "device": "cpu", "budget": "quick"}
        models, notes = [Row()], []

        def comparisons(self):
            return []

    console = Console(record=True, width=200)
    print_report(Rep(), to=console)
    assert "(quick budget)" in console.export_text()


def _options(command: str) -> dict[str, typer.core.TyperOption]:
    group = typer.main.get_group(app)
    return {p.name: p for p in group.commands[command].params if isinstance(p, typer.core.TyperOption)}


def test_sanity_takes_benchs_evaluation_flags_declared_once():
    bench_opts, sanity_opts = _options("bench"), _options("sanity")
    shared = ["attack", "budget", "attack_option", "extra_attacks", "per_example_seeds", "batch_size", "n", "seed",
              "norm", "precision", "abc", "rbc", "device", "data_dir", "cache_dir", "no_cache", "allow_unsafe",
              "as_json", "out"]
    for name in shared:
        assert name in sanity_opts, name
        if name not in ("n", "out", "abc", "rbc"):  # sanity's own help for these
            assert sanity_opts[name].opts == bench_opts[name].opts, name
            assert sanity_opts[name].help == bench_opts[name].help, name
    assert "--no-extra-attacks" in sanity_opts["extra_attacks"].secondary_opts
    assert "--no-baseline" in sanity_opts["linear"].secondary_opts and "--no-baseline" in bench_opts[
        "baseline"].secondary_opts


@pytest.mark.slow
def test_sanity_at_quick_honours_the_budget_and_no_extra_attacks(digits_card, tmp_path):
    runner = CliRunner()
    args = ["sanity", str(digits_card), "--n", "6", "--batch-size", "6", "--cache-dir", str(tmp_path / "cache"),
            "--eps", "0.2", "--budget", "quick", "-O", "n_iter=4"]
    ok = runner.invoke(app, [*args, "--out", str(tmp_path / "a"), "--json"])
    assert ok.exit_code == 0, ok.output
    out = json.loads((tmp_path / "a" / "sanity.json").read_text())
    assert out["budget"] == "quick" and out["attack"] == "adaptive-apgd"
    assert out["components"]["attack"]["options"] == {"n_iter": 4, "n_target_classes": 3, "n_queries": 200}
    assert out["components"]["MixedNUTS: apgd-bypass"]["options"]["n_iter"] == 4
    assert out["components"]["baseline"]["options"]["n_iter"] == 4 and out["components"]["baseline"]["n"] == 6
    assert "(quick budget)" in (tmp_path / "a" / "sanity.md").read_text()
    none = runner.invoke(app, [*args, "--no-extra-attacks", "--no-baseline", "--out", str(tmp_path / "b"),
                               "--json"])
    assert none.exit_code == 0, none.output
    out = json.loads((tmp_path / "b" / "sanity.json").read_text())
    assert list(out["components"]) == ["attack"] and [m["kind"] for m in out["models"]] == ["abc", "rbc", "mixednuts"]
    assert json.loads(none.output)["budget"] == "quick"


def test_curve_settings_of_a_budget():
    assert CurveSettings.for_budget("quick").points == 3 and MatchSettings.for_budget("quick").n == 100
