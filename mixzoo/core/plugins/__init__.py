"""The plugin manager: built-ins and third parties both arrive through the entry-point group ``mixzoo``.

Isolation is a rule applied here, where hooks are called and plugin objects collected, not at each call site: a
plugin that fails to import, or whose hook raises, is recorded (:func:`plugin_failures`) and skipped; a third
party's exception is one line naming it (:mod:`~mixzoo.core.plugins.guard`), remembered across processes
(:mod:`~mixzoo.core.plugins.failures`); a model's loader is picked by its source kind
(:mod:`~mixzoo.core.plugins.sources`); every kind of entry is one table of :data:`~mixzoo.core.plugins.tables.KINDS`,
merged by one rule. :mod:`~mixzoo.core.plugins.state` holds what the process remembers,
:mod:`~mixzoo.core.plugins.manager` the pluggy manager, :mod:`~mixzoo.core.plugins.listing` ``mixzoo plugins``.
"""

from __future__ import annotations

from mixzoo.core.plugins.failures import runtime_failures
from mixzoo.core.plugins.guard import first_result
from mixzoo.core.plugins.listing import PluginInfo, plugin_infos
from mixzoo.core.plugins.manager import get_plugin_manager, hookimpl
from mixzoo.core.plugins.sources import load_network
from mixzoo.core.plugins.tables import (
    clear_caches,
    lookup,
    plugin_failures,
    provider,
    register_plugin,
    table,
    unregister_plugin,
)

__all__ = ["PluginInfo", "clear_caches", "first_result", "get_plugin_manager", "hookimpl", "load_network", "lookup",
           "plugin_failures", "plugin_infos", "provider", "register_plugin", "runtime_failures", "table",
           "unregister_plugin"]
