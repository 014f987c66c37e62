"""The hook ``mixzoo_load_model`` (a loader per plugin answering ``None`` for kinds it does not own), replaced by
the table of ``mixzoo_model_sources``: asked, with a :class:`DeprecationWarning`, only for a source kind no table
provides; ``mixzoo plugins`` lists the kinds its plugins declare and ``--check`` names each plugin implementing it."""

from __future__ import annotations

import functools
import types
from typing import Any

from mixzoo.deprecated import DEPRECATIONS

OLD_HOOK = "mixzoo_load_model"
ENTRY = DEPRECATIONS["load-model-hook"]
MESSAGE = f"{ENTRY.old} is deprecated and will be removed in mixzoo {ENTRY.removed_in}; return {ENTRY.new} instead"


def attach_sources(sources: types.ModuleType) -> None:
    """:func:`mixzoo.core.plugins.sources.load_network` asks the old hook for a kind no table provides."""
    from mixzoo.core.plugins.guard import first_answer
    from mixzoo.core.plugins.state import STATE
    from mixzoo.core.plugins.tables import provider

    library = sources.load_network

    @functools.wraps(library)
    def load_network(spec: Any, device: str, allow_unsafe: bool) -> Any:
        kind = str(spec.source.get("kind"))
        answer = None if provider("source", kind) is not None else \
            first_answer(OLD_HOOK, f"load model {spec.name!r}", spec=spec, device=device, allow_unsafe=allow_unsafe)
        if answer is None:
            return library(spec, device, allow_unsafe)
        plugin_name, network = answer
        STATE.record_deprecation(plugin_name, MESSAGE)
        ENTRY.warn(stacklevel=3, what=f"plugin {plugin_name!r} loads source kind {kind!r} through {OLD_HOOK}:"
                                      f" {ENTRY.old}")
        return network

    sources.load_network = load_network


def attach_listing(listing: types.ModuleType) -> None:
    """``mixzoo plugins`` shows the source kinds an old-hook plugin declares, and ``--check`` its deprecation."""
    from mixzoo.core.plugins.manager import get_plugin_manager
    from mixzoo.core.plugins.state import STATE

    facts, infos = listing.module_facts, listing.plugin_infos

    @functools.wraps(facts)
    def module_facts(plugin: Any) -> dict[str, list[str]]:
        out = facts(plugin)
        if getattr(plugin, OLD_HOOK, None) is not None and "loads source kinds" not in out:
            kinds = getattr(plugin, "SOURCE_KINDS", None)
            out = {"loads source kinds": sorted(kinds) if kinds else ["(unspecified)"], **out}
        return out

    @functools.wraps(infos)
    def plugin_infos(check: bool = True) -> list[Any]:
        if check:  # after the tables' own deprecations (an old-style entry), as the library's order has them
            listing.build_tables()
            for plugin_name, plugin in get_plugin_manager().list_name_plugin():
                if plugin_name is not None and getattr(plugin, OLD_HOOK, None) is not None:
                    STATE.record_deprecation(plugin_name, MESSAGE)
        return infos(check)

    listing.module_facts, listing.plugin_infos = module_facts, plugin_infos
