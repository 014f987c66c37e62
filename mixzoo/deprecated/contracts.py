"""What plugins declare against an older contract, read as the current one until the removal release."""

from __future__ import annotations

import dataclasses
import importlib
import types
from typing import Any

from mixzoo.deprecated import DEPRECATIONS


def attach_attack_defaults(base: types.ModuleType) -> None:
    """An :class:`~mixzoo.attacks.Attack` subclass that declares only a ``defaults`` table (and ``option_types``), as
    mixzoo 0.1's documentation said: its ``options_spec`` derived from the table
    (:func:`~mixzoo.core.options.specs_from_defaults`), with a :class:`DeprecationWarning`."""
    from mixzoo.core.options import specs_from_defaults

    attack, entry = base.Attack, DEPRECATIONS["attack-defaults-table"]
    library = attack.__dict__["__init_subclass__"].__func__

    def __init_subclass__(cls: type, **kwargs: Any) -> None:
        own = vars(cls)
        if "options_spec" not in own and ("defaults" in own or "option_types" in own):
            entry.warn(why=f"attack class {cls.__qualname__} declares `defaults` / `option_types`")
            cls.options_spec = specs_from_defaults(cls.defaults, own.get("option_types"), cls.options_spec)
        library(cls, **kwargs)

    attack.__init_subclass__ = classmethod(__init_subclass__)


def lazy_names(module: types.ModuleType, names: dict[str, str]) -> None:
    """``module.NAME`` for each of ``names`` (NAME -> ``"module:attribute"`` of this package), imported when first
    asked for (e.g. a class that subclasses one of ``module``'s)."""
    lazy = module.__dict__.setdefault("_deprecated_names", {})
    lazy.update(names)

    def __getattr__(name: str) -> Any:
        if name not in lazy:
            raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")
        home, _, attribute = lazy[name].partition(":")
        return getattr(importlib.import_module(home), attribute)

    module.__getattr__ = __getattr__


def attach_legacy_method(base: types.ModuleType) -> None:
    """``mixzoo.methods.base.LegacyMethod``, the class old-style methods are adapted as."""
    lazy_names(base, {"LegacyMethod": "mixzoo.deprecated.methods:LegacyMethod"})


def attach_method_option(base: types.ModuleType) -> None:
    """``mixzoo.methods.base.MethodOption``."""
    lazy_names(base, {"MethodOption": "mixzoo.deprecated.options:MethodOption"})


def attach_methods(methods: types.ModuleType) -> None:
    """``mixzoo.methods.MethodOption``, a public name of the package until its removal."""
    from mixzoo.deprecated.options import MethodOption

    methods.MethodOption = MethodOption
    methods.__all__ = sorted([*methods.__all__, "MethodOption"], key=lambda n: (n[0].islower(), n))


def attach_tables(tables: types.ModuleType) -> None:
    """The table of methods adapts a third party's methods (:func:`mixzoo.deprecated.methods.adapt_method`,
    imported when the table is first built: it imports the method contract, and torch with it)."""
    tables.KINDS["method"] = dataclasses.replace(tables.KINDS["method"], adapt="mixzoo.deprecated.methods:adapt_method")


def attach_calibrate(calibrate: types.ModuleType) -> None:
    """``calibrate_alpha_linear`` read from Algorithm 1's module: the linear method's function, with a warning."""
    entry = DEPRECATIONS["calibrate-alpha-linear"]

    def __getattr__(name: str) -> Any:
        if name != "calibrate_alpha_linear":
            raise AttributeError(f"module {calibrate.__name__!r} has no attribute {name!r}")
        entry.warn()
        return importlib.import_module("mixzoo.methods.linear").calibrate_alpha_linear

    calibrate.__getattr__ = __getattr__
