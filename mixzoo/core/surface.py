"""mixzoo's public surface, declared in one place: what third parties (plugins, scripts, notebooks) may build on.

Each entry names a module and the names of it that are public; ``None`` means the module's ``__all__``. The
classes' public members (methods, properties, dataclass fields) are part of the surface with them. A name here
changes only with an entry in CHANGELOG.md's "Unreleased" section and, when it moves or is renamed, a deprecation
shim for at least one minor release (CONTRIBUTING.md, "Public surface and versions"); ``tests/test_public_api.py``
compares the live surface with ``tests/api_snapshot.json`` (names and signatures) and checks that CHANGELOG.md
records each change.

Plain data (no imports), so that reading it costs nothing.
"""

from __future__ import annotations

PUBLIC_SURFACE: dict[str, tuple[str, ...] | None] = {
    # the top-level names: mixzoo.load_mixed(...), mixzoo.hookimpl, ...
    "mixzoo": None,
    # the method contract (hook mixzoo_mixing_methods)
    "mixzoo.methods": None,
    "mixzoo.methods.base": ("LegacyMethod", "number", "square_extra", "weight_hashes"),
    # what the method contract's match / tradeoff_curve / figure_data take (mixzoo.attacks.runner.evaluate's request)
    "mixzoo.core.request": ("EvalRequest", "ReportRequest"),
    # the attack base a plugin's attack subclasses (hook mixzoo_attacks) and what its run returns
    "mixzoo.attacks": ("Attack", "AttackResult", "Component", "ComponentStat", "EvalResult", "GradientVariants",
                       "with_gradient"),
    # every hook (names, arguments, firstresult)
    "mixzoo.core.hookspecs": ("mixzoo_architectures", "mixzoo_attacks", "mixzoo_calibration_optimizers",
                              "mixzoo_cards", "mixzoo_cli_commands", "mixzoo_clamp_functions", "mixzoo_datasets",
                              "mixzoo_load_model", "mixzoo_mixing_methods", "mixzoo_model_sources",
                              "mixzoo_model_specs",
                              "mixzoo_resolve_card", "mixzoo_resolve_model_name", "mixzoo_weights_dir"),
    # the plugin manager's public functions (CONTRIBUTING.md, "Writing a plugin")
    "mixzoo.core.plugins": ("clear_caches", "get_plugin_manager", "hookimpl", "lookup", "plugin_infos",
                            "PluginInfo", "register_plugin", "unregister_plugin"),
    "mixzoo.core.errors": ("InputError", "MissingFileError", "MixzooError", "PluginError", "PluginWarning",
                           "UnknownNameError"),
    "mixzoo.core.registry": ("ModelSpec", "get_spec", "list_models"),
    # the one option spec (methods' options) and KEY=VALUE parser
    "mixzoo.core.options": None,
    # the mix card schema (card files) and the bench report schema (report.json)
    "mixzoo.core.card": ("SCHEMA_VERSION", "MixCard", "provenance"),
    "mixzoo.evaluation.bench": ("ModelResult", "Report"),
    # plugin packages from a template (`mixzoo new-plugin`)
    "mixzoo.scaffold": None,
}
