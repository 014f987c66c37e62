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
* a load hook that raises for a model another plugin loads costs nothing: the next plugin answers;
* a name a built-in plugin provides stays the built-in's: a third party's entry of that name is left out, with a
  warning naming both (:func:`builtin_wins`). A name two third parties provide is left out for both, and using it
  is an error naming both.
"""

from __future__ import annotations

import functools
import importlib.metadata as md
import json
import os
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import pluggy

from mixzoo.core import hookspecs
from mixzoo.core.errors import PluginError, PluginWarning

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
_builtin: set[str] = set()  # plugins shipped in the mixzoo distribution itself
_entry_points: set[str] = set()  # plugins installed through an entry point (their run-time faults are kept on disk)
_runtime: dict[str, list[str]] = {}  # plugin name -> faults seen at run time in this process


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
        _entry_points.add(ep.name)
        if ep.dist is not None and (ep.dist.metadata["Name"] or "").lower() == PROJECT:
            _builtin.add(ep.name)
    return pm


def is_builtin(plugin_name: str) -> bool:
    """Whether ``plugin_name`` is one of mixzoo's own plugins (an entry point of the ``mixzoo`` distribution)."""
    get_plugin_manager()
    return plugin_name in _builtin


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
    _runtime.pop(name, None)
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


def failures_so_far() -> dict[str, str]:
    """The failures recorded until now (plugins that failed to import, and faults found in the tables built so
    far), without building the other tables: what a name lookup that has just built its own table may report."""
    get_plugin_manager()
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
    plugin answers. A plugin whose hook raises is recorded (:func:`runtime_failures`) and passed over, so a load
    hook that raises for a source kind it does not own cannot break the models other plugins load. When no plugin
    answers, the first exception is raised: a :class:`~mixzoo.core.errors.MixzooError` (which already reads as one
    line) as it is, any other as a one-line :class:`PluginError` naming the plugin and ``doing`` (e.g. "load model
    'x'")."""
    from mixzoo.core.errors import MixzooError

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
            if _debug():
                raise
            problem = file_problem(impl.plugin_name, doing, exc)
            if problem is not None:  # a damaged file the plugin read: the user's, not the plugin's fault
                raise problem from exc
            error = plugin_error(impl.plugin_name, doing, exc)
            failed.append((impl.plugin_name, exc))
            first = first or error
            continue
        if result is not None:
            for plugin_name, exc in failed:  # it raised for what another plugin handles: its fault, shown later
                record_runtime_failure(plugin_name, f"{doing} (another plugin handles it)", exc)
            return result
    if first is not None:
        for plugin_name, exc in failed:
            if not isinstance(exc, MixzooError):
                record_runtime_failure(plugin_name, doing, exc)
        raise first
    return None


def _debug() -> bool:
    return os.environ.get("MIXZOO_DEBUG", "") not in ("", "0")


def _exception_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split()) or '(no message)'}"


def plugin_error(plugin_name: str, doing: str, exc: BaseException) -> PluginError:
    """The one-line error for an exception ``exc`` raised by plugin ``plugin_name`` while ``doing`` something."""
    fix = ("report it to mixzoo (MIXZOO_DEBUG=1 shows the traceback)" if plugin_name in _builtin else
           "reinstall the plugin or report it to its author (MIXZOO_DEBUG=1 shows the traceback)")
    error = PluginError(f"plugin {plugin_name!r} failed to {doing}: {_exception_text(exc)}; {fix}")
    error.__cause__ = exc
    return error


def guarded_call(plugin_name: str, doing: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, with any exception other than a :class:`~mixzoo.core.errors.MixzooError` (or a
    ``KeyboardInterrupt``) recorded and raised as the one-line :func:`plugin_error`."""
    from mixzoo.core.errors import MixzooError

    try:
        return fn(*args, **kwargs)
    except MixzooError:
        raise
    except Exception as exc:  # noqa: BLE001 - contain third-party failures
        if _debug():
            raise
        problem = file_problem(plugin_name, doing, exc)
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


# what collect_named wraps, per table: (plugin object whose calls are guarded, a factory, its results wrapped too)
# (clamps are left as they are: plain tensor functions called inside every forward pass, compared by identity)
_GUARDS = {"attack": ("factory", True), "mixing method": ("object", False), "dataset": ("factory", False),
           "calibration optimizer": ("factory", False)}


def _guard(what: str, key: str, plugin_name: str, value: Any) -> Any:
    """``value`` from a third-party plugin, guarded as :data:`_GUARDS` says (built-ins' values are returned as they
    are: a fault there is mixzoo's own, and its traceback is what a report needs)."""
    how = _GUARDS.get(what)
    if how is None or plugin_name in _builtin:
        return value
    label = f"{what} {key!r}"
    if how[0] == "object":
        return Guarded(value, plugin_name, label)
    return GuardedFactory(value, plugin_name, label, wrap_result=how[1]) if callable(value) else value


def _failure_file() -> str:
    """Where run-time faults of installed plugins are kept: ``failed-plugins.json`` in the cache directory
    (``$MIXZOO_CACHE``, else ``~/.cache/mixzoo``, as :func:`mixzoo.core.cache.default_cache_dir`)."""
    root = os.environ.get("MIXZOO_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "mixzoo")
    return os.path.join(root, "failed-plugins.json")


def _read_kept() -> dict[str, Any]:
    try:
        with open(_failure_file(), encoding="utf-8") as fh:
            data = json.load(fh)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def record_runtime_failure(plugin_name: str, doing: str, exc: BaseException) -> None:
    """Remember that ``plugin_name`` raised ``exc`` while ``doing``: for :func:`plugin_infos` in this process, and,
    for a plugin installed through an entry point, in the cache directory for later ones (best effort; the last
    five faults per plugin version)."""
    reason = f"{doing}: {_exception_text(exc)}"
    seen = _runtime.setdefault(plugin_name, [])
    if reason not in seen:
        seen.append(reason)
    if plugin_name not in _entry_points:
        return
    kept = _read_kept()
    entry = kept.get(plugin_name)
    version = _versions.get(plugin_name, "?")
    if not isinstance(entry, dict) or entry.get("version") != version:
        entry = {"version": version, "faults": {}}
    faults = {k: v for k, v in entry.get("faults", {}).items() if k != reason}
    faults[reason] = time.strftime("%Y-%m-%d %H:%M", time.localtime())
    entry["faults"] = dict(list(faults.items())[-5:])
    kept[plugin_name] = entry
    path = _failure_file()
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(kept, fh, indent=1)
        os.replace(tmp, path)
    except OSError:  # a read-only cache: the fault is still shown in this process
        pass


def runtime_failures() -> dict[str, list[str]]:
    """Faults plugins showed at run time (a loader, method or attack that raised): those of this process, and
    those kept from earlier processes for the installed version of each plugin (with when they were last seen)."""
    get_plugin_manager()
    out = {name: list(reasons) for name, reasons in _runtime.items()}
    for name, entry in _read_kept().items():
        if name not in _entry_points or not isinstance(entry, dict) or entry.get("version") != _versions.get(name):
            continue
        for reason, when in (entry.get("faults") or {}).items():
            if reason not in out.get(name, []):
                out.setdefault(name, []).append(f"{reason} (last seen {when})")
    return out


def builtin_wins(what: str, claims: dict[str, list[str]], builtin: Any = ()) -> dict[str, str]:
    """For each name in ``claims`` (name -> the plugins providing it) that exactly one built-in plugin provides
    (or one of ``builtin``, e.g. the registry file): ``{name: that plugin}``. Every other claimant's entry is to be
    left out; each is recorded for ``mixzoo plugins`` and named, with the built-in, in a warning."""
    get_plugin_manager()
    winners: dict[str, str] = {}
    for key, names in claims.items():
        own = [n for n in dict.fromkeys(names) if n in _builtin or n in builtin]
        if len(set(names)) < 2 or len(own) != 1:
            continue
        winners[key] = own[0]
        for loser in dict.fromkeys(n for n in names if n != own[0]):
            record_failure(loser, f"{what} {key!r} left out: the built-in {own[0]!r} provides it")
            warnings.warn(f"plugin {loser!r} provides {what} {key!r}, a name of the built-in {own[0]!r}: the built-in"
                          f" one is used and {loser!r}'s is left out; rename it in that plugin", PluginWarning,
                          stacklevel=2)
    return winners


def collect_named(hook_name: str, what: str) -> dict[str, Any]:
    """Merge the name -> object dicts returned by a collecting hook.

    A name a built-in plugin and third parties both give stays the built-in's (:func:`builtin_wins`). A name given
    by two third parties is left out of the table and recorded (both plugins show it in ``mixzoo plugins``); only
    :func:`lookup` of that very name fails, with an error naming both. Every other name keeps working. Third
    parties' objects are guarded (:class:`Guarded`): their exceptions read as one line naming the plugin.
    """
    merged: dict[str, Any] = {}
    owners: dict[str, list[str]] = {}
    values: dict[tuple[str, str], Any] = {}
    for plugin_name, result in collect(hook_name):
        if not isinstance(result, dict):
            record_failure(plugin_name, f"{hook_name} returned {type(result).__name__}, expected dict")
            continue
        for key, value in result.items():
            owners.setdefault(key, []).append(plugin_name)
            values[(key, plugin_name)] = value
            merged.setdefault(key, _guard(what, key, plugin_name, value))
    clashes = {key: names for key, names in owners.items() if len(names) > 1}
    for key, winner in builtin_wins(what, clashes).items():
        merged[key] = values[(key, winner)]
        del clashes[key]
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
    errors = dict(_failures)
    for name, reasons in runtime_failures().items():
        seen = "at run time: " + "; ".join(reasons)
        errors[name] = f"{errors[name]}; {seen}" if name in errors else seen
    for name, err in errors.items():
        if name in infos:
            infos[name].error = err
        else:
            infos[name] = PluginInfo(name, "?", "?", error=err)
    return sorted(infos.values(), key=lambda i: i.name)
