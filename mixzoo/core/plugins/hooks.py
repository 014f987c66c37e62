"""Calling hooks plugin by plugin, so that one plugin's fault costs only that plugin."""

from __future__ import annotations

from typing import Any

from mixzoo.core.errors import MixzooError
from mixzoo.core.plugins.failures import record_runtime_failure
from mixzoo.core.plugins.guard import debug, file_problem, plugin_error
from mixzoo.core.plugins.manager import get_plugin_manager
from mixzoo.core.plugins.state import STATE


def collect(hook_name: str) -> list[tuple[str, Any]]:
    """Call a collecting hook on every plugin separately; return ``(plugin_name, result)`` pairs.

    A plugin whose hook raises is recorded as failed and skipped.
    """
    out: list[tuple[str, Any]] = []
    for plugin_name, plugin in get_plugin_manager().list_name_plugin():
        impl = getattr(plugin, hook_name, None)
        if impl is None or plugin_name is None:
            continue
        try:
            result = impl()
        except Exception as exc:  # noqa: BLE001 - contain third-party failures
            STATE.record_failure(plugin_name, f"{hook_name}: {type(exc).__name__}: {exc}")
            continue
        if result is not None:
            out.append((plugin_name, result))
    return out


def first_result(hook_name: str, doing: str, **kwargs: Any) -> Any:
    """The answer of :func:`first_answer`, without the plugin that gave it (``None`` when no plugin answers)."""
    answer = first_answer(hook_name, doing, **kwargs)
    return None if answer is None else answer[1]


def first_answer(hook_name: str, doing: str, **kwargs: Any) -> tuple[str, Any] | None:
    """Call a ``firstresult`` hook in pluggy's order (first non-``None`` answer wins), but knowing which plugin
    answers (``(plugin_name, answer)``) and passing over a plugin whose hook raises.

    pluggy's own firstresult call stops at the first exception, so a resolver that raises for a name it does not
    own would break the names other plugins resolve; here such a plugin is recorded
    (:func:`~mixzoo.core.plugins.runtime_failures`) and the next one answers. When no plugin answers, the first
    exception is raised: a :class:`~mixzoo.core.errors.MixzooError` (which already reads as one line) as it is, any
    other as a one-line :class:`~mixzoo.core.errors.PluginError` naming the plugin and ``doing`` (e.g. "resolve
    model name 'x'")."""
    first: BaseException | None = None
    failed: list[tuple[str, BaseException]] = []
    for impl in reversed(getattr(get_plugin_manager().hook, hook_name).get_hookimpls()):
        if impl.hookwrapper or impl.wrapper:
            continue
        try:
            result = impl.function(*(kwargs[name] for name in impl.argnames))
        except MixzooError as exc:
            failed.append((impl.plugin_name, exc))
            first = first or exc
            continue
        except Exception as exc:  # noqa: BLE001 - a third party's bug must not become a traceback
            if debug():
                raise
            problem = file_problem(impl.plugin_name, doing, exc)
            if problem is not None:  # a damaged file the plugin read: the user's, not the plugin's fault
                raise problem from exc
            failed.append((impl.plugin_name, exc))
            first = first or plugin_error(impl.plugin_name, doing, exc)
            continue
        if result is not None:
            for plugin_name, exc in failed:  # it raised for what another plugin handles: its fault, shown later
                record_runtime_failure(plugin_name, f"{doing} (another plugin handles it)", exc)
            return impl.plugin_name, result
    if first is not None:
        for plugin_name, exc in failed:
            if not isinstance(exc, MixzooError):
                record_runtime_failure(plugin_name, doing, exc)
        raise first
    return None
