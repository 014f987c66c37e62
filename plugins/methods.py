"""Built-in mixing methods, registered through the method hook like any third party's (``mixzoo mix --method``)."""

from __future__ import annotations

from typing import Any

from mixzoo.core.plugins import hookimpl


@hookimpl
def mixzoo_mixing_methods() -> dict[str, Any]:
    """``mixednuts`` (paper 000, the default) and ``linear`` (constant alpha, 001 Eq. 3.4)."""
    from mixzoo.methods.linear import Linear
    from mixzoo.methods.mixednuts.method import MixedNUTS

    return {"mixednuts": MixedNUTS(), "linear": Linear()}
