"""The method families (``mixzoo/methods/<family>/``) reach what they share through ``mixzoo.methods.shared`` and the
method interface, never through a sibling family; the names that moved there keep working at their old paths."""

from __future__ import annotations

import ast
import importlib
import warnings
from pathlib import Path

import pytest

METHODS = Path(__file__).resolve().parents[2] / "mixzoo" / "methods"
FAMILIES = sorted(p.name for p in METHODS.iterdir() if p.is_dir() and p.name not in ("shared", "__pycache__"))


def sibling_imports(family: str, sources: dict[str, str]) -> list[str]:
    """``file:line module`` for every import in ``sources`` (file name -> code of a module of ``family``) of another
    family's module, at any level of the code."""
    bad = []
    for where, text in sources.items():
        for node in ast.walk(ast.parse(text)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            for name in names:
                parts = name.split(".")
                if parts[:2] == ["mixzoo", "methods"] and len(parts) > 2 and parts[2] in FAMILIES \
                        and parts[2] != family:
                    bad.append(f"{where}:{node.lineno} {name}")
    return bad


def test_there_are_families_to_check():
    assert {"adaptive", "local_smoothing", "mixednuts"} <= set(FAMILIES)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_family_imports_no_sibling_family(family):
    sources = {str(p.relative_to(METHODS)): p.read_text() for p in (METHODS / family).rglob("*.py")}
    assert sibling_imports(family, sources) == []


def test_the_sibling_check_can_fail():
    code = "def f():\n    from mixzoo.methods.adaptive.training import train\nimport mixzoo.methods.shared.taps\n"
    assert sibling_imports("local_smoothing", {"x.py": code}) == ["x.py:2 mixzoo.methods.adaptive.training"]
    assert sibling_imports("adaptive", {"x.py": code}) == []


@pytest.mark.parametrize("old, new", [("mixzoo.methods.adaptive.taps", "mixzoo.methods.shared.taps"),
                                      ("mixzoo.methods.adaptive.network", "mixzoo.methods.shared.network"),
                                      ("mixzoo.methods.adaptive.parallel", "mixzoo.methods.shared.parallel")])
def test_a_moved_module_answers_at_its_old_name_with_a_warning(old, new):
    import mixzoo  # noqa: F401 - installs the finder of moved modules

    module, home = importlib.import_module(old), importlib.import_module(new)
    name = next(n for n in dir(home) if not n.startswith("_") and getattr(getattr(home, n), "__module__", "") == new)
    with pytest.warns(DeprecationWarning, match=f"{new}.{name}"):
        assert getattr(module, name) is getattr(home, name)


def test_names_that_moved_to_shared_stay_at_their_old_paths():
    from mixzoo.methods.adaptive import attacks, gate_attacks, loss, method, training
    from mixzoo.methods.mixednuts import transforms
    from mixzoo.methods.shared import (
        alpha_attacks,
        boundary_refine,
        network_files,
        temperature,
        training_loop,
    )
    from mixzoo.methods.shared import gate_attacks as shared_gates

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # re-exports, not shims
        assert attacks.pgd_alpha is alpha_attacks.pgd_alpha and attacks.AttackBall is alpha_attacks.AttackBall
        assert gate_attacks.GateLogitAttack is shared_gates.GateLogitAttack
        assert gate_attacks.boundary_refine is boundary_refine.boundary_refine
        assert method.load_network is network_files.load_network and method.card_taps is network_files.card_taps
        assert training.TrainConfig is training_loop.TrainConfig and training.TrainRun is training_loop.TrainRun
        assert loss.LABEL_RULES is training_loop.LABEL_RULES
        assert transforms.abc_log_probs is temperature.abc_log_probs
    # adaptive smoothing's ``Objective`` is its own; the shared one is the contract every trained method fills in
    assert training.Objective is training.AdaptiveObjective
    assert issubclass(training.AdaptiveObjective, training_loop.Objective)
    with pytest.raises(NotImplementedError):
        training_loop.Objective().describe({})


def test_card_field_checks_fill_defaults_and_name_the_field():
    from mixzoo.core.errors import InputError
    from mixzoo.methods.base import number
    from mixzoo.methods.card_fields import choice, flag
    from mixzoo.methods.card_fields import number as home

    assert number is home
    params = {"accelerated": "True"}
    choice(params, "r", ("one", "ratio"), "card.toml", "sec", "ratio")
    flag(params, "accelerated", "card.toml", "sec")
    flag(params, "other", "card.toml", "sec")
    assert params == {"accelerated": True, "r": "ratio", "other": False}
    with pytest.raises(InputError, match=r"card.toml: field 'sec.r' must be one of one, ratio"):
        choice({"r": "two"}, "r", ("one", "ratio"), "card.toml", "sec", "ratio")
    with pytest.raises(InputError, match=r"field 'sec.flag' must be true or false"):
        flag({"flag": "yes"}, "flag", "card.toml", "sec")
