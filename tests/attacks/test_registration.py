"""Every built-in attack is registered once: an attack for any classifier by the ``attacks`` plugin, an attack made
for one method's classifier by the methods' plugin, beside the method."""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from mixzoo.core.plugins import lookup

GENERAL = {"pgd", "apgd", "autoattack", "adaptive", "adaptive-apgd", "adaptive-strong", "min-margin-square", "fast"}
OF_METHODS = {"adaptive-smoothing-apgd", "adaptive-smoothing-gate", "local-smoothing-policy-gate"}


def test_the_attacks_and_methods_plugins_register_every_built_in_attack_and_no_other_built_in_plugin_does():
    from mixzoo_plugins import attacks, methods

    assert set(attacks.mixzoo_attacks()) == GENERAL
    assert set(methods.mixzoo_attacks()) == OF_METHODS
    others = [ep.name for ep in entry_points(group="mixzoo")
              if ep.value.startswith("mixzoo_plugins.") and ep.name not in ("attacks", "methods")
              and hasattr(importlib.import_module(ep.value), "mixzoo_attacks")]
    assert others == []
    for plugin, names in ((attacks, GENERAL), (methods, OF_METHODS)):  # and the registry serves each from there
        for name in names:
            assert lookup("attack", name) is plugin.mixzoo_attacks()[name]
