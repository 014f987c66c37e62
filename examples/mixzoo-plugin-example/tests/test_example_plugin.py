"""How a plugin tests itself: register the module at run time (no entry point needed: installed, or with
``PYTHONPATH=examples/mixzoo-plugin-example/src``) and use mixzoo's public API."""

from __future__ import annotations

import mixzoo_plugin_example as plugin
import pytest
import torch

import mixzoo
from mixzoo.core.plugins import get_plugin_manager, lookup, register_plugin, unregister_plugin


@pytest.fixture()
def registered():
    installed = get_plugin_manager().get_plugin("example") is not None  # already there when pip-installed
    if not installed:
        register_plugin(plugin, name="example")
    yield
    if not installed:
        unregister_plugin("example")


def test_model_loads_by_name_and_classifies_digits(registered):
    from mixzoo.zoo.data import load_dataset

    model = mixzoo.load_model(plugin.MODEL_NAME)
    data = load_dataset("digits", "evaluation")
    accuracy = (model(data.images).argmax(1) == data.labels).float().mean().item()
    assert accuracy > 0.8
    again = mixzoo.load_model(plugin.MODEL_NAME)
    assert again.weight_hash == model.weight_hash  # deterministic weights


def test_clamp_is_found_and_behaves_like_a_clamp(registered):
    clamp = lookup("clamp", plugin.CLAMP_NAME)
    x = torch.tensor([-20.0, 0.0, 20.0])
    torch.testing.assert_close(clamp(x), torch.tensor([0.0, 0.0, 20.0]))
