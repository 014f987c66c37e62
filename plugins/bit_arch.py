"""BiT ResNetV2 (Kolesnikov et al., 2020) as timm builds it, and the renaming of checkpoints in the original Google BiT
PyTorch layout to timm's names: the architecture side of the ``bit`` plugin (:mod:`mixzoo_plugins.bit` loads the
files).

* ``arch`` is a timm BiT name ``resnetv2_{50,101,152}x{W}_bit``; alternatively ``layers`` (blocks per stage) and
  ``width_factor`` (:func:`bit_layers`). The network is built exactly as timm's ``_create_resnetv2_bit`` builds it
  (:func:`build_bit`).
* Checkpoints in the Google BiT layout (``root.conv``, ``body.blockN.unitMM``, ``head.conv``, ``mean``/``std``; the
  layout of the MixedNUTS authors' files and of RobustBench's ``bit_rn_v2``) are converted to timm's names
  (:func:`bit_to_timm`); checkpoints already in timm's layout stay as they are.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from mixzoo.core.errors import RegistryError

if TYPE_CHECKING:
    import torch
    from torch import nn

BIT_DEPTHS: dict[int, list[int]] = {50: [3, 4, 6, 3], 101: [3, 4, 23, 3], 152: [3, 8, 36, 3]}
_ARCH_RE = re.compile(r"resnetv2_(\d+)x(\d+)_bit")
_UNIT_RE = re.compile(r"body\.block(\d+)\.unit(\d+)\.(.+)")
_UNIT_PARTS = {"gn1": "norm1", "gn2": "norm2", "gn3": "norm3", "conv1": "conv1", "conv2": "conv2",
               "conv3": "conv3", "downsample": "downsample.conv"}
_TOP_LEVEL = {"root.conv.weight": "stem.conv.weight", "head.gn.weight": "norm.weight", "head.gn.bias": "norm.bias",
              "head.conv.weight": "head.fc.weight", "head.conv.bias": "head.fc.bias"}


def bit_layers(source: Mapping[str, Any], entry: str) -> tuple[list[int], int]:
    """(blocks per stage, width factor) from ``arch = "resnetv2_152x2_bit"`` or ``layers``/``width_factor``."""
    if "layers" in source:
        layers, width = list(source["layers"]), int(source.get("width_factor", 1))
    else:
        match = _ARCH_RE.fullmatch(str(source.get("arch", "")))
        if match is None or int(match.group(1)) not in BIT_DEPTHS:
            raise RegistryError(f"registry entry {entry!r}: source arch must be resnetv2_{{50,101,152}}xW_bit"
                                f" or give layers and width_factor, got {source.get('arch')!r}")
        layers, width = BIT_DEPTHS[int(match.group(1))], int(match.group(2))
    if len(layers) != 4 or not all(isinstance(n, int) and n > 0 for n in layers) or width < 1:
        raise RegistryError(f"registry entry {entry!r}: layers must be 4 positive integers and width_factor >= 1")
    return layers, width


def build_bit(layers: Sequence[int], width_factor: int, num_classes: int,
              std_conv_eps: float = 1e-8) -> nn.Module:
    """timm's BiT ResNetV2 (pre-activation, weight-standardised convs, GroupNorm, fixed-padding stem), built as
    ``timm.models.resnetv2._create_resnetv2_bit`` builds ``resnetv2_152x2_bit`` and friends (``std_conv_eps``
    1e-8 there)."""
    from mixzoo.core.compat import import_timm

    import_timm()
    from timm.layers import StdConv2d
    from timm.models.resnetv2 import ResNetV2

    return ResNetV2(layers=list(layers), width_factor=width_factor, num_classes=num_classes, stem_type="fixed",
                    conv_layer=partial(StdConv2d, eps=std_conv_eps))


def bit_to_timm(state_dict: Mapping[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(timm's ResNetV2 names for a Google-BiT-layout state dict, the normalization found in it: ``{'mean': ...,
    'std': ...}`` or empty); a state dict already in timm's layout comes back unchanged."""
    if "root.conv.weight" not in state_dict:
        return dict(state_dict), {}
    out: dict[str, torch.Tensor] = {}
    norm: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        if key in ("mean", "std"):
            norm[key] = value
        elif key in _TOP_LEVEL:
            out[_TOP_LEVEL[key]] = value
        elif (m := _UNIT_RE.fullmatch(key)) is not None and m.group(3).partition(".")[0] in _UNIT_PARTS:
            part, _, param = m.group(3).partition(".")
            out[f"stages.{int(m.group(1)) - 1}.blocks.{int(m.group(2)) - 1}.{_UNIT_PARTS[part]}.{param}"] = value
        else:
            out[key] = value  # an unknown key is left for the strict load to report
    return out, norm
