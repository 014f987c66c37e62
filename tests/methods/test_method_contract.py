"""The mixing-method contract: what the rest of mixzoo may ask a method is what :class:`MixingMethod` declares.

Checked on the source (no getattr/hasattr probing of methods outside ``mixzoo/methods/``, no MixedNUTS import or
option in the CLI, no mutable gradient switch in the attacks) and on behaviour (gradient variants keep the values,
typed options refuse a wrong type in one line, the command line reaches the card through ``FitRequest.command``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from mixzoo.attacks.variants import GradientVariants, with_gradient
from mixzoo.cli import app
from mixzoo.core.card import MixCard
from mixzoo.core.errors import InputError
from mixzoo.core.plugins import table
from mixzoo.methods import MixingMethod, OptionSpec

ROOT = Path(__file__).resolve().parents[2]
OUTSIDE = [p for p in sorted((ROOT / "mixzoo").rglob("*.py")) if "methods" not in p.relative_to(ROOT).parts] + \
          sorted((ROOT / "plugins").rglob("*.py"))


def _source(node: ast.AST) -> str:
    return ast.unparse(node)


def test_nothing_outside_methods_probes_a_method():
    offenders = []
    for path in OUTSIDE:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr",
                                                                                                     "hasattr"):
                target = _source(node.args[0]) if node.args else ""
                if "method" in target or "lin" == target or "base" == target:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {_source(node)}")
    assert not offenders, offenders


def test_every_method_member_used_outside_methods_is_declared():
    """``X.mixing_method.NAME`` and ``baseline_method().NAME`` outside methods/ name members of MixingMethod."""
    declared = set(dir(MixingMethod))
    used = []
    for path in OUTSIDE:
        tree = ast.parse(path.read_text())
        holders = {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign | ast.NamedExpr)
                   for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)
                   and isinstance(n.value, ast.Attribute | ast.Call)
                   and _source(n.value).split("(")[0].endswith(("mixing_method", "baseline_method", "get_method"))}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                base = node.value
                if (isinstance(base, ast.Attribute) and base.attr == "mixing_method") or (
                        isinstance(base, ast.Name) and base.id in holders):
                    used.append((path.relative_to(ROOT), node.lineno, node.attr))
    assert used, "the scan found no use at all: it is looking in the wrong place"
    assert not [u for u in used if u[2] not in declared], [u for u in used if u[2] not in declared]


def test_the_cli_imports_no_method_and_has_no_method_options():
    cli = "\n".join(p.read_text() for p in sorted((ROOT / "mixzoo" / "cli").glob("*.py")))
    assert "def bench(" in cli and "def mix(" in cli  # the scan reads the commands
    imported = [_source(n) for n in ast.walk(ast.parse(cli)) if isinstance(n, ast.ImportFrom | ast.Import)]
    assert not [i for i in imported if "mixednuts" in i or "methods.linear" in i], imported
    assert "mixednuts:" not in cli


def test_the_attacks_switch_no_gradient_attribute():
    for path in sorted((ROOT / "mixzoo" / "attacks").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "gradient" and isinstance(node.ctx, ast.Store):
                pytest.fail(f"{path.name}:{node.lineno} sets a model's gradient attribute")
            assert not (isinstance(node, ast.FunctionDef) and node.name == "gradient_mode")


def test_builtin_methods_subclass_the_contract_and_type_their_options():
    for name, method in table("method").items():
        assert isinstance(method, MixingMethod), name
        specs = method.option_specs()
        assert "command" not in specs, name  # the command line is FitRequest.command, not an option
        assert all(isinstance(s, OptionSpec) and s.help for s in specs.values()), name


def test_mixednuts_variants_keep_the_values_and_change_the_gradient():
    from mixzoo.methods.mixednuts.mixing import MixedClassifier, MixingParams

    torch.manual_seed(0)
    abc, rbc = nn.Linear(6, 4), nn.Linear(6, 4)
    model = MixedClassifier(abc, rbc, MixingParams(s=2.0, p=2.0, c=-0.5, alpha=0.8))
    bypass = with_gradient(model, "bypass")
    assert isinstance(model, GradientVariants) and bypass is not model and model.gradient == "exact"
    assert bypass.abc is abc and bypass.rbc is rbc and with_gradient(bypass, "exact").gradient == "exact"
    x = torch.rand(5, 6, requires_grad=True)
    torch.testing.assert_close(bypass(x), model(x))
    g_exact = torch.autograd.grad(model(x)[:, 0].sum(), x)[0]
    g_bypass = torch.autograd.grad(bypass(x)[:, 0].sum(), x)[0]
    assert not torch.allclose(g_exact, g_bypass)
    plain = nn.Linear(6, 4)
    assert with_gradient(plain, "bypass") is plain and with_gradient(model, "no-such-variant") is model


def test_typed_option_refused_in_one_line_naming_it_and_its_type(tmp_path):
    out = tmp_path / "card.toml"
    result = CliRunner().invoke(app, ["mix", "-O", "n_iter=abc", "--out", str(out)])
    assert result.exit_code == 2
    line = " ".join(result.output.split())
    assert "n_iter" in line and "an integer" in line and "'abc'" in line and not out.exists()
    result = CliRunner().invoke(app, ["mix", "--n-iter", "abc", "--out", str(out)])
    assert result.exit_code == 2 and "an integer" in " ".join(result.output.split())
    with pytest.raises(InputError, match=r"option refit_alpha \(--refit-alpha\) of mixing method 'mixednuts' must"
                                         r" be true or false"):
        table("method")["mixednuts"].check_options({"refit_alpha": "maybe"})
    checked = table("method")["mixednuts"].check_options({"n_iter": "7", "beta": 1})
    assert (checked["n_iter"], checked["beta"]) == (7, 1.0) and checked["n_restarts"] == 1  # the others filled
    assert "grid" not in checked and "top_k" not in checked  # defaults that are no one value: shown, not filled
    shown = CliRunner().invoke(app, ["mix", "--method", "linear", "--show-options"])
    assert shown.exit_code == 0 and "--target-robust" in shown.output and "float" in shown.output


def test_mix_with_a_named_method_records_the_command_line(tmp_path):
    """`mixzoo mix --method NAME` passes the method only its declared options; the command line reaches the card
    through FitRequest.command."""
    out = tmp_path / "lin.toml"
    result = CliRunner().invoke(app, ["mix", "--method", "linear", "--abc", "digits-std", "--rbc", "digits-pgd",
                                      "-O", "alpha=0.9", "--out", str(out)])
    assert result.exit_code == 0, result.output
    card = MixCard.load(out)
    assert card.params["alpha"] == 0.9 and card.provenance["command"].startswith("mixzoo ")
    result = CliRunner().invoke(app, ["mix", "--method", "linear", "--abc", "digits-std", "--rbc", "digits-pgd",
                                      "--alpha", "0.8", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert MixCard.load(out).params["alpha"] == 0.8


class _StrictMethod(MixingMethod):
    """A third-party method that checks a table its fit writes (``attack.kind``) besides its section."""

    name = "test-strict"

    def validate(self, params, source):
        return params

    def check_card(self, card, source):
        from mixzoo.core.card import field_error

        if card.attack.get("kind") not in (None, "ok"):
            raise field_error(source, "attack.kind", "'ok'", card.attack["kind"])


class _StrictPlugin:
    from mixzoo.core.plugins import hookimpl

    @hookimpl
    def mixzoo_mixing_methods(self):
        return {"test-strict": _StrictMethod()}


def test_a_method_checks_its_own_card_tables_on_construction_and_loading(tmp_path):
    """MixingMethod.check_card runs where the core validates a card: construction and file loading both refuse a
    bad table the method owns, in one line naming the field; the default accepts anything."""
    import json

    from mixzoo.core.plugins import register_plugin, unregister_plugin

    name = register_plugin(_StrictPlugin(), name="test-strict-plugin")
    try:
        MixCard("test-strict", {}, attack={"kind": "ok"})
        with pytest.raises(InputError, match=r"field 'attack.kind' must be 'ok', got 'bad'"):
            MixCard("test-strict", {}, attack={"kind": "bad"})
        path = MixCard("test-strict", {}).save(tmp_path / "card.json")
        data = json.loads(path.read_text())
        data["attack"] = {"kind": "bad"}
        path.write_text(json.dumps(data))
        with pytest.raises(InputError, match=rf"^{path}: field 'attack.kind'"):
            MixCard.load(path)
    finally:
        unregister_plugin(name)
    assert MixingMethod().check_card(MixCard("linear", {"alpha": 0.9}, attack={"kind": "bad"}), "x") is None


@pytest.mark.parametrize("method", ["mixednuts", "linear"])
def test_the_mmaa_record_is_checked_by_the_methods_that_write_it(method):
    """The MMAA record (written by MixedNUTS's and the linear method's beta fits) is checked by those methods, not
    (``MixingMethod.check_card``); construction refuses a bad one in one line."""
    attack = {"name": "mmaa", "eps": -1.0, "norm": "Linf", "n_iter": 10, "n_target_classes": 9, "n_restarts": 1,
              "seed": 0}
    with pytest.raises(InputError, match="field 'attack.eps' must be a positive number"):
        params = {"s": 1.0, "p": 1.0, "c": 0.0, "alpha": 0.9, "beta": 0.985} if method == "mixednuts" else \
            {"alpha": 0.9}
        MixCard(method, params, attack=attack, data={"n": 100})
