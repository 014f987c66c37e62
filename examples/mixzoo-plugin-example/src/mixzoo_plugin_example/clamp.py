"""A clamp function for MixedNUTS's transform of the RBC's logits, M(s, p, c) (Bai et al. 2024a, Eq. 4).

A clamp is elementwise and differentiable; ``mixzoo mix --clamp NAME`` uses it.
"""

from __future__ import annotations

import torch

NAME = "example-tanh"


def tanh_clamp(x: torch.Tensor) -> torch.Tensor:
    """x * (1 + tanh(x)) / 2: about 0 for x << 0, about x for x >> 0, smooth everywhere."""
    return 0.5 * x * (1.0 + torch.tanh(x))
