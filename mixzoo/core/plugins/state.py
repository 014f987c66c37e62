"""Everything the plugin machinery remembers in a process, in one object (:data:`STATE`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PROJECT = "mixzoo"


@dataclass
class PluginState:
    """What the plugin manager knows about the plugins of this process.

    ``failures``: plugin name -> what went wrong (several reasons kept in order); ``import_failed``: entry points
    that failed to import (kept for the process: their failures survive :func:`~mixzoo.core.plugins.clear_caches`);
    ``builtin``: plugins shipped in the mixzoo distribution; ``entry_points``: plugins installed through an entry
    point (their run-time faults are kept on disk); ``versions``: plugin name -> version; ``runtime``: faults seen
    at run time in this process; ``tables``: kind -> its merged table (:class:`~mixzoo.core.plugins.tables.Merged`:
    entries, owners, collisions, names by plugin); ``deprecations``: plugin name -> the deprecation warnings mixzoo
    gave it (a moved name it imports, an old-style entry it provides); ``import_seconds``: entry-point name
    -> seconds its module took to import.
    """

    failures: dict[str, list[str]] = field(default_factory=dict)
    import_failed: set[str] = field(default_factory=set)
    builtin: set[str] = field(default_factory=set)
    entry_points: set[str] = field(default_factory=set)
    versions: dict[str, str] = field(default_factory=dict)
    runtime: dict[str, list[str]] = field(default_factory=dict)
    tables: dict[str, dict[str, Any]] = field(default_factory=dict)
    deprecations: dict[str, list[str]] = field(default_factory=dict)
    import_seconds: dict[str, float] = field(default_factory=dict)

    def record_deprecation(self, plugin_name: str, message: str) -> None:
        """Note that ``plugin_name`` uses a deprecated name of mixzoo (``mixzoo plugins`` shows it)."""
        seen = self.deprecations.setdefault(plugin_name, [])
        if message not in seen:
            seen.append(message)

    def record_failure(self, plugin_name: str, reason: str) -> None:
        """Note that ``plugin_name`` failed (entirely or in part); ``mixzoo plugins`` shows every reason."""
        reasons = self.failures.setdefault(plugin_name, [])
        if reason not in reasons:
            reasons.append(reason)

    def failure_texts(self) -> dict[str, str]:
        """Plugin name -> its reasons, ``"; "``-joined."""
        return {name: "; ".join(reasons) for name, reasons in self.failures.items() if reasons}


STATE = PluginState()
