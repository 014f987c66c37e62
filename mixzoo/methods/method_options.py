"""Fit options of the 0.1 form (:class:`MethodOption`) and the command-line value parser methods use."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from mixzoo.core.options import OptionSpec
from mixzoo.core.options import parse_value as _parse_value


@dataclass(frozen=True)
class MethodOption(OptionSpec):
    """A fit option whose ``default`` is documentation only (the method applies it when the key is absent).
    Deprecated: declare :class:`mixzoo.core.options.OptionSpec`, whose ``default`` :meth:`MixingMethod.check_options`
    fills in (so ``fit`` reads the filled value), or whose ``default_note`` says what an absent option means when
    that is not one value."""

    def __post_init__(self) -> None:
        import warnings

        warnings.warn("mixzoo.methods.MethodOption is deprecated and will be removed in mixzoo 0.3; declare"
                      " mixzoo.core.options.OptionSpec(help, type, default) (the default is filled in) or"
                      " OptionSpec(help, type, default_note=...) (shown, not filled)", DeprecationWarning,
                      stacklevel=3)

    @property
    def default_text(self) -> str:
        """The default as ``mixzoo mix --show-options`` prints it: ``default``, else the ``default X`` the help text
        names, else empty."""
        if self.default is not None:
            return str(self.default)
        found = re.search(r"\bdefault:? ([^;,)]+)", self.help)
        return found.group(1).strip() if found else ""

    def convert(self, key: str, value: Any, method: str) -> Any:
        """``value`` as this option's type; a one-line :class:`InputError` naming the option and its type."""
        owner = method if method.startswith("mixing method ") else f"mixing method {method!r}"
        return OptionSpec.convert(self, key, value, owner)


def parse_value(text: str) -> Any:
    """A command-line value, read by mixzoo's one parser (:func:`mixzoo.core.options.parse_value`)."""
    return _parse_value(text)
