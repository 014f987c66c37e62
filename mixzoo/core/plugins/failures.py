"""Run-time faults of plugins: remembered in the process and, for installed plugins, in ``failed-plugins.json`` in
the cache directory (per plugin version, the last five), so that ``mixzoo plugins`` shows them in later processes."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from mixzoo.core.plugins.manager import get_plugin_manager
from mixzoo.core.plugins.state import STATE


def exception_text(exc: BaseException) -> str:
    """``Type: message`` on one line."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split()) or '(no message)'}"


def failure_file() -> str:
    """Where run-time faults of installed plugins are kept: ``failed-plugins.json`` in the cache directory
    (``$MIXZOO_CACHE``, else ``~/.cache/mixzoo``, as :func:`mixzoo.core.cache.default_cache_dir`)."""
    from mixzoo.core.paths import cache_folder

    return os.path.join(cache_folder(), "failed-plugins.json")


def read_kept() -> dict[str, Any]:
    """The kept faults file (an unreadable or malformed file reads as empty: it is a cache)."""
    from mixzoo.core.errors import MixzooError
    from mixzoo.core.reading import read_data

    try:
        data = read_data(failure_file(), "json", limit=1 << 20, what="plugin faults file")
    except (OSError, MixzooError):
        return {}
    return data if isinstance(data, dict) else {}


def record_runtime_failure(plugin_name: str, doing: str, exc: BaseException) -> None:
    """Remember that ``plugin_name`` raised ``exc`` while ``doing``: for this process and, for an entry point's
    plugin, in :func:`failure_file` for later ones (best effort)."""
    reason = f"{doing}: {exception_text(exc)}"
    seen = STATE.runtime.setdefault(plugin_name, [])
    if reason not in seen:
        seen.append(reason)
    if plugin_name not in STATE.entry_points:
        return
    kept = read_kept()
    entry = kept.get(plugin_name)
    version = STATE.versions.get(plugin_name, "?")
    if not isinstance(entry, dict) or entry.get("version") != version:
        entry = {"version": version, "faults": {}}
    faults = entry.get("faults") if isinstance(entry.get("faults"), dict) else {}
    faults = {k: v for k, v in faults.items() if k != reason}
    faults[reason] = time.strftime("%Y-%m-%d %H:%M", time.localtime())
    entry["faults"] = dict(list(faults.items())[-5:])
    kept[plugin_name] = entry
    path = failure_file()
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(kept, fh, indent=1)
        os.replace(tmp, path)
    except OSError:  # a read-only cache: the fault is still shown in this process
        pass


def runtime_failures() -> dict[str, list[str]]:
    """Faults plugins showed at run time (a loader, method or attack that raised): this process's, and those kept
    for each plugin's installed version (with when they were last seen)."""
    get_plugin_manager()
    out = {name: list(reasons) for name, reasons in STATE.runtime.items()}
    for name, entry in read_kept().items():
        if name not in STATE.entry_points or not isinstance(entry, dict) or \
                entry.get("version") != STATE.versions.get(name):
            continue
        faults = entry.get("faults")
        for reason, when in (faults.items() if isinstance(faults, dict) else []):
            if reason not in out.get(name, []):
                out.setdefault(name, []).append(f"{reason} (last seen {when})")
    return out
