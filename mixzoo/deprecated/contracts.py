"""What plugins declare against an older contract, read as the current one until the removal release."""

from __future__ import annotations

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


def attach_base(base: types.ModuleType) -> None:
    """``mixzoo.methods.base.LegacyMethod``, the class old-style methods are adapted as
    (:mod:`mixzoo.deprecated.methods`, imported when first asked for: it subclasses ``base``'s class)."""

    def __getattr__(name: str) -> Any:
        if name == "LegacyMethod":
            from mixzoo.deprecated.methods import LegacyMethod

            return LegacyMethod
        raise AttributeError(f"module {base.__name__!r} has no attribute {name!r}")

    base.__getattr__ = __getattr__
