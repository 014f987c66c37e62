"""Isolation of third-party code: an exception from a plugin's hook, loader, method, attack, dataset or optimizer
becomes one :class:`~mixzoo.core.errors.PluginError` line naming the plugin and what it was doing (a
:class:`~mixzoo.core.errors.MixzooError` raised on purpose passes unchanged); ``MIXZOO_DEBUG=1`` lets the original
exception through, with its traceback. Hooks are called plugin by plugin (:func:`collect`, :func:`first_answer`), so
that one plugin's fault costs only that plugin."""

from __future__ import annotations

import functools
import os
from typing import Any

from mixzoo.core.errors import MixzooError, PluginError
from mixzoo.core.plugins.failures import exception_text, record_runtime_failure
from mixzoo.core.plugins.manager import get_plugin_manager
from mixzoo.core.plugins.state import STATE


def debug() -> bool:
    """Whether ``MIXZOO_DEBUG`` asks for plugins' original exceptions."""
    return os.environ.get("MIXZOO_DEBUG", "") not in ("", "0")


def plugin_error(plugin_name: str, doing: str, exc: BaseException) -> PluginError:
    """The one-line error for an exception ``exc`` raised by plugin ``plugin_name`` while ``doing`` something."""
    fix = ("report it to mixzoo (MIXZOO_DEBUG=1 shows the traceback)" if plugin_name in STATE.builtin else
           "reinstall the plugin or report it to its author (MIXZOO_DEBUG=1 shows the traceback)")
    error = PluginError(f"plugin {plugin_name!r} failed to {doing}: {exception_text(exc)}; {fix}")
    error.__cause__ = exc
    return error


def guarded_call(plugin_name: str, doing: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, with any exception other than a :class:`~mixzoo.core.errors.MixzooError` (or a
    ``KeyboardInterrupt``) recorded and raised as the one-line :func:`plugin_error`."""
    try:
        return fn(*args, **kwargs)
    except MixzooError:
        raise
    except Exception as exc:  # noqa: BLE001 - contain third-party failures
        if debug():
            raise
        problem = file_problem(plugin_name, doing, exc) or out_of_memory(exc, doing)
        if problem is not None:  # a damaged file the plugin read: the user's, not the plugin's fault
            raise problem from exc
        record_runtime_failure(plugin_name, doing, exc)
        raise plugin_error(plugin_name, doing, exc) from exc


_FILE_ERROR_MODULES = ("safetensors", "huggingface_hub")


def file_problem(plugin_name: str, doing: str, exc: BaseException) -> Any:
    """The one-line :class:`~mixzoo.core.errors.FileProblemError` for an exception safetensors or huggingface_hub
    raised about a file (a truncated or foreign weights file, a damaged cache entry), or ``None`` for any other
    exception: such a file is the user's to fetch again, never a plugin's fault."""
    from mixzoo.core.errors import FileProblemError

    module = type(exc).__module__ or ""
    if not module.startswith(_FILE_ERROR_MODULES):
        return None
    text = " ".join(str(exc).split())[:200] or type(exc).__name__
    return FileProblemError(f"could not {doing}: a file plugin {plugin_name!r} read is damaged or not what its name"
                            f" says ({type(exc).__name__}: {text}); delete that file and fetch it again (for the"
                            " Hugging Face cache: `huggingface-cli download REPO --force-download`)")


def out_of_memory(exc: BaseException, doing: str = "run") -> Any:
    """The one-line :class:`~mixzoo.core.errors.InputError` for memory that cannot be allocated (``MemoryError``,
    torch's CPU allocator refusal, a CUDA out-of-memory error), or ``None`` for any other exception: the size
    asked for is the user's to lower, never a plugin's fault."""
    import re

    from mixzoo.core.errors import InputError

    text = str(exc)
    if not (isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError"
            or isinstance(exc, RuntimeError) and ("can't allocate memory" in text or "not enough memory" in text)):
        return None
    asked = re.search(r"allocate (\d+) bytes", text) or re.search(r"allocate ([0-9.]+ [KMGTP]?i?B)", text)
    size = f" ({asked.group(1)}{' bytes' if asked.group(1).isdigit() else ''} were asked)" if asked else ""
    return InputError(f"not enough memory to {doing}{size}; lower --batch-size, --n or the attack's iteration,"
                      " restart or query counts (-O n_iter=..., see --show-options)")


_VERBS = {"run": "run", "fit": "fit", "build": "build", "__call__": "create"}


class Guarded:
    """A third party's plugin object (an attack, a mixing method, ...) whose every method call goes through
    :func:`guarded_call`; attributes read as the object's, and ``isinstance`` sees the object's class."""

    def __init__(self, target: Any, plugin_name: str, what: str):
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_plugin", plugin_name)
        object.__setattr__(self, "_what", what)

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # isinstance(guarded, MixingMethod) holds when the object is one
        return type(object.__getattribute__(self, "_target"))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") and name in ("_target", "_plugin", "_what"):
            raise AttributeError(name)
        value = getattr(self._target, name)
        if not callable(value) or isinstance(value, type) or name.startswith("__"):
            return value
        doing = f"{_VERBS.get(name, f'call {name}() of')} {self._what}"

        @functools.wraps(value)
        def call(*args: Any, **kwargs: Any) -> Any:
            return guarded_call(self._plugin, doing, value, *args, **kwargs)

        return call

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._target, name, value)

    def __repr__(self) -> str:
        return repr(self._target)

    def __eq__(self, other: Any) -> bool:
        return self._target == (other._target if isinstance(other, Guarded) else other)

    def __hash__(self) -> int:
        return hash(self._target)


class GuardedFactory(Guarded):
    """A third party's factory (an attack class, a dataset function, ...): calling it is guarded, and what it
    returns is :class:`Guarded` when ``wrap_result`` (an attack object, whose ``run`` is then guarded too)."""

    def __init__(self, target: Any, plugin_name: str, what: str, wrap_result: bool):
        super().__init__(target, plugin_name, what)
        object.__setattr__(self, "_wrap_result", wrap_result)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        doing = f"{'create' if self._wrap_result else 'run'} {self._what}"
        result = guarded_call(self._plugin, doing, self._target, *args, **kwargs)
        return Guarded(result, self._plugin, self._what) if self._wrap_result and result is not None else result


def guard(how: str | None, label: str, plugin_name: str, value: Any) -> Any:
    """``value`` from a third-party plugin, guarded as ``how`` says: ``"object"`` (every method call),
    ``"factory"`` (the call), ``"factory+result"`` (the call and the object it returns) or ``None`` (as it is).
    Built-ins' values are as they are: a fault there is mixzoo's, and its traceback is what a report needs."""
    if how is None or plugin_name in STATE.builtin:
        return value
    if how == "object":
        return Guarded(value, plugin_name, label)
    return GuardedFactory(value, plugin_name, label, wrap_result=how == "factory+result") if callable(value) \
        else value


def collect(hook_name: str) -> list[tuple[str, Any]]:
    """``(plugin_name, result)`` of a collecting hook called on each plugin separately; a plugin whose hook raises is
    recorded as failed and skipped."""
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
