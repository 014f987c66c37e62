from __future__ import annotations

import pytest

from mixzoo.errors import PluginError, RegistryError, UnknownNameError
from mixzoo.registry import Registry, load_registry_file, spec_from_dict

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


def test_unknown_name_suggests_close_names():
    reg = Registry([spec_from_dict("fmnist-trades", GOOD), spec_from_dict("fmnist-pgd", {**GOOD, "aliases": []})])
    assert reg.get("r1").name == "fmnist-trades"
    with pytest.raises(UnknownNameError) as err:
        reg.get("fmnist-trade")
    assert "fmnist-trades" in str(err.value) and "did you mean" in str(err.value)


def test_duplicate_names_name_both_plugins():
    a = spec_from_dict("same", GOOD, plugin="plugin-a")
    b = spec_from_dict("same", {**GOOD, "aliases": []}, plugin="plugin-b")
    registry = Registry([a, b])  # building it works: only the colliding name fails
    with pytest.raises(PluginError) as err:
        registry.get("same")
    assert "plugin-a" in str(err.value) and "plugin-b" in str(err.value)
    assert "same" not in registry and registry.specs() == []


def test_shipped_registry_file_is_valid():
    from mixzoo.registry import default_registry_path

    specs = load_registry_file(default_registry_path())
    names = {s.name for s in specs}
    assert len(names) == len(specs)
