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


def gelu(x: torch.Tensor) -> torch.Tensor:
    """GELU, x * Phi(x) (exact, not the tanh approximation)."""
    import torch.nn.functional as F

    return F.gelu(x)


def relu(x: torch.Tensor) -> torch.Tensor:
    """max(x, 0)."""
    import torch.nn.functional as F

    return F.relu(x)


def elu(x: torch.Tensor) -> torch.Tensor:
    """x for x > 0, exp(x) - 1 otherwise."""
    import torch.nn.functional as F

    return F.elu(x)


def softplus(x: torch.Tensor) -> torch.Tensor:
    """log(1 + exp(x))."""
    import torch.nn.functional as F

    return F.softplus(x)


def linear(x: torch.Tensor) -> torch.Tensor:
    """The identity (no clamping)."""
    return x


@hookimpl
def mixzoo_clamp_functions() -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    return {"gelu": gelu, "relu": relu, "elu": elu, "softplus": softplus, "linear": linear}
