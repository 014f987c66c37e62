"""What ``mixzoo plugins`` shows: every plugin with its version, module, hooks, what it provides and errors.

By default it imports the plugin modules (a failed import shows its error) and calls no hook, so it needs neither
torch nor a mixing method: what a plugin provides is its module's :data:`DECLARATION` (``PROVIDES = {"clamps":
["acme-tanh"], ...}``, labels of :data:`LABELS`); an import slower than :data:`SLOW_IMPORT_S` gets
:data:`IMPORT_HINT`. ``check=True`` (``mixzoo plugins --check``) also builds every table, the registry included,
and lists the names each plugin provides and the faults found (a hook that raises, a name two plugins provide, an
invalid registry entry, a declaration that differs from the hooks).
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
    import_s: float | None = None  # seconds the entry point's module took to import (None: registered at run time)
    hints: list[str] = field(default_factory=list)  # e.g. a slow import and what to do about it


DECLARATION = "PROVIDES"  # the module attribute: {label: [names]}, what the plugin's hooks provide
# the labels a declaration may use: the tables' (mixzoo.core.plugins.tables.KINDS) and the registry's models
LABELS = (*(k.label for k in KINDS.values() if k.hook != "mixzoo_model_sources"), "models")
SLOW_IMPORT_S = 0.2
IMPORT_HINT = "import torch and heavy modules inside the hooks, not at module level"


def declared(plugin: Any) -> dict[str, list[str]]:
    """A plugin module's :data:`DECLARATION`, each label's names sorted (``{}`` when it declares none); read from
    the module, no hook called. A malformed declaration is ``{"(invalid PROVIDES)": [...]}``, shown as it is."""
    value = getattr(plugin, DECLARATION, None)
    if value is None:
        return {}
    ok = isinstance(value, dict) and all(k in LABELS and isinstance(v, list | tuple) and all(isinstance(n, str)
                                                                                           for n in v)
                                         for k, v in value.items())
    if not ok:
        return {f"(invalid {DECLARATION})": [f"a dict of {', '.join(LABELS)} -> lists of names"]}
    return {label: sorted(names) for label, names in value.items()}


def drift(declaration: dict[str, list[str]], provided: dict[str, list[str]]) -> str | None:
    """The one-line fault when a plugin's declaration differs from what its hooks provide (``provided``: label ->
    names, from the built tables), else ``None``."""
    labels = sorted((set(declaration) | set(provided)) & set(LABELS))
    wrong = [f"{label}: declared {', '.join(declaration.get(label, [])) or 'none'}, hooks give"
             f" {', '.join(sorted(provided.get(label, []))) or 'none'}" for label in labels
             if sorted(provided.get(label, [])) != declaration.get(label, [])]
    return f"{DECLARATION} differs from the hooks ({'; '.join(wrong)}); update {DECLARATION}" if wrong else None


def import_hint(seconds: float | None) -> str | None:
    """:data:`IMPORT_HINT` with the time, when an import took longer than :data:`SLOW_IMPORT_S`."""
    if seconds is None or seconds <= SLOW_IMPORT_S:
        return None
    return f"imports in {seconds:.2f} s (over {SLOW_IMPORT_S} s): {IMPORT_HINT}"


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
    drifted: dict[str, str] = {}
    for name, plugin in pm.list_name_plugin():
        if name is None or plugin is None:
            continue
        hooks = sorted(caller.name for caller in pm.get_hookcallers(plugin) or [])
        info = PluginInfo(name, STATE.versions.get(name, "?"), getattr(plugin, "__name__", type(plugin).__name__),
                          hooks=hooks, deprecations=list(STATE.deprecations.get(name, [])))
        for label, by_plugin in provided.items():
            if by_plugin.get(name):
                info.provides[label] = by_plugin[name]
        declaration = declared(plugin)
        fault = drift(declaration, info.provides) if check and declaration else None
        if fault:
            drifted[name] = fault
        for label, facts in {**declaration, **module_facts(plugin)}.items():  # what the tables list comes first
            info.provides.setdefault(label, facts)
        info.import_s = STATE.import_seconds.get(name)
        info.hints = [hint for hint in (import_hint(info.import_s),) if hint]
        infos[name] = info
    errors = STATE.failure_texts()
    seen = [(name, "at run time: " + "; ".join(reasons)) for name, reasons in runtime_failures().items()]
    for name, fault in [*drifted.items(), *seen]:
        errors[name] = f"{errors[name]}; {fault}" if name in errors else fault
    for name, err in errors.items():
        if name in infos:
            infos[name].error = err
        else:
            infos[name] = PluginInfo(name, "?", "?", error=err)
    return sorted(infos.values(), key=lambda i: i.name)
