"""What ``mixzoo plugins`` shows: every plugin with its version, module, hooks and errors.

By default it reads the entry points' distribution metadata and imports the plugin modules (a plugin whose import
fails shows its error), and calls no hook, so it needs neither torch nor a mixing method. ``check=True`` (``mixzoo
plugins --check``) also calls every collecting hook and builds every table, the registry included: it lists the
names each plugin provides and the faults found there (a hook that raises, a name two plugins provide, an invalid
registry entry).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mixzoo.core.plugins.failures import runtime_failures
from mixzoo.core.plugins.manager import get_plugin_manager
from mixzoo.core.plugins.state import STATE
from mixzoo.core.plugins.tables import KINDS, build_tables


@dataclass
class PluginInfo:
    """What ``mixzoo plugins`` shows about one plugin: ``hooks`` it implements, (``--check``) the names it
    ``provides`` by kind, and the ``deprecations`` mixzoo warned it of (a moved name it imports; with ``--check``
    also an old-style entry it provides)."""

    name: str
    version: str
    module: str
    provides: dict[str, list[str]] = field(default_factory=dict)
    error: str | None = None
    hooks: list[str] = field(default_factory=list)
    deprecations: list[str] = field(default_factory=list)


def module_facts(plugin: Any) -> dict[str, list[str]]:
    """What a plugin module declares about its loaders, read from attributes (no hook is called): the source kinds
    of ``SOURCE_KINDS`` (``--check`` lists those its ``mixzoo_model_sources`` table gives instead)."""
    out: dict[str, list[str]] = {}
    if getattr(plugin, "mixzoo_model_sources", None) is not None:
        kinds = getattr(plugin, "SOURCE_KINDS", None)
        out["loads source kinds"] = sorted(kinds) if kinds else ["(unspecified)"]
    if getattr(plugin, "mixzoo_resolve_model_name", None) is not None:
        out["resolves names"] = [getattr(plugin, "NAME_FORMS", "yes")]
    return out


def _provided() -> dict[str, dict[str, list[str]]]:
    """label -> plugin -> names, from the tables just built (no hook is called again)."""
    return {spec.label: STATE.tables[kind].provided if kind in STATE.tables else {} for kind, spec in KINDS.items()}


def plugin_infos(check: bool = True) -> list[PluginInfo]:
    """One :class:`PluginInfo` per loaded or failed plugin; never raises for a plugin's fault. ``check``: call
    every hook and build every table as well (module docstring); ``False`` is ``mixzoo plugins`` without
    ``--check``."""
    pm = get_plugin_manager()
    if check:
        build_tables()
    provided = _provided() if check else {}
    infos: dict[str, PluginInfo] = {}
    for name, plugin in pm.list_name_plugin():
        if name is None or plugin is None:
            continue
        hooks = sorted(caller.name for caller in pm.get_hookcallers(plugin) or [])
        info = PluginInfo(name, STATE.versions.get(name, "?"), getattr(plugin, "__name__", type(plugin).__name__),
                          hooks=hooks, deprecations=list(STATE.deprecations.get(name, [])))
        for label, by_plugin in provided.items():
            if by_plugin.get(name):
                info.provides[label] = by_plugin[name]
        for label, facts in module_facts(plugin).items():  # what the tables list comes first
            info.provides.setdefault(label, facts)
        infos[name] = info
    errors = STATE.failure_texts()
    for name, reasons in runtime_failures().items():
        seen = "at run time: " + "; ".join(reasons)
        errors[name] = f"{errors[name]}; {seen}" if name in errors else seen
    for name, err in errors.items():
        if name in infos:
            infos[name].error = err
        else:
            infos[name] = PluginInfo(name, "?", "?", error=err)
    return sorted(infos.values(), key=lambda i: i.name)
