"""Every deprecated name and call form of mixzoo, each kept working for one minor release, in this one package.

:data:`DEPRECATIONS` lists them as data: what a user writes, what to write instead, the release that removes it,
and the shims that keep it working. The library never imports this package; ``import mixzoo`` calls
:func:`install`, which puts one finder on ``sys.meta_path`` (stdlib only): it answers the moved module names
(:mod:`mixzoo.deprecated.modules`) and attaches the shims of :data:`SHIMS` to their modules when these are
imported. Removing a deprecation is deleting its entry and its shim here (CONTRIBUTING.md, "Public surface and
versions"). Not :mod:`mixzoo.core.compat`, which adapts mixzoo to the installed robustbench / timm / autoattack
versions.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from dataclasses import dataclass
from typing import Any

from mixzoo.deprecated import modules


@dataclass(frozen=True)
class Deprecation:
    """One deprecated form: ``old`` (what a user writes), ``new`` (what to write instead), the release that removes
    it (``removed_in``), and its ``shims``: ``(module, "submodule:function")`` pairs, the function of this package
    called with that module when it is imported, to attach the old form to it (none for the moved module names,
    which the finder answers itself)."""

    old: str
    new: str
    removed_in: str = modules.REMOVED_IN
    shims: tuple[tuple[str, str], ...] = ()

    def warn(self, stacklevel: int = 3, what: str | None = None, why: str = "") -> None:
        """The :class:`DeprecationWarning` of this form (``what``: the old form in the words of the call; ``why``:
        what in the caller's code uses it)."""
        warnings.warn(f"{what or self.old} is deprecated and will be removed in mixzoo {self.removed_in}"
                      f"{': ' + why if why else ''}; use {self.new}", DeprecationWarning, stacklevel=stacklevel)


DEPRECATIONS: dict[str, Deprecation] = {
    "moved-modules": Deprecation("the module names of mixzoo 0.1 (mixzoo.plugins, mixzoo.errors, ...) and"
                                 " mixzoo.attacks.evaluation", "the new module each warning names"),
    "load-model-hook": Deprecation(
        "mixzoo.core.hookspecs.mixzoo_load_model",
        "{kind: loader} from the hook mixzoo_model_sources (loader(spec, device, allow_unsafe) returns the network)",
        shims=(("mixzoo.core.plugins.sources", "hooks:attach_sources"),
               ("mixzoo.core.plugins.listing", "hooks:attach_listing"))),
    "mixed-classifier-keywords": Deprecation(
        "MixedClassifier(abc, rbc, s=..., alpha=..., ...)",
        "MixedClassifier(abc, rbc, MixingParams(alpha=..., s=..., ...), gradient=...)",
        shims=(("mixzoo.methods.mixednuts.mixing", "calls:attach_mixed_classifier"),)),
    "mix-keywords": Deprecation(
        "mix(abc, rbc, KEY=VALUE, ...)",
        "a request: mix(FitRequest(abc, rbc, options={...}, out=...)) (mixzoo.methods.FitRequest)",
        shims=(("mixzoo.methods.mixednuts.fitting", "calls:attach_mix"),)),
    "certify-estimate-keywords": Deprecation(
        "certify(estimate_eps=..., estimate_steps=...)", "certify(estimate=EstimateSettings(eps=..., steps=...))",
        shims=(("mixzoo.certify.run", "calls:attach_certify"),)),
    "attack-defaults-table": Deprecation(
        "mixzoo.attacks.Attack.defaults",
        "`options_spec = {name: mixzoo.core.options.OptionSpec(help, type, default)}` (CONTRIBUTING.md, 'Rules for"
        " attacks')", shims=(("mixzoo.attacks.base", "contracts:attach_attack_defaults"),)),
    "plain-object-method": Deprecation(
        "a mixing method that does not subclass mixzoo.methods.MixingMethod (adapted as"
        " mixzoo.methods.base.LegacyMethod)", "a subclass of mixzoo.methods.MixingMethod (CONTRIBUTING.md, 'Writing"
        " a mixing method')", shims=(("mixzoo.core.plugins.tables", "contracts:attach_tables"),
                                     ("mixzoo.methods.base", "contracts:attach_legacy_method"))),
    "method-keyword-calls": Deprecation(
        "a method's match(..., **kw) / tradeoff_curve(..., **kw) with evaluate's former keyword arguments",
        "a request: match(abc, rbc, images, labels, target, request), tradeoff_curve(card, abc, rbc, data,"
        " request)"),
    "match-keywords": Deprecation(
        "Linear.match(..., attack=..., eps=..., ...)", "a request: Linear.match(abc, rbc, images, labels, target,"
        " mixzoo.core.request.EvalRequest(...))", shims=(("mixzoo.methods.linear", "calls:attach_linear"),)),
    "calibrate-alpha-linear": Deprecation(
        "mixzoo.methods.mixednuts.calibrate.calibrate_alpha_linear", "mixzoo.methods.linear.calibrate_alpha_linear",
        shims=(("mixzoo.methods.mixednuts.calibrate", "contracts:attach_calibrate"),)),
    "method-option": Deprecation(
        "mixzoo.methods.MethodOption", "mixzoo.core.options.OptionSpec(help, type, default) (the default is filled"
        " in) or OptionSpec(help, type, default_note=...) (shown, not filled)",
        shims=(("mixzoo.methods.base", "contracts:attach_method_option"),
               ("mixzoo.methods", "contracts:attach_methods"))),
}

# module -> the shims attached to it when it is imported ("mixzoo.deprecated.SUBMODULE:function")
SHIMS: dict[str, list[str]] = {}
for _entry in DEPRECATIONS.values():
    for _target, _shim in _entry.shims:
        SHIMS.setdefault(_target, []).append(f"{__name__}.{_shim}")


def _attach(module: types.ModuleType) -> None:
    """Call each shim of :data:`SHIMS` for ``module`` with it."""
    for shim in SHIMS[module.__name__]:
        name, _, function = shim.partition(":")
        getattr(importlib.import_module(name), function)(module)


class _Attaching(importlib.abc.Loader):
    """A module's own loader, then the shims of :data:`SHIMS` attached to the module it executed."""

    def __init__(self, loader: Any):
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self.loader.exec_module(module)
        _attach(module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, ... of the module's own loader
        return getattr(self.loader, name)


class Finder(importlib.abc.MetaPathFinder):
    """The moved module names (:data:`~mixzoo.deprecated.modules.MOVED_MODULES`), and the modules of
    :data:`SHIMS`, found by the other finders and loaded with their shims attached."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname in SHIMS:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None and spec.loader is not None:
                    spec.loader = _Attaching(spec.loader)
                    return spec
            return None
        return modules.find_spec(fullname)


def install() -> None:
    """Put the :class:`Finder` first on ``sys.meta_path`` (once); attach the shims of modules already imported."""
    if any(isinstance(f, Finder) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, Finder())
    for name in SHIMS:
        if name in sys.modules:
            _attach(sys.modules[name])
