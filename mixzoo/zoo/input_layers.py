"""Layers that stand in front of a published network: :class:`NormalizationInside` where the network normalizes its
[0, 1] input itself (RobustBench), :class:`InputResize` where it was fine-tuned at another resolution (BiT)."""

from __future__ import annotations

import torch
from torch import nn


class NormalizationInside(nn.Module):
    """Stands where :class:`mixzoo.zoo.models.Normalize` would: the network normalizes its [0, 1] input itself."""

    def __init__(self, who: str):
        super().__init__()
        self.who = who

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def extra_repr(self) -> str:
        return f"identity: {self.who} normalizes [0, 1] input inside the network"


class InputResize(nn.Module):
    """Bilinear resize of the (normalized) input to the resolution the network was fine-tuned at."""

    def __init__(self, size: int):
        super().__init__()
        self.size = int(size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.interpolate(x, size=(self.size, self.size), mode="bilinear", align_corners=False)

    def extra_repr(self) -> str:
        return f"size={self.size}, mode=bilinear"
