"""Attack options come from one declaration, ``Attack.options_spec`` (:class:`mixzoo.core.options.OptionSpec`): the
defaults, the checks and ``--show-options`` all read it; an attack written as mixzoo 0.1's documentation said (a
``defaults`` table) keeps working, with a DeprecationWarning."""

from __future__ import annotations

import warnings

import pytest
from typer.testing import CliRunner

from mixzoo.attacks import Attack, Component
from mixzoo.cli import app
from mixzoo.core.errors import InputError
from mixzoo.core.options import OptionSpec
from mixzoo.core.plugins import get_plugin_manager, lookup

BUILT_IN = ("pgd", "apgd", "autoattack", "adaptive", "adaptive-strong", "adaptive-apgd", "min-margin-square", "fast",
            "adaptive-smoothing-apgd", "adaptive-smoothing-gate", "local-smoothing-policy-gate")


@pytest.mark.parametrize("name", BUILT_IN)
def test_every_built_in_attack_declares_each_option_with_help_and_type(name: str) -> None:
    cls = lookup("attack", name)
    assert "options_spec" in {k for c in cls.__mro__ for k in vars(c)}
    for key, spec in cls.options_spec.items():
        assert isinstance(spec, OptionSpec) and spec.help and spec.type is not None, (name, key)
    assert cls.defaults == {key: spec.default for key, spec in cls.options_spec.items()}
    assert cls.check_options({}) == cls.defaults


def test_the_defaults_each_attack_ran_with_before_the_specs_are_unchanged() -> None:
    """The option values an attack runs with when none is given (what its cached outcomes were made with)."""
    common = {"n_iter": 100, "n_target_classes": 9, "n_restarts": 1, "batch_size": 500, "components": None}
    assert lookup("attack", "pgd").defaults == {"n_iter": 20, "step_size": None, "batch_size": 500}
    assert lookup("attack", "apgd").defaults == common
    assert lookup("attack", "adaptive").defaults == {**common, "n_queries": 5000}
    assert lookup("attack", "adaptive-strong").defaults == {**common, "n_queries": 5000, "extra_seeds": 1}
    assert lookup("attack", "adaptive-apgd").defaults == {**common, "n_queries": 5000,
                                                          "components": ["apgd-ce", "apgd-t"]}
    assert lookup("attack", "fast").defaults == {"n_iter": 100, "n_target_classes": 3, "batch_size": 500,
                                                 "components": None}
    assert lookup("attack", "min-margin-square").defaults == {"n_queries": 5000, "p_init": 0.8, "batch_size": 500,
                                                              "layer_norm": False}
    assert lookup("attack", "adaptive-smoothing-apgd").defaults == {**common, "alpha_weight": 0.5}
    assert lookup("attack", "adaptive-smoothing-gate").defaults == {
        "n_iter": 100, "n_restarts": 1, "n_target_classes": 3, "mus": [0.0, 0.03, 0.1, 0.3], "refine_steps": 50,
        "refine_first_step": 0.1, "screen_n_iter": 100, "screen_n_target_classes": 9, "batch_size": 500,
        "components": None}


def test_given_options_are_converted_and_checked_against_the_spec() -> None:
    apgd = lookup("attack", "apgd")
    merged = apgd.check_options({"n_iter": "7", "components": "apgd-ce, apgd-t"})
    assert merged["n_iter"] == 7 and merged["components"] == ["apgd-ce", "apgd-t"]
    with pytest.raises(InputError, match=r"^option n_restarts \(-O n_restarts\) of attack 'apgd' must be at least 1"):
        apgd.check_options({"n_restarts": 0})
    with pytest.raises(InputError, match=r"option alpha_weight .* must be in \[0, 1\]"):
        lookup("attack", "adaptive-smoothing-apgd").check_options({"alpha_weight": 2})


def test_an_attack_declared_with_a_defaults_table_still_works_with_a_deprecation_warning() -> None:
    deprecated = ("^mixzoo.attacks.Attack.defaults is deprecated.*declares `defaults` / `option_types`; use"
                  " `options_spec")
    with pytest.warns(DeprecationWarning, match=deprecated):
        class OldStyle(Attack):
            name = "old-style"
            defaults = {"n_iter": 10, "rate": 0.5, "mus": [0.0, 0.1], "batch_size": 500, "temperature": None}
            option_types = {"temperature": float}

            def components(self, model, n_classes):
                return [Component("noop", lambda x, y: x)]

    assert OldStyle.defaults == {"n_iter": 10, "rate": 0.5, "mus": [0.0, 0.1], "batch_size": 500,
                                 "temperature": None}
    assert OldStyle(0.1, n_iter=3).options["n_iter"] == 3
    assert OldStyle.check_options({"mus": 0.2, "temperature": 2})["mus"] == [0.2]
    with pytest.raises(InputError, match="must be at least 1"):  # the base's batch_size spec, with its range
        OldStyle.check_options({"batch_size": 0})
    for bad in ({"n_iter": 2.5}, {"rate": "fast"}, {"temperature": "warm"}, {"mus": ["a"]}):
        with pytest.raises(InputError, match="of attack 'old-style'"):
            OldStyle.check_options(bad)
    with pytest.raises(InputError, match="did you mean n_iter"):
        OldStyle.check_options({"n_iters": 1})


def test_a_subclass_that_keeps_its_parents_specs_does_not_warn() -> None:
    apgd = lookup("attack", "apgd")
    with warnings.catch_warnings():
        warnings.simplefilter("error")

        class Renamed(apgd):
            name = "renamed-apgd"

    assert Renamed.options_spec is apgd.options_spec and Renamed.defaults == apgd.defaults


@pytest.mark.parametrize(("command", "attack", "default_row"), [
    (["bench", "--show-options", "--attack", "fast"], "fast", ["n_target_classes", "int", "3", "[0, 100000]"]),
    (["sanity", "--show-options"], "adaptive-apgd", ["components", "names", "apgd-ce,apgd-t", ""]),
])
def test_show_options_prints_the_attacks_table_and_runs_nothing(command, attack, default_row, tmp_path,
                                                                  monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    get_plugin_manager()
    result = CliRunner().invoke(app, command, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert f"options of attack {attack}" in result.output
    rows = {cells[0]: cells[:4] for line in result.output.splitlines()
            if (cells := [c.strip() for c in line.strip("│").split("│")]) and len(cells) >= 5}
    assert rows[default_row[0]] == default_row
    assert set(lookup("attack", attack).options_spec) <= set(rows)
    assert list(tmp_path.iterdir()) == []
