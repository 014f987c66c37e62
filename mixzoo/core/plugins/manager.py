"""The plugin manager: every entry point of group ``mixzoo`` loaded one by one, built-ins and third parties alike."""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata as md
import time
import warnings
from collections.abc import Iterator

import pluggy

from mixzoo.core import hookspecs
from mixzoo.core.plugins.state import PROJECT, STATE

hookimpl = pluggy.HookimplMarker(PROJECT)


def entry_points() -> list[md.EntryPoint]:
    """The installed entry points of group ``mixzoo``, by name (read from distribution metadata; nothing imported)."""
    return sorted(md.entry_points(group=PROJECT), key=lambda e: e.name)


@contextlib.contextmanager
def noting_deprecations(plugin_name: str) -> Iterator[None]:
    """Record the :class:`DeprecationWarning` s mixzoo gives while ``plugin_name``'s code runs in the block (so that
    ``mixzoo plugins`` shows them, although Python hides such warnings by default), then issue every warning
    caught as it would have been."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for w in caught:
        if issubclass(w.category, DeprecationWarning) and str(w.message).startswith("mixzoo.") or \
                "mixzoo.methods.MixingMethod" in str(w.message):
            STATE.record_deprecation(plugin_name, str(w.message))
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)


@functools.cache
def get_plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager, every installed ``mixzoo`` entry point loaded one by one (not
    ``load_setuptools_entrypoints``' all-or-nothing): a plugin's import error is reported by name, the others load."""
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(hookspecs)
    for ep in entry_points():
        if pm.get_plugin(ep.name) is not None or pm.is_blocked(ep.name):
            continue
        try:
            start = time.perf_counter()
            with noting_deprecations(ep.name):
                plugin = ep.load()
            STATE.import_seconds[ep.name] = time.perf_counter() - start
            pm.register(plugin, name=ep.name)
        except BaseException as exc:  # noqa: BLE001 - a plugin's import is contained, sys.exit and Ctrl-C included
            STATE.import_failed.add(ep.name)
            STATE.record_failure(ep.name, import_failure(exc))
            continue
        STATE.versions[ep.name] = ep.dist.version if ep.dist is not None else "?"
        STATE.entry_points.add(ep.name)
        if ep.dist is not None and (ep.dist.metadata["Name"] or "").lower() == PROJECT:  # a built-in plugin
            STATE.builtin.add(ep.name)
    return pm


def import_failure(exc: BaseException) -> str:
    """How a plugin's failed import is shown (``mixzoo plugins``): ``Type: message``; a ``SystemExit`` (the plugin
    called ``sys.exit``) and a ``KeyboardInterrupt`` raised by its import are named as such, since they say
    nothing themselves."""
    if isinstance(exc, SystemExit):
        return f"SystemExit: the plugin called sys.exit({exc.code!r}) while being imported"
    if isinstance(exc, KeyboardInterrupt):
        return "KeyboardInterrupt: the plugin's import raised KeyboardInterrupt (or was interrupted)"
    return f"{type(exc).__name__}: {exc}"

