"""The plugin manager: built-ins and third parties both arrive through the entry-point group ``mixzoo``.

A plugin that fails to import, or whose hook raises, is recorded in :func:`plugin_failures` and skipped, so one
broken package never takes the rest of mixzoo down. ``mixzoo plugins`` shows both lists.
"""

from __future__ import annotations

import functools
import importlib.metadata as md
from dataclasses import dataclass, field
from typing import Any

import pluggy

from mixzoo.core import hookspecs
from mixzoo.core.errors import PluginError

PROJECT = "mixzoo"
hookimpl = pluggy.HookimplMarker(PROJECT)


@dataclass
class PluginInfo:
    """What ``mixzoo plugins`` shows about one plugin."""

    name: str
    version: str
    module: str
    provides: dict[str, list[str]] = field(default_factory=dict)
    error: str | None = None


_failures: dict[str, str] = {}


def _dist_version(ep: md.EntryPoint) -> str:
    return ep.dist.version if ep.dist is not None else "?"


@functools.cache
def get_plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager with every installed ``mixzoo`` entry point loaded.

    Entry points are loaded one by one (rather than ``load_setuptools_entrypoints``' all-or-nothing) so that an
    import error in one plugin is reported by name while the others load.
    """
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(hookspecs)
    for ep in sorted(md.entry_points(group=PROJECT), key=lambda e: e.name):
        if pm.get_plugin(ep.name) is not None or pm.is_blocked(ep.name):
            continue
        try:
            plugin = ep.load()
            pm.register(plugin, name=ep.name)
        except Exception as exc:  # noqa: BLE001 - any failure of a third-party import must be contained
            _failures[ep.name] = f"{type(exc).__name__}: {exc}"
            continue
        _versions[ep.name] = _dist_version(ep)
    return pm


_versions: dict[str, str] = {}


def register_plugin(plugin: Any, name: str | None = None) -> str:
    """Register a plugin object at run time (tests, notebooks); clears the merged caches."""
    pm = get_plugin_manager()
    name = pm.register(plugin, name=name)
    _versions.setdefault(name, getattr(plugin, "__version__", "runtime"))
    clear_caches()
    return name


def unregister_plugin(name: str) -> None:
    """Remove a plugin registered with :func:`register_plugin`."""
    get_plugin_manager().unregister(name=name)
    clear_caches()


def clear_caches() -> None:
    """Forget merged hook results (registry, clamps, attacks, ...) so they are rebuilt on next use."""
    for fn in _CACHED:
        fn.cache_clear()
    _registry_cache()


def plugin_failures() -> dict[str, str]:
    """Plugins that failed to import or whose hooks raised, with the error text."""
    get_plugin_manager()
    return dict(_failures)


def collect(hook_name: str) -> list[tuple[str, Any]]:
    """Call a collecting hook on every plugin separately; return ``(plugin_name, result)`` pairs.

    A plugin whose hook raises is recorded as failed and skipped.
    """
    pm = get_plugin_manager()
    out: list[tuple[str, Any]] = []
    for plugin_name, plugin in pm.list_name_plugin():
        impl = getattr(plugin, hook_name, None)
        if impl is None or plugin_name is None:
            continue
        try:
            result = impl()
        except Exception as exc:  # noqa: BLE001 - contain third-party failures
            _failures[plugin_name] = f"{hook_name}: {type(exc).__name__}: {exc}"
            continue
        if result is not None:
            out.append((plugin_name, result))
    return out


def collect_named(hook_name: str, what: str) -> dict[str, Any]:
    """Merge the name -> object dicts returned by a collecting hook; a name given by two plugins is an error."""
    merged: dict[str, Any] = {}
    owner: dict[str, str] = {}
    for plugin_name, result in collect(hook_name):
        if not isinstance(result, dict):
            _failures[plugin_name] = f"{hook_name} returned {type(result).__name__}, expected dict"
            continue
        for key, value in result.items():
            if key in merged:
                raise PluginError(
                    f"{what} name {key!r} is provided by both plugin {owner[key]!r} and plugin {plugin_name!r};"
                    f" uninstall one or rename the {what}"
                )
            merged[key], owner[key] = value, plugin_name
    return merged


@functools.cache
def clamp_functions() -> dict[str, Any]:
    """All clamp functions by name."""
    return collect_named("mixzoo_clamp_functions", "clamp")


@functools.cache
def attacks() -> dict[str, Any]:
    """All attack factories by name."""
    return collect_named("mixzoo_attacks", "attack")


@functools.cache
def calibration_optimizers() -> dict[str, Any]:
    """All calibration optimizers by name."""
    return collect_named("mixzoo_calibration_optimizers", "calibration optimizer")


@functools.cache
def datasets() -> dict[str, Any]:
    """All dataset factories by name."""
    return collect_named("mixzoo_datasets", "dataset")


@functools.cache
def mixing_methods() -> dict[str, Any]:
    """All mixing methods by name (:class:`mixzoo.methods.MixingMethod` objects)."""
    return collect_named("mixzoo_mixing_methods", "mixing method")


@functools.cache
def published_cards() -> dict[str, Any]:
    """All published mix cards by name (paths of card files shipped with plugins)."""
    return collect_named("mixzoo_cards", "card")


def _registry_cache() -> None:
    from mixzoo.core.registry import get_registry

    get_registry.cache_clear()


_CACHED = [clamp_functions, attacks, calibration_optimizers, datasets, mixing_methods, published_cards]


def lookup(kind: str, name: str) -> Any:
    """Find a clamp / attack / calibration optimizer / dataset / mixing method / published card by name,
    suggesting close names if unknown."""
    from mixzoo.core.errors import UnknownNameError

    table = {"clamp": clamp_functions, "attack": attacks, "optimizer": calibration_optimizers,
             "dataset": datasets, "method": mixing_methods, "card": published_cards}[kind]()
    if name not in table:
        raise UnknownNameError(kind, name, table)
    return table[name]


def plugin_infos() -> list[PluginInfo]:
    """One :class:`PluginInfo` per loaded or failed plugin, for ``mixzoo plugins``."""
    from mixzoo.core.registry import get_registry

    pm = get_plugin_manager()
    registry = get_registry()
    infos: dict[str, PluginInfo] = {}
    for name, plugin in pm.list_name_plugin():
        if name is None or plugin is None:
            continue
        info = PluginInfo(name, _versions.get(name, "?"), getattr(plugin, "__name__", type(plugin).__name__))
        models = [s.name for s in registry.specs() if s.plugin == name]
        if models:
            info.provides["models"] = models
        for hook, label in [("mixzoo_clamp_functions", "clamps"), ("mixzoo_attacks", "attacks"),
                            ("mixzoo_calibration_optimizers", "optimizers"), ("mixzoo_datasets", "datasets"),
                            ("mixzoo_mixing_methods", "methods"), ("mixzoo_cards", "cards")]:
            impl = getattr(plugin, hook, None)
            if impl is not None:
                try:
                    info.provides[label] = sorted(impl())
                except Exception as exc:  # noqa: BLE001
                    _failures[name] = f"{hook}: {type(exc).__name__}: {exc}"
        kinds = getattr(plugin, "SOURCE_KINDS", None)
        if getattr(plugin, "mixzoo_load_model", None) is not None:
            info.provides["loads source kinds"] = sorted(kinds) if kinds else ["(unspecified)"]
        if getattr(plugin, "mixzoo_resolve_model_name", None) is not None:
            info.provides["resolves names"] = [getattr(plugin, "NAME_FORMS", "yes")]
        infos[name] = info
    for name, err in _failures.items():
        if name in infos:
            infos[name].error = err
        else:
            infos[name] = PluginInfo(name, "?", "?", error=err)
    return sorted(infos.values(), key=lambda i: i.name)
