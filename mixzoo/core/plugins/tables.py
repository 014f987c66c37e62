"""Merged hook tables: every collecting hook described once in :data:`KINDS`, merged name by name.

A name a built-in plugin and third parties both give stays the built-in's (:func:`merge`). A name given by
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
from mixzoo.core.plugins.guard import collect, guard
from mixzoo.core.plugins.manager import get_plugin_manager, noting_deprecations
from mixzoo.core.plugins.state import STATE


@dataclass(frozen=True)
class Kind:
    """One collecting hook merged into one table: ``hook``, the ``label`` ``mixzoo plugins`` lists under, ``what``
    an entry is called in messages, ``guard`` (:func:`~mixzoo.core.plugins.guard.guard`), and three functions named
    ``"module:function"``, imported when the table is first built (this package imports none of its users):
    ``adapt`` (entry, plugin) -> the entry checked or read from an older contract; ``read`` (plugin, hook result)
    -> ``{name: entry}``, for a hook that returns something else (faults recorded, left out); ``base`` () ->
    ``(owner, {name: entry})``, built-in entries before every plugin's (the registry file). ``aliases``: each
    entry's ``aliases`` name it too."""

    hook: str
    label: str
    what: str
    guard: str | None = None
    adapt: str | None = None
    read: str | None = None
    base: str | None = None
    aliases: bool = False


# clamps are left unguarded: plain tensor functions called inside every forward pass, compared by identity; CLI
# commands too: typer reads their signatures, and mixzoo.core.commands.command makes their errors one line
KINDS: dict[str, Kind] = {
    "model": Kind("mixzoo_model_specs", "models", "model", read="mixzoo.core.registry:plugin_specs",
                  base="mixzoo.core.registry:file_specs", aliases=True),
    "architecture": Kind("mixzoo_architectures", "architectures", "architecture", "factory"),
    "clamp": Kind("mixzoo_clamp_functions", "clamps", "clamp"),
    "attack": Kind("mixzoo_attacks", "attacks", "attack", "factory+result"),
    "optimizer": Kind("mixzoo_calibration_optimizers", "optimizers", "calibration optimizer", "factory"),
    "dataset": Kind("mixzoo_datasets", "datasets", "dataset", "factory"),
    "method": Kind("mixzoo_mixing_methods", "methods", "mixing method", "object",
                   adapt="mixzoo.methods.base:check_method"),
    "card": Kind("mixzoo_cards", "cards", "card"),
    # loaders are called through guarded_call by mixzoo.core.plugins.sources, which names the model being loaded
    "source": Kind("mixzoo_model_sources", "loads source kinds", "model source"),
    "command": Kind("mixzoo_cli_commands", "commands", "CLI command"),
}


def collision_message(what: str, name: str, plugins: list[str]) -> str:
    """The one-line error for a name that several plugins provide."""
    quoted = [repr(p) for p in plugins]
    both = f"both plugin {quoted[0]} and plugin {quoted[1]}" if len(quoted) == 2 else \
        f"plugins {', '.join(quoted[:-1])} and {quoted[-1]}"
    return f"{what} name {name!r} is provided by {both}; uninstall one or rename the {what}"


def _function(path: str) -> Any:
    module, _, function = path.partition(":")
    return getattr(importlib.import_module(module), function)


@dataclass
class Merged:
    """One kind's merged table: ``entries`` by name, the ``owners`` of the names kept, the names several plugins
    provide (``collisions``, name -> those plugins) and the names each plugin provides (``provided``)."""

    entries: dict[str, Any]
    owners: dict[str, str]
    collisions: dict[str, list[str]]
    provided: dict[str, list[str]]


def merge(what: str, given: list[tuple[str, dict[str, Any]]], builtin: Any = (), aliases: bool = False) -> Merged:
    """Merge ``(owner, {name: entry})`` pairs name by name: a name exactly one built-in (a built-in plugin, or one of
    ``builtin``) and others give stays the built-in's, the others left out with a warning naming both; any other
    name given more than once is left out for all, each owner recorded. ``aliases``: as :class:`Kind`'s."""
    get_plugin_manager()
    claims: dict[str, list[tuple[str, Any]]] = {}
    for owner, entries in given:
        for key, value in entries.items():
            for name in dict.fromkeys((key, *(getattr(value, "aliases", ()) if aliases else ()))):
                claims.setdefault(name, []).append((owner, value))
    out = Merged({}, {}, {}, {owner: sorted(entries) for owner, entries in given})
    for name, claimants in claims.items():
        owners = [owner for owner, _ in claimants]
        own = [o for o in dict.fromkeys(owners) if o in STATE.builtin or o in builtin]
        if len(claimants) > 1 and (len(set(owners)) < 2 or len(own) != 1):
            out.collisions[name] = owners
            for owner in owners:
                others = ", ".join(repr(n) for n in owners if n != owner) or f"{owner!r} (twice)"
                STATE.record_failure(owner, f"{what} {name!r} left out: plugin {others} provides it too")
            continue
        winner = own[0] if len(claimants) > 1 else owners[0]
        for loser in dict.fromkeys(o for o in owners if o != winner):
            STATE.record_failure(loser, f"{what} {name!r} left out: the built-in {winner!r} provides it")
            warnings.warn(f"plugin {loser!r} provides {what} {name!r}, a name of the built-in {winner!r}: the"
                          f" built-in one is used and {loser!r}'s is left out; rename it in that plugin",
                          PluginWarning, stacklevel=3)
        out.entries[name] = next(value for owner, value in claimants if owner == winner)
        out.owners[name] = winner
    return out


def _plugin_entries(kind: Kind) -> list[tuple[str, dict[str, Any]]]:
    """Each plugin's entries of ``kind``, read, adapted and guarded (a hook result of the wrong type recorded and
    left out)."""
    read = _function(kind.read) if kind.read else None
    adapt = _function(kind.adapt) if kind.adapt else None
    given = []
    for plugin_name, result in collect(kind.hook):
        if read is not None:
            result = read(plugin_name, result)
        elif not isinstance(result, dict):
            STATE.record_failure(plugin_name, f"{kind.hook} returned {type(result).__name__}, expected dict")
            continue
        if adapt is not None and plugin_name not in STATE.builtin:
            with noting_deprecations(plugin_name):
                result = {key: adapt(value, plugin_name) for key, value in result.items()}
        given.append((plugin_name, {key: guard(kind.guard, f"{kind.what} {key!r}", plugin_name, value)
                                    for key, value in result.items()}))
    return given


def merged(kind: str) -> Merged:
    """The merged table of ``kind`` (a key of :data:`KINDS`) with what merging found, built on first use."""
    if kind not in STATE.tables:
        spec = KINDS[kind]
        base = [_function(spec.base)()] if spec.base else []
        STATE.tables[kind] = merge(spec.what, [*base, *_plugin_entries(spec)], builtin={o for o, _ in base},
                                   aliases=spec.aliases)
    return STATE.tables[kind]


def table(kind: str) -> dict[str, Any]:
    """The entries of ``kind`` (a key of :data:`KINDS`) by name."""
    return merged(kind).entries


def collisions(kind: str) -> dict[str, list[str]]:
    """The names of ``kind`` (a key of :data:`KINDS`) several plugins provide, each with those plugins."""
    return merged(kind).collisions


def provider(kind: str, name: str) -> tuple[str, Any] | None:
    """``(plugin, entry)`` for ``name`` in the table of ``kind`` (a key of :data:`KINDS`), or ``None`` when no plugin
    provides it; a name two plugins provide is the one-line :class:`~mixzoo.core.errors.PluginError` naming both."""
    found = merged(kind)
    if name in found.entries:
        return found.owners[name], found.entries[name]
    clash = found.collisions.get(name)
    if clash:
        raise PluginError(collision_message(KINDS[kind].what, name, clash))
    return None


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
    STATE.tables.clear()
    for name in [n for n in STATE.failures if n not in STATE.import_failed]:
        del STATE.failures[name]


def build_tables() -> None:
    """Merge every collected hook (so that every plugin failure is known); never raises for a plugin's fault."""
    for kind in KINDS:
        try:
            table(kind)
        except MixzooError as exc:  # e.g. the registry file itself (not a plugin); `mixzoo plugins` still answers
            STATE.record_failure(KINDS[kind].label, str(exc))


def plugin_failures() -> dict[str, str]:
    """Plugins that failed to import, whose hooks raised or returned the wrong type, or whose entries were left
    out (invalid, or a name another plugin also provides), with the reasons."""
    get_plugin_manager()
    build_tables()
    return STATE.failure_texts()


def lookup(kind: str, name: str) -> Any:
    """Find a clamp / attack / calibration optimizer / dataset / method / card by name, suggesting close names if
    unknown."""
    found = provider(kind, name)
    if found is None:
        raise UnknownNameError(kind, name, table(kind), failed=plugin_failures())
    return found[1]
