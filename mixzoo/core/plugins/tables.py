"""Merged hook tables: every collecting hook described once in :data:`KINDS`, merged name by name.

A name a built-in plugin and third parties both give stays the built-in's (:func:`builtin_wins`). A name given by
two third parties is left out of the table and recorded (both plugins show it in ``mixzoo plugins``); only
:func:`lookup` of that very name fails, with an error naming both. Third parties' objects are guarded
(:mod:`mixzoo.core.plugins.guard`).
"""

from __future__ import annotations

import importlib
import warnings
from dataclasses import dataclass
from typing import Any

from mixzoo.core.errors import MixzooError, PluginError, PluginWarning, UnknownNameError
from mixzoo.core.plugins.guard import guard
from mixzoo.core.plugins.hooks import collect
from mixzoo.core.plugins.manager import get_plugin_manager, noting_deprecations
from mixzoo.core.plugins.state import STATE


@dataclass(frozen=True)
class Kind:
    """One collecting hook returning ``{name: object}``: ``hook``, the ``label`` ``mixzoo plugins`` lists its names
    under, ``what`` one entry is called in messages, how third parties' entries are guarded (``guard``: ``None``,
    ``"object"``, ``"factory"``, ``"factory+result"``; :func:`~mixzoo.core.plugins.guard.guard`) and, for entries
    written against an older contract, the function that adapts them (``adapt``: ``"module:function"`` of the layer
    that defines the contract, imported when the table is first built, so that the core imports no method)."""

    hook: str
    label: str
    what: str
    guard: str | None = None
    adapt: str | None = None


# clamps are left unguarded: plain tensor functions called inside every forward pass, compared by identity
KINDS: dict[str, Kind] = {
    "clamp": Kind("mixzoo_clamp_functions", "clamps", "clamp"),
    "attack": Kind("mixzoo_attacks", "attacks", "attack", "factory+result"),
    "optimizer": Kind("mixzoo_calibration_optimizers", "optimizers", "calibration optimizer", "factory"),
    "dataset": Kind("mixzoo_datasets", "datasets", "dataset", "factory"),
    "method": Kind("mixzoo_mixing_methods", "methods", "mixing method", "object",
                   adapt="mixzoo.methods.base:adapt_method"),
    "card": Kind("mixzoo_cards", "cards", "card"),
    # loaders are called through guarded_call by mixzoo.core.plugins.sources, which names the model being loaded
    "source": Kind("mixzoo_model_sources", "loads source kinds", "model source"),
    "command": Kind("mixzoo_cli_commands", "commands", "CLI command"),
}
_BY_HOOK = {k.hook: k for k in KINDS.values()}


def collision_message(what: str, name: str, plugins: list[str]) -> str:
    """The one-line error for a name that several plugins provide."""
    quoted = [repr(p) for p in plugins]
    both = f"both plugin {quoted[0]} and plugin {quoted[1]}" if len(quoted) == 2 else \
        f"plugins {', '.join(quoted[:-1])} and {quoted[-1]}"
    return f"{what} name {name!r} is provided by {both}; uninstall one or rename the {what}"


def builtin_wins(what: str, claims: dict[str, list[str]], builtin: Any = ()) -> dict[str, str]:
    """For each name in ``claims`` (name -> the plugins providing it) that exactly one built-in plugin provides
    (or one of ``builtin``, e.g. the registry file): ``{name: that plugin}``. Every other claimant's entry is to be
    left out; each is recorded for ``mixzoo plugins`` and named, with the built-in, in a warning."""
    get_plugin_manager()
    winners: dict[str, str] = {}
    for key, names in claims.items():
        own = [n for n in dict.fromkeys(names) if n in STATE.builtin or n in builtin]
        if len(set(names)) < 2 or len(own) != 1:
            continue
        winners[key] = own[0]
        for loser in dict.fromkeys(n for n in names if n != own[0]):
            STATE.record_failure(loser, f"{what} {key!r} left out: the built-in {own[0]!r} provides it")
            warnings.warn(f"plugin {loser!r} provides {what} {key!r}, a name of the built-in {own[0]!r}: the built-in"
                          f" one is used and {loser!r}'s is left out; rename it in that plugin", PluginWarning,
                          stacklevel=2)
    return winners


def _adapt(kind: Kind | None, plugin_name: str, value: Any) -> Any:
    if kind is None or kind.adapt is None or plugin_name in STATE.builtin:
        return value
    module, _, function = kind.adapt.partition(":")
    with noting_deprecations(plugin_name):
        return getattr(importlib.import_module(module), function)(value, plugin_name)


def collect_named(hook_name: str, what: str) -> dict[str, Any]:
    """Merge the ``{name: object}`` dicts a collecting hook returns (module docstring); ``hook_name`` need not be
    in :data:`KINDS` (then nothing is guarded or adapted)."""
    kind = _BY_HOOK.get(hook_name)
    merged: dict[str, Any] = {}
    claims: dict[str, list[str]] = {}
    values: dict[tuple[str, str], Any] = {}
    provided: dict[str, list[str]] = {}
    for plugin_name, result in collect(hook_name):
        if not isinstance(result, dict):
            STATE.record_failure(plugin_name, f"{hook_name} returned {type(result).__name__}, expected dict")
            continue
        provided[plugin_name] = sorted(result)
        for key, value in result.items():
            value = _adapt(kind, plugin_name, value)
            claims.setdefault(key, []).append(plugin_name)
            values[(key, plugin_name)] = value
            merged.setdefault(key, guard(kind.guard if kind else None, f"{what} {key!r}", plugin_name, value))
    owners = {key: names[0] for key, names in claims.items()}
    clashes = {key: names for key, names in claims.items() if len(names) > 1}
    for key, winner in builtin_wins(what, clashes).items():
        merged[key], owners[key] = values[(key, winner)], winner
        del clashes[key]
    for key, names in clashes.items():
        del merged[key], owners[key]
        for plugin_name in names:
            others = ", ".join(repr(n) for n in names if n != plugin_name)
            STATE.record_failure(plugin_name, f"{what} {key!r} left out: plugin {others} provides it too")
    STATE.collisions[hook_name] = clashes
    STATE.owners[hook_name] = owners
    STATE.provided[hook_name] = provided
    return merged


def table(kind: str) -> dict[str, Any]:
    """The merged table of ``kind`` (a key of :data:`KINDS`), built on first use."""
    if kind not in STATE.tables:
        STATE.tables[kind] = collect_named(KINDS[kind].hook, KINDS[kind].what)
    return STATE.tables[kind]


def clamp_functions() -> dict[str, Any]:
    """All clamp functions by name."""
    return table("clamp")


def attacks() -> dict[str, Any]:
    """All attack factories by name."""
    return table("attack")


def calibration_optimizers() -> dict[str, Any]:
    """All calibration optimizers by name."""
    return table("optimizer")


def datasets() -> dict[str, Any]:
    """All dataset factories by name."""
    return table("dataset")


def mixing_methods() -> dict[str, Any]:
    """All mixing methods by name (:class:`mixzoo.methods.MixingMethod` objects)."""
    return table("method")


def published_cards() -> dict[str, Any]:
    """All published mix cards by name (paths of card files shipped with plugins)."""
    return table("card")


def model_sources() -> dict[str, Any]:
    """All model loaders by source kind (hook ``mixzoo_model_sources``)."""
    return table("source")


def provider(kind: str, name: str) -> tuple[str, Any] | None:
    """``(plugin, entry)`` for ``name`` in the table of ``kind`` (a key of :data:`KINDS`), or ``None`` when no plugin
    provides it; a name two plugins provide is the one-line :class:`~mixzoo.core.errors.PluginError` naming both."""
    found = table(kind)
    if name in found:
        return STATE.owners[KINDS[kind].hook][name], found[name]
    clash = STATE.collisions.get(KINDS[kind].hook, {}).get(name)
    if clash:
        raise PluginError(collision_message(KINDS[kind].what, name, clash))
    return None


def register_derived(derived: Any, *, name: str, label: str, entries: Any) -> None:
    """A cached table another module builds from hook results (``functools.cache``: the registry of model
    specs): cleared with the plugin tables, built by ``mixzoo plugins --check`` (its errors recorded as ``name``'s),
    and ``entries()`` -> ``{plugin: [names]}`` shown under ``label``. Keeps this package free of imports of its
    users."""
    derived.derived_name = name
    if derived not in STATE.derived:
        STATE.derived.append(derived)
    STATE.derived_entries[label] = entries


def register_plugin(plugin: Any, name: str | None = None) -> str:
    """Register a plugin object at run time (tests, notebooks); clears the merged caches."""
    name = get_plugin_manager().register(plugin, name=name)
    STATE.versions.setdefault(name, getattr(plugin, "__version__", "runtime"))
    clear_caches()
    return name


def unregister_plugin(name: str) -> None:
    """Remove a plugin registered with :func:`register_plugin`."""
    get_plugin_manager().unregister(name=name)
    STATE.runtime.pop(name, None)
    clear_caches()


def clear_caches() -> None:
    """Forget merged hook results (registry, clamps, attacks, ...) so they are rebuilt on next use; failures found
    while merging are forgotten with them (import failures stay)."""
    for derived in STATE.derived:
        derived.cache_clear()
    STATE.forget_merged()


def build_tables() -> None:
    """Merge every collected hook (so that every plugin failure is known); never raises for a plugin's fault."""
    for kind in KINDS:
        table(kind)
    for derived in STATE.derived:
        try:
            derived()
        except MixzooError as exc:  # e.g. the registry file itself (not a plugin); `mixzoo plugins` still answers
            STATE.record_failure(getattr(derived, "derived_name", derived.__name__), str(exc))


def plugin_failures() -> dict[str, str]:
    """Plugins that failed to import, whose hooks raised or returned the wrong type, or whose entries were left
    out (invalid, or a name another plugin also provides), with the reasons."""
    get_plugin_manager()
    build_tables()
    return STATE.failure_texts()


def failures_so_far() -> dict[str, str]:
    """The failures recorded until now (plugins that failed to import, and faults found in the tables built so
    far), without building the other tables: what a name lookup that has just built its own table may report."""
    get_plugin_manager()
    return STATE.failure_texts()


def record_failure(plugin_name: str, reason: str) -> None:
    """Note that ``plugin_name`` failed (entirely or in part); ``mixzoo plugins`` shows every reason."""
    STATE.record_failure(plugin_name, reason)


def lookup(kind: str, name: str) -> Any:
    """Find a clamp / attack / calibration optimizer / dataset / method / card by name, suggesting close names if
    unknown."""
    found = provider(kind, name)
    if found is None:
        raise UnknownNameError(kind, name, table(kind), failed=plugin_failures())
    return found[1]
