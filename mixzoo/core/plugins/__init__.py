"""The plugin manager: built-ins and third parties both arrive through the entry-point group ``mixzoo``.

A plugin that fails to import, or whose hook raises, is recorded in :func:`plugin_failures` and skipped, so one
broken package never takes the rest of mixzoo down. ``mixzoo plugins`` shows both lists.

Isolation is a rule applied here, where hooks are called and plugin objects collected, not at each call site:

* an exception from a hook, a model loader, or a third-party plugin's method (``fit``, ``build``, ...), attack,
  dataset or calibration optimizer is one line naming the plugin and what it was doing
  (:class:`~mixzoo.core.errors.PluginError`); a :class:`~mixzoo.core.errors.MixzooError` it raises on purpose
  passes unchanged. Such run-time faults are remembered (:func:`runtime_failures`, kept in the cache directory for
  the installed plugin version) so that ``mixzoo plugins`` shows them in a later process too. ``MIXZOO_DEBUG=1``
  lets the original exception through, with its traceback, for the plugin's author;
* a model's loader is picked by its source kind from the table of the hook ``mixzoo_model_sources``
  (:func:`load_network`), so a loader sees only its own kinds and its errors are never passed over; a resolver
  (``firstresult`` hook) that raises for a name another plugin resolves costs nothing: the next plugin answers;
* every kind of entry (models of ``registry.toml`` and of plugins, architectures, commands, cards, attacks,
  methods, clamps, optimizers, datasets, model sources) is one table of :data:`KINDS`, merged by one rule
  (:func:`merge`): a name a built-in provides stays the built-in's (a third party's entry of that name is left out,
  with a warning naming both); a name two third parties provide is left out for both, and using it is an error
  naming both. Tables are built on first use (:func:`table`) and rebuilt after :func:`clear_caches`.

The modules, by job: :mod:`~mixzoo.core.plugins.state` (what the process remembers, one object),
:mod:`~mixzoo.core.plugins.manager` (the pluggy manager, entry points, versions from distribution metadata),
:mod:`~mixzoo.core.plugins.hooks` (calling hooks plugin by plugin), :mod:`~mixzoo.core.plugins.guard` (third-party
calls as one-line errors), :mod:`~mixzoo.core.plugins.failures` (run-time faults, kept on disk),
:mod:`~mixzoo.core.plugins.tables` (the table of collecting hooks and their merge),
:mod:`~mixzoo.core.plugins.sources` (a model's loader by its source kind) and :mod:`~mixzoo.core.plugins.listing`
(``mixzoo plugins``).
"""

from __future__ import annotations

from mixzoo.core.plugins.failures import runtime_failures
from mixzoo.core.plugins.hooks import collect, first_answer, first_result
from mixzoo.core.plugins.listing import PluginInfo, plugin_infos
from mixzoo.core.plugins.manager import get_plugin_manager, hookimpl
from mixzoo.core.plugins.sources import load_network
from mixzoo.core.plugins.state import STATE
from mixzoo.core.plugins.tables import (
    KINDS,
    clear_caches,
    collision_message,
    collisions,
    datasets,
    failures_so_far,
    lookup,
    merge,
    mixing_methods,
    plugin_failures,
    provider,
    published_cards,
    record_failure,
    register_plugin,
    table,
    unregister_plugin,
)

__all__ = [
    "KINDS", "STATE", "PluginInfo", "clear_caches", "collect", "collision_message", "collisions", "datasets",
    "failures_so_far", "first_answer", "first_result", "get_plugin_manager", "hookimpl", "load_network", "lookup",
    "merge", "mixing_methods", "plugin_failures", "plugin_infos", "provider", "published_cards", "record_failure",
    "register_plugin", "runtime_failures", "table", "unregister_plugin",
]
