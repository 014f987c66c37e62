"""Model sources as a table: the loader of a spec is picked by its ``source.kind`` from the merged table of the hook
``mixzoo_model_sources`` (:mod:`mixzoo.core.plugins.sources`). A loader's own error for its kind surfaces, whatever
other plugins answer; a kind two plugins provide is an error naming both; the deprecated ``mixzoo_load_model`` is
asked only for kinds no table provides, with a DeprecationWarning."""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch
from torch import nn

from mixzoo.core.errors import MissingFileError, MixzooError, PluginError, PluginWarning
from mixzoo.core.plugins import (
    clear_caches,
    hookimpl,
    plugin_failures,
    plugin_infos,
    register_plugin,
    runtime_failures,
    unregister_plugin,
)
from mixzoo.core.registry import get_spec
from mixzoo.zoo.models import load_model

ROBUST = {"role": "robust", "dataset": "digits", "num_classes": 10, "input_size": [1, 8, 8], "threat_model": "Linf",
          "epsilon": 0.1}


@pytest.fixture()
def plugin():
    names: list[str] = []

    def add(obj, name: str) -> str:
        names.append(register_plugin(obj, name=name))
        return names[-1]

    yield add
    for name in names:
        unregister_plugin(name)
    clear_caches()


def linear() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 10))


class Specs:
    """Registry entries ``{name: source kind}``."""

    def __init__(self, **kinds: str):
        self.kinds = kinds

    @hookimpl
    def mixzoo_model_specs(self):
        return [{"name": name, **ROBUST, "source": {"kind": kind}} for name, kind in self.kinds.items()]


class Sources:
    """A plugin of the table: ``mixzoo_model_sources`` returns the loaders given."""

    def __init__(self, **loaders):
        self.loaders = loaders

    @hookimpl
    def mixzoo_model_sources(self):
        return dict(self.loaders)


class OldLoader:
    """A plugin of the deprecated hook that answers for every kind: ``answer`` is a network, or an exception raised
    for kinds it does not know (both were seen in third-party plugins)."""

    def __init__(self, answer):
        self.answer, self.calls = answer, 0

    @hookimpl
    def mixzoo_load_model(self, spec, device, allow_unsafe):
        self.calls += 1
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


def missing_weights_spec():
    """digits-std (built-in zoo) pointing at a weights file that does not exist: the zoo loader's own error."""
    spec = get_spec("digits-std")
    return dataclasses.replace(spec, source={**spec.source, "file": "no-such-weights.safetensors"}, sha256=None)


@pytest.mark.parametrize("other", ["raises", "answers"])
def test_a_loaders_own_error_for_its_kind_surfaces_whatever_other_plugins_answer(plugin, other):
    greedy = OldLoader(MixzooError("kind not mine") if other == "raises" else linear())
    plugin(greedy, "mut-greedy-loader")
    with pytest.raises(MissingFileError, match="mixzoo train digits-std") as err:
        load_model(missing_weights_spec())
    assert "\n" not in str(err.value) and greedy.calls == 0  # the table's loader owns the kind: no one else is asked


def test_a_third_party_loaders_bug_is_one_line_naming_plugin_and_model(plugin):
    def broken(spec, device, allow_unsafe):
        raise ValueError("index 3 is out of bounds")

    plugin(Specs(**{"mut-bug-model": "mut-bug-kind"}), "mut-bug-specs")
    plugin(Sources(**{"mut-bug-kind": broken}), "mut-bug-source")
    plugin(OldLoader(linear()), "mut-greedy-loader")
    with pytest.raises(PluginError) as err:
        load_model("mut-bug-model")
    msg = str(err.value)
    assert msg.startswith("plugin 'mut-bug-source' failed to load model 'mut-bug-model': ValueError: index 3 is out")
    assert "\n" not in msg and "reinstall the plugin or report it to its author" in msg
    assert any("ValueError" in r for r in runtime_failures()["mut-bug-source"])


def test_a_loader_that_returns_no_network_is_named(plugin):
    plugin(Specs(**{"mut-none-model": "mut-none-kind"}), "mut-none-specs")
    plugin(Sources(**{"mut-none-kind": lambda spec, device, allow_unsafe: None}), "mut-none-source")
    with pytest.raises(PluginError, match="'mut-none-source'.*'mut-none-kind' returned NoneType for model"
                                          " 'mut-none-model', not an nn.Module"):
        load_model("mut-none-model")


def test_two_plugins_providing_one_source_kind_is_an_error_naming_both(plugin):
    calls: list[str] = []

    def loader(who):
        return lambda spec, device, allow_unsafe: calls.append(who) or linear()

    plugin(Specs(**{"mut-shared-model": "mut-shared", "mut-own-model": "mut-own"}), "mut-shared-specs")
    plugin(Sources(**{"mut-shared": loader("a"), "mut-own": loader("a")}), "mut-source-a")
    plugin(Sources(**{"mut-shared": loader("b")}), "mut-source-b")
    old = plugin(OldLoader(linear()), "mut-greedy-loader")
    with pytest.raises(PluginError) as err:
        load_model("mut-shared-model")
    assert str(err.value) == ("model source name 'mut-shared' is provided by both plugin 'mut-source-a' and plugin"
                              " 'mut-source-b'; uninstall one or rename the model source")
    assert calls == [] and old == "mut-greedy-loader"  # neither loader, nor the deprecated hook, is asked
    failures = plugin_failures()
    assert "model source 'mut-shared' left out: plugin 'mut-source-b' provides it too" in failures["mut-source-a"]
    assert "model source 'mut-shared' left out: plugin 'mut-source-a' provides it too" in failures["mut-source-b"]
    load_model("mut-own-model")  # the plugin's other kinds keep working
    assert calls == ["a"] and load_model("digits-std").name == "digits-std"


def test_a_built_in_source_kind_stays_the_built_ins(plugin):
    def impostor(spec, device, allow_unsafe):
        raise AssertionError("the built-in zoo loads zoo models")

    with pytest.warns(PluginWarning, match="plugin 'mut-zoo-impostor' provides model source 'zoo'"):
        plugin(Sources(zoo=impostor), "mut-zoo-impostor")
        model = load_model("digits-std")
    assert model.name == "digits-std"


def test_the_deprecated_load_hook_is_asked_after_the_table_with_a_warning(plugin):
    old = OldLoader(linear())
    plugin(Specs(**{"mut-old-model": "mut-old-kind"}), "mut-old-specs")
    plugin(old, "mut-old-loader")
    with pytest.warns(DeprecationWarning, match="plugin 'mut-old-loader' loads source kind 'mut-old-kind' through"
                                                " mixzoo_load_model: mixzoo.core.hookspecs.mixzoo_load_model is"
                                                " deprecated"):
        model = load_model("mut-old-model")
    assert old.calls == 1 and model(torch.zeros(2, 1, 8, 8)).shape == (2, 10)
    info = {i.name: i for i in plugin_infos(check=True)}["mut-old-loader"]
    assert any("mixzoo_model_sources" in d for d in info.deprecations)
    assert info.provides == {"loads source kinds": ["(unspecified)"]}


def test_a_kind_nobody_loads_names_the_fix(plugin):
    plugin(Specs(**{"mut-orphan-model": "mut-orphan-kind"}), "mut-orphan-specs")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(MixzooError, match="no installed plugin loads source kind 'mut-orphan-kind' \\(model"
                                              " 'mut-orphan-model'\\); install the plugin that provides it"):
            load_model("mut-orphan-model")
