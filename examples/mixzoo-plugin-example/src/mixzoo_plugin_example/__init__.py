"""mixzoo-plugin-example: a mixzoo plugin.

mixzoo imports this module at every start (entry point ``example`` of group ``mixzoo`` in ``pyproject.toml``), so
it stays light: no torch here, each hook imports its module when mixzoo calls it. ``PROVIDES`` says what the hooks
provide, so that ``mixzoo plugins`` lists it without calling a hook; ``mixzoo plugins --check`` (and this package's
tests) check it against the hooks.
"""

from __future__ import annotations

from typing import Any

from mixzoo import hookimpl

__version__ = "0.1.0"
PROVIDES = {
    "models": ["example-digits-linear"],
    "datasets": ["example-inverted-digits"],
    "clamps": ["example-tanh"],
    "optimizers": ["example-coarse"],
    "attacks": ["example-fgsm"],
    "methods": ["example-switch"],
    "commands": ["example-accuracy"],
}

SOURCE_KINDS = ["example-digits"]  # the source kinds mixzoo_model_sources loads (`mixzoo plugins` lists them)
# a registry entry: the fields of a registry.toml table plus its name (reference: Model spec fields)
MODEL = {
    "name": "example-digits-linear", "role": "robust", "dataset": "digits", "num_classes": 10,
    "input_size": [1, 8, 8], "mean": [0.3], "std": [0.4], "threat_model": "Linf", "epsilon": 0.1,
    "source": {"kind": "example-digits", "seed": 0, "adv_eps": 0.1, "steps": 150},
    "description": "linear digits classifier, FGSM-trained when it is loaded (mixzoo-plugin-example)",
    "license": "MIT",
}


@hookimpl
def mixzoo_model_specs() -> list[dict[str, Any]]:
    return [MODEL]


@hookimpl
def mixzoo_model_sources() -> dict[str, Any]:
    from mixzoo_plugin_example.model import load

    return {SOURCE_KINDS[0]: load}


@hookimpl
def mixzoo_datasets() -> dict[str, Any]:
    from mixzoo_plugin_example.dataset import NAME, inverted_digits

    return {NAME: inverted_digits}


@hookimpl
def mixzoo_clamp_functions() -> dict[str, Any]:
    from mixzoo_plugin_example.clamp import NAME, tanh_clamp

    return {NAME: tanh_clamp}


@hookimpl
def mixzoo_calibration_optimizers() -> dict[str, Any]:
    from mixzoo_plugin_example.optimizer import NAME, coarse

    return {NAME: coarse}


@hookimpl
def mixzoo_attacks() -> dict[str, Any]:
    from mixzoo_plugin_example.attack import FGSM

    return {FGSM.name: FGSM}


@hookimpl
def mixzoo_mixing_methods() -> dict[str, Any]:
    from mixzoo_plugin_example.method import ConfidenceSwitch

    return {ConfidenceSwitch.name: ConfidenceSwitch()}


@hookimpl
def mixzoo_cli_commands() -> dict[str, Any]:
    from mixzoo_plugin_example.command import accuracy_command

    return {"example-accuracy": accuracy_command}
