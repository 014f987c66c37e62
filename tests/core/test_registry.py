from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from mixzoo.cli import app
from mixzoo.core.errors import PluginError, RegistryError, UnknownNameError
from mixzoo.core.plugins import (
    clear_caches,
    get_plugin_manager,
    hookimpl,
    register_plugin,
    unregister_plugin,
)
from mixzoo.core.plugins.state import STATE
from mixzoo.core.registry import get_registry, list_models, load_registry_file, spec_from_dict

GOOD = {
    "role": "robust", "dataset": "digits", "num_classes": 10, "input_size": [1, 8, 8],
    "source": {"kind": "zoo"}, "threat_model": "Linf", "epsilon": 0.1, "aliases": ["r1"],
}


def test_valid_entry_round_trips_to_dict():
    spec = spec_from_dict("m", GOOD)
    assert spec.input_size == (1, 8, 8) and spec.epsilon == 0.1 and spec.aliases == ("r1",)
    assert spec.to_dict()["input_size"] == [1, 8, 8]


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("role", "fast", "'role'"),
        ("num_classes", 1, "'num_classes'"),
        ("input_size", [8, 8], "'input_size'"),
        ("source", "zoo", "'source'"),
        ("epsilon", -1, "'epsilon'"),
        ("threat_model", "L7", "'threat_model'"),
        ("std", [0.0], "'std'"),
        ("mean", [0.1, 0.2], "'mean'"),
        ("colour", "red", "'colour'"),
    ],
)
def test_bad_field_names_entry_and_field(field, value, needle):
    with pytest.raises(RegistryError) as err:
        spec_from_dict("broken-model", {**GOOD, field: value})
    assert "broken-model" in str(err.value) and needle in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_field_is_named():
    raw = dict(GOOD)
    del raw["dataset"]
    with pytest.raises(RegistryError, match="'dataset' is missing"):
        spec_from_dict("m", raw)


def test_registry_file_errors(tmp_path):
    with pytest.raises(RegistryError, match="does not exist"):
        load_registry_file(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[models.x\n")
    with pytest.raises(RegistryError, match="not valid TOML"):
        load_registry_file(bad)
    ok = tmp_path / "ok.toml"
    ok.write_text('[models.a]\nrole = "accurate"\ndataset = "digits"\nnum_classes = 10\ninput_size = [1, 8, 8]\n'
                  'source = { kind = "zoo" }\n')
    assert [s.name for s in load_registry_file(ok)] == ["a"]


class ModelSpecs:
    """A runtime plugin answering ``mixzoo_model_specs`` with ``specs``."""

    def __init__(self, specs):
        self.specs = specs

    @hookimpl
    def mixzoo_model_specs(self):
        return self.specs


@pytest.fixture()
def registry_of(tmp_path, monkeypatch, plugin):
    """The merged registry of an empty registry file and one runtime plugin per owner (``spec.plugin``) of ``specs``."""
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    monkeypatch.setenv("MIXZOO_REGISTRY", str(empty))

    def build(specs):
        owners: dict[str, list] = {}
        for spec in specs:
            owners.setdefault(spec.plugin, []).append(spec)
        for owner, own in owners.items():
            if get_plugin_manager().get_plugin(owner) is not None:
                unregister_plugin(owner)
            plugin(ModelSpecs(own), name=owner)
        return get_registry()

    return build


def test_unknown_name_suggests_close_names(registry_of):
    reg = registry_of([spec_from_dict("fmnist-trades", GOOD), spec_from_dict("fmnist-pgd", {**GOOD, "aliases": []})])
    assert reg.get("r1").name == "fmnist-trades"
    with pytest.raises(UnknownNameError) as err:
        reg.get("fmnist-trade")
    assert "fmnist-trades" in str(err.value) and "did you mean" in str(err.value)


def test_duplicate_names_name_both_plugins(registry_of):
    a = spec_from_dict("same", GOOD, plugin="plugin-a")
    b = spec_from_dict("same", {**GOOD, "aliases": []}, plugin="plugin-b")
    registry = registry_of([a, b])  # building it works: only the colliding name fails
    with pytest.raises(PluginError) as err:
        registry.get("same")
    assert "plugin-a" in str(err.value) and "plugin-b" in str(err.value)
    assert "same" not in registry and [s for s in registry.specs() if s.name == "same"] == []


def test_shipped_registry_file_is_valid():
    from mixzoo.core.registry import default_registry_path

    specs = load_registry_file(default_registry_path())
    names = {s.name for s in specs}
    assert len(names) == len(specs)


ROBUST = {"role": "robust", "dataset": "digits", "num_classes": 10, "input_size": [1, 8, 8],
          "source": {"kind": "zoo"}, "threat_model": "Linf", "epsilon": 0.1}
ACCURATE = {"role": "accurate", "dataset": "digits", "num_classes": 10, "input_size": [1, 8, 8],
            "source": {"kind": "zoo"}}


# --------------------------------------------------------------------------------------------- registry entries


@pytest.mark.parametrize(("changes", "field"), [
    ({"input_size": [1, 0, 8]}, "input_size"),
    ({"input_size": [1, 8, -8]}, "input_size"),
    ({"mean": [0.1, 0.2, 0.3]}, "mean"),  # 3 values for a 1-channel input
    ({"std": [0.1, 0.2, 0.3]}, "std"),
    ({"aliases": "r1"}, "aliases"),  # a string is not a list of aliases
    ({"sha256": "ab" * 31}, "sha256"),  # 62 characters
    ({"sha256": "ab" * 33}, "sha256"),  # 66 characters
    ({"num_classes": 1}, "num_classes"),
    ({"threat_model": "corruptions", "epsilon": None}, None),  # accepted: see the next test
])
def test_entry_fields_out_of_their_domain_are_refused_by_name(changes, field):
    raw = {k: v for k, v in {**ROBUST, **changes}.items() if v is not None}
    if field is None:
        spec_from_dict("m", raw)
        return
    with pytest.raises(RegistryError, match=f"'m' .*field '{field}'"):
        spec_from_dict("m", raw)


def test_entry_boundary_values_are_accepted():
    two = spec_from_dict("m", {**ACCURATE, "num_classes": 2})
    assert two.num_classes == 2
    per_channel = spec_from_dict("m", {**ACCURATE, "input_size": [2, 4, 4], "mean": [0.1, 0.2], "std": [0.3, 0.4]})
    assert per_channel.mean == (0.1, 0.2) and per_channel.std == (0.3, 0.4)
    single = spec_from_dict("m", {**ACCURATE, "input_size": [3, 4, 4], "mean": [0.5], "std": [0.25]})
    assert single.mean == (0.5,) and single.std == (0.25,)
    assert spec_from_dict("m", {**ACCURATE, "sha256": "0" * 64}).sha256 == "0" * 64
    corruptions = spec_from_dict("m", {**{k: v for k, v in ROBUST.items() if k != "epsilon"},
                                       "threat_model": "corruptions"})
    assert corruptions.threat_model == "corruptions" and corruptions.epsilon is None


def test_an_alias_that_clashes_with_another_entrys_name_or_alias_names_both(registry_of):
    first = spec_from_dict("fmnist-trades", {**ROBUST, "aliases": ["trades"]}, plugin="plugin-a")
    for clash in ("fmnist-trades", "trades"):
        second = spec_from_dict("other", {**ROBUST, "aliases": [clash]}, plugin="plugin-b")
        registry = registry_of([first, second])
        with pytest.raises(PluginError) as err:
            registry.get(clash)
        assert repr(clash) in str(err.value) and "plugin-a" in str(err.value) and "plugin-b" in str(err.value)


def test_unknown_model_names_suggest_aliases_too(registry_of):
    reg = registry_of([spec_from_dict("fmnist-trades", {**ROBUST, "aliases": ["trades-wide"]})])
    with pytest.raises(UnknownNameError) as err:
        reg.get("trades-wid")
    assert "trades-wide" in err.value.suggestions
    assert reg.get("trades-wide").name == "fmnist-trades"


REGISTRY_FILE = """
[models.zz-robust]
role = "robust"
dataset = "cifar10"
num_classes = 10
input_size = [3, 8, 8]
threat_model = "Linf"
epsilon = 0.03137
source = { kind = "zoo" }
reported = { clean = 0.9, robust = 0.5, autoattack = 0.4 }

[models.aa-accurate]
role = "accurate"
dataset = "cifar10"
num_classes = 10
input_size = [3, 8, 8]
source = { kind = "zoo" }
reported = { clean = 0.95 }

[models.mm-wide]
role = "robust"
dataset = "cifar100"
num_classes = 100
input_size = [3, 8, 8]
threat_model = "L2"
epsilon = 0.5
source = { kind = "zoo" }
reported = { clean = 0.8, robust = 0.3 }
aliases = ["wide"]
"""


@pytest.fixture()
def my_registry(tmp_path, monkeypatch):
    """MIXZOO_REGISTRY pointing at REGISTRY_FILE (named my-models.toml); the merged caches are rebuilt around it."""
    path = tmp_path / "my-models.toml"
    path.write_text(REGISTRY_FILE)
    monkeypatch.setenv("MIXZOO_REGISTRY", str(path))
    clear_caches()
    yield path
    monkeypatch.undo()
    clear_caches()


def test_the_registry_file_comes_from_the_environment_and_its_entries_name_the_file(my_registry):
    specs = list_models()
    assert [s.name for s in specs] == ["aa-accurate", "mm-wide", "zz-robust"]  # sorted, not file order
    assert {s.plugin for s in specs} == {"my-models.toml"}
    assert [s.name for s in load_registry_file(my_registry)] == ["zz-robust", "aa-accurate", "mm-wide"]


def test_list_filters_datasets_by_exact_name(my_registry):
    assert [s.name for s in list_models(dataset="cifar10")] == ["aa-accurate", "zz-robust"]
    assert [s.name for s in list_models(dataset="cifar100")] == ["mm-wide"]
    assert [s.name for s in list_models(role="robust", dataset="cifar10")] == ["zz-robust"]
    with pytest.raises(UnknownNameError, match="unknown dataset 'cifar'"):
        list_models(dataset="cifar")


def test_cli_list_shows_percentages_preferring_autoattack_over_robust(my_registry):
    result = CliRunner().invoke(app, ["list"], terminal_width=250)
    assert result.exit_code == 0, result.output
    rows = {name: next(line for line in result.output.splitlines() if name in line)
            for name in ("zz-robust", "mm-wide", "aa-accurate")}
    assert "90.00%" in rows["zz-robust"] and "40.00%" in rows["zz-robust"] and "50.00%" not in rows["zz-robust"]
    assert "80.00%" in rows["mm-wide"] and "30.00%" in rows["mm-wide"]
    assert "95.00%" in rows["aa-accurate"] and "my-models.toml" in rows["aa-accurate"]
    assert "0.0314" in rows["zz-robust"] and "0.5" in rows["mm-wide"]  # eps as mixzoo writes it everywhere


def test_cli_list_json_and_info_by_alias(my_registry):
    runner = CliRunner()
    entries = json.loads(runner.invoke(app, ["list", "--json", "--role", "robust"]).stdout)
    assert [e["name"] for e in entries] == ["mm-wide", "zz-robust"]
    info = json.loads(runner.invoke(app, ["info", "wide", "--json"]).stdout)
    assert info["name"] == "mm-wide" and info["aliases"] == ["wide"] and info["plugin"] == "my-models.toml"


# --------------------------------------------------------------------------------------------- close-name suggestions


def test_suggestions_are_the_three_closest_names_closest_first():
    known = ["cifar", "digits-pgd4", "digits-pgd3", "digits-pgd", "digits-pgd2"]
    err = UnknownNameError("model", "digits-pgd0", known)
    assert len(err.suggestions) == 3 and err.suggestions[0] == "digits-pgd"
    assert set(err.suggestions) < {"digits-pgd", "digits-pgd2", "digits-pgd3", "digits-pgd4"}
    assert str(err).startswith("unknown model 'digits-pgd0'; did you mean 'digits-pgd', ")
    assert str(err).endswith(" (see `mixzoo list`)")


def test_without_close_names_containment_either_way_suggests_up_to_three_ignoring_case():
    long = "wideresnet-wrn-28-10-with-a-long-name"
    assert UnknownNameError("model", "WRN", [long, "x"]).suggestions == [long]
    inside = UnknownNameError("attack", "my-own-pgd-variant-from-a-paper", ["pgd", "fab"])
    assert inside.suggestions == ["pgd"]
    many = [f"{p}-wrn-28-10-with-a-long-name" for p in "abcde"]
    assert UnknownNameError("model", "WRN", many).suggestions == many[:3]
    assert UnknownNameError("model", "zzz", many).suggestions == []
    assert "did you mean" not in str(UnknownNameError("model", "zzz", many))


def test_non_model_kinds_list_the_first_twelve_known_names_alphabetically():
    known = [f"c{i:02d}" for i in reversed(range(15))]
    message = str(UnknownNameError("clamp", "qqqqqq", known))
    assert message == "unknown clamp 'qqqqqq' (known: " + ", ".join(f"c{i:02d}" for i in range(12)) + ")"


# --------------------------------------------------------------------------------------------- the plugin manager


@pytest.fixture()
def plugin():
    """Register runtime plugins for one test; unregister them and forget their failures afterwards."""
    from mixzoo.core import plugins as plugins_module

    pm = plugins_module.get_plugin_manager()
    names: list[str] = []

    def add(obj, name: str) -> str:
        names.append(register_plugin(obj, name=name))
        return names[-1]

    yield add
    for name in names:
        if pm.get_plugin(name) is not None:
            unregister_plugin(name)
        STATE.failures.pop(name, None)
    clear_caches()
