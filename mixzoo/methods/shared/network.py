"""The mixing network alpha_theta (Bai et al. 2024b, Sec. 4.3, Fig. 3, App. D.1), sized for a CPU.

Early features of the ABC and the RBC, concatenated, go through a 3x3 convolution, batch norm, ReLU and a residual
block; they are pooled to the middle features' size and joined (channel concatenation) with the middle features of
both models, concatenated and reduced by a 1x1 convolution (App. D.1: "a linear transformation layer (Conv1x1) to
match the dimensions"); ``blocks`` more residual blocks, global average pooling and a linear layer give gamma, the
pre-sigmoid mixing logit (alpha = sigmoid(gamma), bounded at evaluation time by :mod:`.mixing`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from mixzoo.methods.shared.taps import align


class ResBlock(nn.Module):
    """A ResNet basic block (two 3x3 convolutions with batch norm, identity shortcut; 1x1 when widths differ)."""

    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut = nn.Identity() if c_in == c_out else nn.Conv2d(c_in, c_out, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class MixingNetwork(nn.Module):
    """gamma = alpha_theta's logit from the tapped features ``{"early": (f_g, f_h), "middle": (f_g, f_h)}``.

    ``early`` / ``middle``: the channel counts (ABC, RBC) of each depth; ``width``: the network's channels;
    ``blocks``: residual blocks after the join.
    """

    def __init__(self, early: Sequence[int], middle: Sequence[int], width: int = 32, blocks: int = 2):
        super().__init__()
        self.early_channels, self.middle_channels = list(early), list(middle)
        self.width, self.blocks = int(width), int(blocks)
        self.stem = nn.Sequential(nn.Conv2d(sum(early), width, 3, padding=1, bias=False), nn.BatchNorm2d(width),
                                  nn.ReLU(), ResBlock(width, width))
        self.reduce = nn.Sequential(nn.Conv2d(sum(middle), width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.body = nn.Sequential(*[ResBlock(2 * width if i == 0 else width, width) for i in range(blocks)])
        self.linear = nn.Linear(width if blocks else 2 * width, 1)

    def forward(self, early: Sequence[torch.Tensor], middle: Sequence[torch.Tensor]) -> torch.Tensor:
        """gamma, shape ``[n]``."""
        e = self.stem(torch.cat(align(*early), dim=1))
        m = self.reduce(torch.cat(align(*middle), dim=1))
        e, m = align(e, m)
        z = self.body(torch.cat([e, m], dim=1))
        return self.linear(z.mean(dim=(2, 3))).squeeze(1)

    def architecture(self) -> dict[str, object]:
        """What the card records to rebuild this network before loading its weights."""
        return {"early_channels": self.early_channels, "middle_channels": self.middle_channels,
                "width": self.width, "blocks": self.blocks}
