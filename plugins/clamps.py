"""Built-in clamp functions for the RBC transform M(s, p, c) (Bai et al. 2024a, Eq. 4, App. D.2; hook
``mixzoo_clamp_functions``).

``gelu`` (the paper's choice, exact erf form), ``relu``, ``elu`` (alpha = 1), ``softplus`` (beta = 1) and
``linear`` (no clamp: with p = 1, M reduces to temperature scaling of the layer-normalised logits). All are
elementwise and differentiable almost everywhere; all except ``gelu`` are monotone, so they preserve the predicted
class (Assumption 4.2). GELU dips to about -0.17 around -0.75 and can swap classes whose shifted logits lie there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from mixzoo.core.plugins import hookimpl

PROVIDES = {"clamps": ["elu", "gelu", "linear", "relu", "softplus"]}  # what `mixzoo plugins` lists

if TYPE_CHECKING:
    import torch


def linear(x: torch.Tensor) -> torch.Tensor:
    """The identity (no clamping)."""
    return x


@hookimpl
def mixzoo_clamp_functions() -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """torch's own functions at their defaults: ``gelu`` x * Phi(x) (exact, not the tanh approximation), ``relu``
    max(x, 0), ``elu`` x for x > 0 else exp(x) - 1, ``softplus`` log(1 + exp(x)); and :func:`linear`."""
    import torch.nn.functional as F

    return {"gelu": F.gelu, "relu": F.relu, "elu": F.elu, "softplus": F.softplus, "linear": linear}
