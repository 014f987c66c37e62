"""Public names that moved, kept working for one minor release with a :class:`DeprecationWarning` naming the new place.

The module names of mixzoo 0.1's documentation (``mixzoo.plugins``, ``mixzoo.errors``, ``mixzoo.pipeline``, ...)
are answered by the finder of :mod:`mixzoo.deprecated`: ``from mixzoo.plugins import hookimpl`` still gives
:data:`mixzoo.hookimpl`, with a warning saying to import it from there. Nothing is imported until a name is read,
so the finder costs ``import mixzoo`` nothing. Each entry says where its names live now and the release that
removes it (CONTRIBUTING.md, "Public surface and versions").
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from typing import Any

REMOVED_IN = "0.3"

# old module -> the module that holds its names now (mixzoo 0.1's layout before core/, zoo/, methods/, evaluation/)
MOVED_MODULES: dict[str, str] = {
    "mixzoo.plugins": "mixzoo.core.plugins", "mixzoo.hookspecs": "mixzoo.core.hookspecs",
    "mixzoo.errors": "mixzoo.core.errors", "mixzoo.registry": "mixzoo.core.registry",
    "mixzoo.compat": "mixzoo.core.compat", "mixzoo.cache": "mixzoo.core.cache", "mixzoo.card": "mixzoo.core.card",
    "mixzoo.machine": "mixzoo.core.machine", "mixzoo.progress": "mixzoo.core.progress",
    "mixzoo.models": "mixzoo.zoo.models", "mixzoo.data": "mixzoo.zoo.data", "mixzoo.blackbox": "mixzoo.zoo.blackbox",
    "mixzoo.pipeline": "mixzoo.methods.mixednuts.fitting", "mixzoo.mixing": "mixzoo.methods.mixednuts.mixing",
    "mixzoo.transforms": "mixzoo.methods.mixednuts.transforms",
    "mixzoo.approximation": "mixzoo.methods.mixednuts.approximation",
    "mixzoo.transfer": "mixzoo.methods.mixednuts.transfer", "mixzoo.bench": "mixzoo.evaluation.bench",
    "mixzoo.report": "mixzoo.evaluation.report", "mixzoo.verify": "mixzoo.evaluation.verify",
    "mixzoo.sanity": "mixzoo.evaluation.sanity", "mixzoo.stats": "mixzoo.evaluation.stats",
    "mixzoo.train": "mixzoo.training.train", "mixzoo.calibrate": "mixzoo.methods.mixednuts.calibrate",
    # the parts adaptive smoothing shares with local-smoothing-adaptive
    "mixzoo.methods.adaptive.taps": "mixzoo.methods.shared.taps",
    "mixzoo.methods.adaptive.network": "mixzoo.methods.shared.network",
    "mixzoo.methods.adaptive.parallel": "mixzoo.methods.shared.parallel",
    # the evaluations' former home, shared out among the attack base, the adapters and the suites
    "mixzoo.attacks.evaluation": "mixzoo.attacks.base",
}
# ``mixzoo.calibrate`` is also the top-level function: importing the old module binds ``mixzoo.calibrate`` to it, so
# it stays callable as that function (:class:`CallableMovedModule`)
CALLABLE = {"mixzoo.calibrate": "calibrate"}

# old modules whose names were shared out: looked up in these modules, in order, after the one above
ALSO_IN: dict[str, tuple[str, ...]] = {
    "mixzoo.plugins": ("mixzoo.core.plugins.tables", "mixzoo.core.plugins.guard", "mixzoo.core.plugins.state"),
    "mixzoo.pipeline": ("mixzoo.zoo.pairs", "mixzoo.methods.mixednuts.calibration_data"),
    "mixzoo.attacks.evaluation": ("mixzoo.attacks.adapters", "mixzoo.attacks.suites"),
    "mixzoo.bench": ("mixzoo.attacks.runner", "mixzoo.evaluation.loading", "mixzoo.evaluation.job",
                     "mixzoo.evaluation.matching", "mixzoo.evaluation.report", "mixzoo.evaluation.worst_case"),
    "mixzoo.train": ("mixzoo.training.objectives", "mixzoo.training.model_metrics", "mixzoo.training.recipes",
                     "mixzoo.training.weights"),
}

# names the top-level package offers itself: the warning points there rather than at the defining module
TOP_LEVEL = frozenset({"hookimpl", "get_plugin_manager", "MixCard", "InputError", "MixzooError", "UnknownNameError",
                       "ModelSpec", "get_spec", "list_models", "BaseClassifier", "load_model", "load_mixed",
                       "MixedClassifier", "MixingParams"})


def new_place(old: str, name: str) -> tuple[str, Any]:
    """Where ``name`` of the old module ``old`` is imported from now (``module.name``) and its value; an
    :class:`AttributeError` naming the new module when no new module has it."""
    for module in (MOVED_MODULES[old], *ALSO_IN.get(old, ())):
        value = getattr(importlib.import_module(module), name, _MISSING)
        if value is not _MISSING:
            # a name the module re-exports on purpose (its __all__) is named there; another is named where it is
            # defined, not where it happens to be imported
            home = getattr(value, "__module__", None)
            public = name in getattr(sys.modules[module], "__all__", ())
            if not public and isinstance(home, str) and home.startswith("mixzoo.") and \
                    getattr(sys.modules.get(home), name, None) is value:
                module = home
            return (f"mixzoo.{name}" if name in TOP_LEVEL else f"{module}.{name}"), value
    raise AttributeError(f"module {old!r} has no attribute {name!r} (the module moved to {MOVED_MODULES[old]!r})")


_MISSING = object()


class MovedModule(types.ModuleType):
    """An old module name: every attribute read warns and returns the name from its new place."""

    def __getattr__(self, name: str) -> Any:
        old = self.__name__
        if name.startswith("_"):  # private names never were public: tools probing modules import nothing
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        place, value = new_place(old, name)
        warnings.warn(f"{old}.{name} is deprecated and will be removed in mixzoo {REMOVED_IN}; use {place}",
                      DeprecationWarning, stacklevel=2)
        return value

    def __dir__(self) -> list[str]:
        modules = (MOVED_MODULES[self.__name__], *ALSO_IN.get(self.__name__, ()))
        return sorted({n for m in modules for n in dir(importlib.import_module(m)) if not n.startswith("_")})


class CallableMovedModule(MovedModule):
    """An old module name that is also a public function of :mod:`mixzoo` (``mixzoo.calibrate``): calling it calls
    that function, without a warning."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        function = getattr(importlib.import_module(MOVED_MODULES[self.__name__]), CALLABLE[self.__name__])
        return function(*args, **kwargs)


class _Loader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        kind = CallableMovedModule if spec.name in CALLABLE else MovedModule
        return kind(spec.name, f"moved to {MOVED_MODULES[spec.name]} (deprecated; removed in {REMOVED_IN})")

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def find_spec(fullname: str) -> importlib.machinery.ModuleSpec | None:
    """The spec of an old module name of :data:`MOVED_MODULES` (``None`` for any other name)."""
    if fullname not in MOVED_MODULES:
        return None
    return importlib.machinery.ModuleSpec(fullname, _Loader(), origin="deprecated")
