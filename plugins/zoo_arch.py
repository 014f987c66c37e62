"""Architectures of the built-in zoo, by name (``source.arch`` in ``registry.toml``, constructor keyword arguments
in ``source.kwargs``): small VGG-style CNNs sized for Fashion-MNIST (1x28x28) and digits (1x8x8) on a CPU, trained
by :mod:`mixzoo.training.train`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from mixzoo.core.errors import RegistryError


class ConvNet(nn.Module):
    """Stages of ``convs_per_stage`` x (3x3 conv [+ batch norm] + ReLU) followed by 2x2 max pooling, then
    flatten -> linear(``hidden``) -> ReLU -> linear(``num_classes``). Takes normalized images, returns logits.

    Laid out for CPU attack throughput (benchmarks/pipeline_speed.md), with the same function and state-dict keys as
    the plain layer order: channels-last tensors; each stage pools before its last ReLU (max pooling commutes
    with a monotone ReLU and then rectifies a quarter of the values); in eval mode a conv + batch norm pair runs
    as one convolution with the batch norm folded into its weights (nothing is stored, so weight hashes and
    checkpoints are unchanged).
    """

    def __init__(self, widths: Sequence[int] = (32, 64), hidden: int = 128, in_channels: int = 1,
                 num_classes: int = 10, input_hw: int = 28, convs_per_stage: int = 1, batch_norm: bool = False):
        super().__init__()
        layers: list[nn.Module] = []
        c, hw = in_channels, input_hw
        for width in widths:
            for _ in range(convs_per_stage):
                layers.append(nn.Conv2d(c, width, 3, padding=1, bias=not batch_norm))
                if batch_norm:
                    layers.append(nn.BatchNorm2d(width))
                layers.append(nn.ReLU(inplace=True))
                c = width
            layers.insert(len(layers) - 1, nn.MaxPool2d(2))
            hw //= 2
        if hw < 1:
            raise RegistryError(f"ConvNet: {len(widths)} pooling stages leave nothing of a {input_hw}px input;"
                                " use fewer widths")
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(c * hw * hw, hidden), nn.ReLU(inplace=True),
                                        nn.Linear(hidden, num_classes))
        self.to(memory_format=torch.channels_last)

    def lipschitz_layers(self) -> list[nn.Module]:
        """The layers whose composition is :meth:`forward` (for provable Lipschitz bounds, ``mixzoo certify``)."""
        return [*self.features, *self.classifier]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous(memory_format=torch.channels_last)
        if self.training:
            return self.classifier(self.features(x))
        layers = list(self.features)
        i = 0
        while i < len(layers):
            if i + 1 < len(layers) and isinstance(layers[i + 1], nn.BatchNorm2d):
                x = conv_bn_eval(layers[i], layers[i + 1], x)
                i += 2
            else:
                x = layers[i](x)
                i += 1
        return self.classifier(x)


def conv_bn_eval(conv: nn.Conv2d, bn: nn.BatchNorm2d, x: torch.Tensor) -> torch.Tensor:
    """``bn(conv(x))`` in eval mode as a single convolution: bn's running statistics and affine map folded into
    conv's weight and bias (one pass over the activations instead of three, also in the backward pass)."""
    scale = torch.rsqrt(bn.running_var + bn.eps)
    if bn.weight is not None:
        scale = scale * bn.weight
    bias = -bn.running_mean * scale
    if bn.bias is not None:
        bias = bias + bn.bias
    if conv.bias is not None:
        bias = bias + conv.bias * scale
    return F.conv2d(x, conv.weight * scale.view(-1, 1, 1, 1), bias, conv.stride, conv.padding, conv.dilation,
                    conv.groups)


ARCHS: dict[str, Callable[..., nn.Module]] = {"convnet": ConvNet}


def build(arch: str, kwargs: dict[str, Any] | None = None) -> nn.Module:
    """Instantiate architecture ``arch`` (the table of hook ``mixzoo_architectures``: these and other plugins', e.g.
    lipconvnet) with ``kwargs`` (unknown names get suggestions)."""
    from mixzoo.core.plugins import lookup

    builder = lookup("architecture", arch)
    try:
        return builder(**(kwargs or {}))
    except TypeError as exc:
        raise RegistryError(f"architecture {arch!r}: bad keyword arguments {kwargs} ({exc}); fix source.kwargs")\
            from exc
