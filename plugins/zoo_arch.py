"""Architectures of the built-in zoo, by name (``source.arch`` in ``registry.toml``).

Small VGG-style CNNs sized for Fashion-MNIST (1x28x28) and scikit-learn digits (1x8x8) on a CPU. Weights are
trained by :mod:`mixzoo.train`; the registry entry stores the constructor keyword arguments in ``source.kwargs``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from torch import nn

from mixzoo.errors import RegistryError, UnknownNameError


class ConvNet(nn.Module):
    """Stages of ``convs_per_stage`` x (3x3 conv [+ batch norm] + ReLU) followed by 2x2 max pooling, then
    flatten -> linear(``hidden``) -> ReLU -> linear(``num_classes``). Takes normalized images, returns logits."""

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
            layers.append(nn.MaxPool2d(2))
            hw //= 2
        if hw < 1:
            raise RegistryError(f"ConvNet: {len(widths)} pooling stages leave nothing of a {input_hw}px input;"
                                " use fewer widths")
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(c * hw * hw, hidden), nn.ReLU(inplace=True),
                                        nn.Linear(hidden, num_classes))

    def forward(self, x):
        return self.classifier(self.features(x))


ARCHS: dict[str, Callable[..., nn.Module]] = {"convnet": ConvNet}


def build(arch: str, kwargs: dict[str, Any] | None = None) -> nn.Module:
    """Instantiate architecture ``arch`` with ``kwargs`` (unknown names get suggestions)."""
    if arch not in ARCHS:
        raise UnknownNameError("architecture", arch, ARCHS)
    try:
        return ARCHS[arch](**(kwargs or {}))
    except TypeError as exc:
        raise RegistryError(f"architecture {arch!r}: bad keyword arguments {kwargs} ({exc}); fix source.kwargs")\
            from exc
