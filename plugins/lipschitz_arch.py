"""The ``lipconvnet`` architecture: 1-Lipschitz robust base classifiers for the built-in zoo, built with deel-torchlip.

Architecture ``lipconvnet`` (``source.arch`` in ``registry.toml``): stages of 3x3 ``SpectralConv2d`` + GroupSort2,
each followed by an ``InvertibleDownSampling(2)`` (pixel unshuffle, an isometry), then flatten -> ``SpectralLinear``
(``hidden``) -> GroupSort2 -> ``SpectralLinear`` (``num_classes``). Every layer is 1-Lipschitz in l2 (deel-torchlip
orthogonalises the kernels by power iteration + Bjorck and scales the convolutions by the zero-padding coefficient
of Serrurier et al. 2021, arXiv:2006.06520), so the logit map is 1-Lipschitz in l2 by construction.

Two forms of the same network, with the same state-dict keys: ``vanilla=False`` (training,
:mod:`mixzoo.training.train`), the deel-torchlip layers, whose weights are re-parametrised on every forward;
``vanilla=True`` (the default, what the zoo loads), plain ``nn.Conv2d`` / ``nn.Linear`` holding the exported
orthogonalised weights (deel-torchlip's ``vanilla_export``), as fast as any CNN, and a chain of known layers that
:func:`mixzoo.certify.lipschitz.lipschitz_bound` can re-check with exact per-layer operator norms
(:meth:`LipConvNet.export_vanilla` turns the first into the second). The registry entry of such a model declares
``lipschitz = { constant = 1.0, norm = "l2" }`` for the map from [0, 1] images to logits (its ``mean`` / ``std`` are
0 / 1, so no normalisation scales the constant).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from mixzoo.core.errors import InputError, RegistryError


class GroupSort2(nn.Module):
    """GroupSort with groups of 2 along the channel axis (Anil et al. 2019): each pair becomes (min, max). A
    permutation of coordinates on each side of a pair's diagonal, so 1-Lipschitz in l2 and gradient-norm preserving.
    The same function as ``deel.torchlip.GroupSort2`` (checked in :meth:`LipConvNet.export_vanilla`)."""

    lipschitz_l2 = 1.0  # its l2 operator-norm bound, read by mixzoo.certify.lipschitz.lipschitz_bound

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pairs = x.unflatten(1, (x.shape[1] // 2, 2))
        lo, hi = pairs.amin(2, keepdim=True), pairs.amax(2, keepdim=True)
        return torch.cat([lo, hi], 2).flatten(1, 2)


class LogitScale(nn.Module):
    """Multiplies the logits by ``scale`` (the inverse temperature the network was trained at), so its probabilities
    are the calibrated ones; the logit map's l2 constant becomes ``scale``."""

    def __init__(self, scale: float):
        super().__init__()
        self.lipschitz_l2 = float(scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.lipschitz_l2


class LipConvNet(nn.Module):
    """A 1-Lipschitz (l2) CNN; ``vanilla`` picks the plain exported form (see the module docstring).

    ``widths``: output channels of each stage's convolution; each stage halves the resolution by pixel unshuffle
    (channels x 4), so ``input_hw`` must be divisible by ``2 ** len(widths)``. ``logit_scale``: a factor on the
    logits (the loss temperature the network was trained with, so that softmax gives the probabilities it was
    trained to give; a mixture needs them, Bai et al. 2024b, Lemma 3.2). It is not a parameter (the weights do not
    change) and makes the logit map ``logit_scale``-Lipschitz: :attr:`lipschitz_constant`.
    """

    def __init__(self, widths: Sequence[int] = (16, 32), hidden: int = 128, in_channels: int = 1,
                 num_classes: int = 10, input_hw: int = 28, logit_scale: float = 1.0, vanilla: bool = True):
        super().__init__()
        if not logit_scale > 0:
            raise RegistryError(f"lipconvnet: logit_scale must be positive, got {logit_scale!r}")
        if input_hw % (2 ** len(widths)):
            raise RegistryError(f"lipconvnet: input_hw {input_hw} is not divisible by 2**{len(widths)}; use fewer"
                                " widths")
        if hidden % 2 or any(w % 2 for w in widths):
            raise RegistryError("lipconvnet: GroupSort2 needs even widths and hidden")
        self.config = {"widths": tuple(widths), "hidden": hidden, "in_channels": in_channels,
                       "num_classes": num_classes, "input_hw": input_hw, "logit_scale": float(logit_scale)}
        self.lipschitz_constant = float(logit_scale)  # l2, of the logit map: every layer is 1-Lipschitz
        self.scale = LogitScale(logit_scale)
        if vanilla:
            conv, linear, act, down, chain = (lambda i, o: nn.Conv2d(i, o, 3, padding=1)), nn.Linear, GroupSort2, \
                nn.PixelUnshuffle, nn.Sequential
        else:
            from deel import torchlip

            conv = lambda i, o: torchlip.SpectralConv2d(i, o, 3, padding=1)  # noqa: E731
            linear, act, down = torchlip.SpectralLinear, torchlip.GroupSort2, torchlip.InvertibleDownSampling
            chain = torchlip.Sequential
        layers: list[nn.Module] = []
        c, hw = in_channels, input_hw
        for width in widths:
            layers += [conv(c, width), act(), down(2)]
            c, hw = width * 4, hw // 2
        layers += [nn.Flatten(), linear(c * hw * hw, hidden), act(), linear(hidden, num_classes)]
        self.layers = chain(*layers)
        self.vanilla = vanilla

    def lipschitz_layers(self) -> list[nn.Module]:
        """The layers whose composition is :meth:`forward` (``mixzoo certify`` re-checks their norms)."""
        return [*self.layers, self.scale]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale(self.layers(x))

    def training_form(self) -> LipConvNet:
        """The deel-torchlip form of this architecture, freshly initialised (what a training recipe trains)."""
        return LipConvNet(**self.config, vanilla=False)

    def export_vanilla(self, check: torch.Tensor | None = None, atol: float = 1e-4) -> LipConvNet:
        """The plain form of a trained deel-torchlip network (``vanilla_export``), in eval mode; ``check`` (inputs,
        default 64 seeded uniform images) must give the same logits from both forms within ``atol``, else
        :class:`InputError` (a network whose constant the architecture does not guarantee is not shipped)."""
        if self.vanilla:
            return self
        self.eval()
        exported = self.layers.vanilla_export()
        plain = LipConvNet(**self.config, vanilla=True)
        state = {k: v.detach().clone().contiguous() for k, v in exported.state_dict().items()}
        plain.layers.load_state_dict(state, strict=True)
        plain.eval()
        if check is None:
            shape = (64, self.config["in_channels"], self.config["input_hw"], self.config["input_hw"])
            check = torch.rand(shape, generator=torch.Generator().manual_seed(0))
        device = next(self.parameters()).device
        plain.to(device)
        with torch.no_grad():
            want, got = self(check.to(device)), plain(check.to(device))
        err = float((want - got).abs().max())
        if err > atol:
            raise InputError(f"the exported Lipschitz network differs from the trained one by {err:.3g} on a batch"
                             f" (tolerance {atol:g}); do not ship it")
        return plain
