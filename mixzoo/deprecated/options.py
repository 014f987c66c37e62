"""``mixzoo.methods.MethodOption``: a fit option whose default is documentation only, replaced by
:class:`~mixzoo.core.options.OptionSpec` (``default``, filled in, or ``default_note``, shown and not filled)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar

from mixzoo.core.options import OptionSpec
from mixzoo.deprecated import DEPRECATIONS


@dataclass(frozen=True)
class MethodOption(OptionSpec):
    """A fit option whose ``default`` is documentation only (the method applies it when the key is absent): never
    filled in by :meth:`~mixzoo.methods.MixingMethod.check_options`. Making one warns."""

    fills_default: ClassVar[bool] = False

    def __post_init__(self) -> None:
        DEPRECATIONS["method-option"].warn(stacklevel=4)

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
