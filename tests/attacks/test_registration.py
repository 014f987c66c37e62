"""Every built-in attack is registered in one place: the ``attacks`` plugin."""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from mixzoo.core.plugins import lookup

BUILT_IN = {"pgd", "apgd", "autoattack", "adaptive", "adaptive-apgd", "adaptive-strong", "min-margin-square", "fast",
            "adaptive-smoothing-apgd", "adaptive-smoothing-gate", "local-smoothing-policy-gate"}


def test_the_attacks_plugin_registers_every_built_in_attack_and_no_other_built_in_plugin_does():
    from mixzoo_plugins import attacks

    assert set(attacks.mixzoo_attacks()) == BUILT_IN
    others = [ep.name for ep in entry_points(group="mixzoo")
              if ep.value.startswith("mixzoo_plugins.") and ep.name != "attacks"
              and hasattr(importlib.import_module(ep.value), "mixzoo_attacks")]
    assert others == []
    for name in BUILT_IN:  # and the registry serves each of them from there
        assert lookup("attack", name) is attacks.mixzoo_attacks()[name]
