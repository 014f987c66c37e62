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


_failures: dict[str, str] = {}  # plugin name -> what went wrong ("; "-joined when several things did)
_reasons: dict[str, list[str]] = {}
_import_failed: set[str] = set()  # entry points that failed to load: kept for the process
_collisions: dict[str, dict[str, list[str]]] = {}  # hook name -> name -> the plugins that all provide it


def record_failure(plugin_name: str, reason: str) -> None:
    """Note that ``plugin_name`` failed (entirely or in part); ``mixzoo plugins`` shows every reason."""
    reasons = _reasons.get(plugin_name, []) if plugin_name in _failures else []
    if reason not in reasons:
        reasons = [*reasons, reason]
    _reasons[plugin_name] = reasons
    _failures[plugin_name] = "; ".join(reasons)


def collision_message(what: str, name: str, plugins: list[str]) -> str:
    """The one-line error for a name that several plugins provide."""
    quoted = [repr(p) for p in plugins]
    both = f"both plugin {quoted[0]} and plugin {quoted[1]}" if len(quoted) == 2 else \
        f"plugins {', '.join(quoted[:-1])} and {quoted[-1]}"
    return f"{what} name {name!r} is provided by {both}; uninstall one or rename the {what}"


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
            _import_failed.add(ep.name)
            record_failure(ep.name, f"{type(exc).__name__}: {exc}")
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
    """Forget merged hook results (registry, clamps, attacks, ...) so they are rebuilt on next use; failures found
    while merging are forgotten with them (import failures stay)."""
    for fn in _CACHED + _DERIVED:
        fn.cache_clear()
    _collisions.clear()
    for name in [n for n in _failures if n not in _import_failed]:
        del _failures[name]
        _reasons.pop(name, None)


def _build_tables() -> None:
    """Merge every collected hook (so that every plugin failure is known); never raises for a plugin's fault."""
    from mixzoo.core.errors import MixzooError

    for fn in _CACHED:
        fn()
    for fn in _DERIVED:
        try:
            fn()
        except MixzooError as exc:  # e.g. the registry file itself (not a plugin); `mixzoo plugins` still answers
            record_failure(getattr(fn, "derived_name", fn.__name__), str(exc))


def plugin_failures() -> dict[str, str]:
    """Plugins that failed to import, whose hooks raised or returned the wrong type, or whose entries were left
    out (invalid, or a name another plugin also provides), with the reasons."""
    get_plugin_manager()
    _build_tables()
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
            record_failure(plugin_name, f"{hook_name}: {type(exc).__name__}: {exc}")
            continue
        if result is not None:
            out.append((plugin_name, result))
    return out


def first_result(hook_name: str, doing: str, **kwargs: Any) -> Any:
    """Call a ``firstresult`` hook as pluggy would (same order, first non-``None`` answer wins), but knowing which
    plugin answers: an exception other than a :class:`~mixzoo.core.errors.MixzooError` (which already reads as one
    line) becomes a one-line :class:`PluginError` naming the plugin and ``doing`` (e.g. "load model 'x'")."""
    from mixzoo.core.errors import MixzooError

    for impl in reversed(getattr(get_plugin_manager().hook, hook_name).get_hookimpls()):
        if impl.hookwrapper or impl.wrapper:
            continue
        try:
            result = impl.function(*(kwargs[name] for name in impl.argnames))
        except MixzooError:
            raise
        except Exception as exc:  # noqa: BLE001 - a third party's bug must not become a traceback
            text = " ".join(str(exc).split()) or "(no message)"
            raise PluginError(f"plugin {impl.plugin_name!r} failed to {doing}: {type(exc).__name__}: {text};"
                              " reinstall the plugin or report it to its author") from exc
        if result is not None:
            return result
    return None


def collect_named(hook_name: str, what: str) -> dict[str, Any]:
    """Merge the name -> object dicts returned by a collecting hook.

    A name given by two plugins is left out of the table and recorded (both plugins show it in ``mixzoo plugins``);
    only :func:`lookup` of that very name fails, with an error naming both. Every other name keeps working.
    """
    merged: dict[str, Any] = {}
    owners: dict[str, list[str]] = {}
    for plugin_name, result in collect(hook_name):
        if not isinstance(result, dict):
            record_failure(plugin_name, f"{hook_name} returned {type(result).__name__}, expected dict")
            continue
        for key, value in result.items():
            owners.setdefault(key, []).append(plugin_name)
            merged.setdefault(key, value)
    clashes = {key: names for key, names in owners.items() if len(names) > 1}
    for key, names in clashes.items():
        del merged[key]
        for plugin_name in names:
            others = ", ".join(repr(n) for n in names if n != plugin_name)
            record_failure(plugin_name, f"{what} {key!r} left out: plugin {others} provides it too")
    _collisions[hook_name] = clashes
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


_DERIVED: list[Any] = []  # cached tables other core modules build from hook results (the registry)
_ENTRIES: dict[str, Any] = {}  # label -> fn(): {plugin name: [entry names]} for `mixzoo plugins` (the models)


def register_derived(table: Any, *, name: str, label: str, entries: Any) -> None:
    """A cached table another module builds from hook results (``functools.cache``: the registry of model
    specs): cleared with the plugin tables, built by ``mixzoo plugins`` (its errors recorded as ``name``'s), and
    ``entries()`` -> ``{plugin: [names]}`` shown under ``label``. Keeps this module free of imports of its users."""
    table.derived_name = name
    if table not in _DERIVED:
        _DERIVED.append(table)
    _ENTRIES[label] = entries


_CACHED = [clamp_functions, attacks, calibration_optimizers, datasets, mixing_methods, published_cards]
_TABLES = {"clamp": (clamp_functions, "mixzoo_clamp_functions", "clamp"),
           "attack": (attacks, "mixzoo_attacks", "attack"),
           "optimizer": (calibration_optimizers, "mixzoo_calibration_optimizers", "calibration optimizer"),
           "dataset": (datasets, "mixzoo_datasets", "dataset"),
           "method": (mixing_methods, "mixzoo_mixing_methods", "mixing method"),
           "card": (published_cards, "mixzoo_cards", "card")}


def lookup(kind: str, name: str) -> Any:
    """Find a clamp / attack / calibration optimizer / dataset by name, suggesting close names if unknown."""
    from mixzoo.core.errors import UnknownNameError

    merge, hook, what = _TABLES[kind]
    table = merge()
    if name not in table:
        clash = _collisions.get(hook, {}).get(name)
        if clash:
            raise PluginError(collision_message(what, name, clash))
        raise UnknownNameError(kind, name, table, failed=plugin_failures())
    return table[name]


def plugin_infos() -> list[PluginInfo]:
    """One :class:`PluginInfo` per loaded or failed plugin, for ``mixzoo plugins``; never raises for a plugin's fault
    (a failed plugin, or the entries of one that were left out, show as its ``error``)."""
    from mixzoo.core.errors import MixzooError

    pm = get_plugin_manager()
    _build_tables()
    entries: dict[str, dict[str, list[str]]] = {}
    for label, fn in _ENTRIES.items():
        try:
            entries[label] = fn()
        except MixzooError:  # recorded by _build_tables
            entries[label] = {}
    infos: dict[str, PluginInfo] = {}
    for name, plugin in pm.list_name_plugin():
        if name is None or plugin is None:
            continue
        info = PluginInfo(name, _versions.get(name, "?"), getattr(plugin, "__name__", type(plugin).__name__))
        for label, by_plugin in entries.items():
            if by_plugin.get(name):
                info.provides[label] = by_plugin[name]
        for hook, label in [("mixzoo_clamp_functions", "clamps"), ("mixzoo_attacks", "attacks"),
                            ("mixzoo_calibration_optimizers", "optimizers"), ("mixzoo_datasets", "datasets"),
                            ("mixzoo_mixing_methods", "methods"), ("mixzoo_cli_commands", "commands"),
                            ("mixzoo_cards", "cards")]:
            impl = getattr(plugin, hook, None)
            if impl is not None:
                try:
                    result = impl()
                except Exception as exc:  # noqa: BLE001
                    record_failure(name, f"{hook}: {type(exc).__name__}: {exc}")
                    continue
                if isinstance(result, dict):  # anything else is recorded by collect_named
                    info.provides[label] = sorted(result)
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
