"""BiT ResNet (Kolesnikov et al., 2020): the accurate base classifier of Bai et al. 2024a on CIFAR-10/100 (App. C.1,
Table 2; Table 5 reports ResNet-152 at 98.50% / 91.38% clean).

Source kind ``bit-hf``: a checkpoint file (the MixedNUTS authors' CIFAR fine-tuned BiT-M-R152x2) fetched from the
Hugging Face hub with ``hf_hub_download(repo, filename)`` (or a local ``path``), loaded into timm's BiT ResNetV2::

    source = { kind = "bit-hf", repo = "Bai-YT/MixedNUTS", filename = "bit-r152x2-cifar10.pt",
               arch = "resnetv2_152x2_bit", resize = 128 }

* ``arch`` is a timm BiT name ``resnetv2_{50,101,152}x{W}_bit``; alternatively give ``layers`` (blocks per stage)
  and ``width_factor``. The network is built exactly as timm's ``_create_resnetv2_bit`` builds it.
* Checkpoints in the original Google BiT PyTorch layout (``root.conv``, ``body.blockN.unitMM``, ``head.conv``,
  ``mean``/``std``; the layout of the authors' files and of RobustBench's ``bit_rn_v2``) are converted to timm's
  names; checkpoints already in timm's layout load as they are.
* ``resize``: the authors' CIFAR models upsample their 32x32 input to 128x128 (bilinear) before the network;
  :class:`mixzoo.zoo.loading.InputResize` does the same. Their normalization (x - 0.5) / 0.5 goes in the spec's
  mean/std, which the wrapper applies before the resize: a per-channel affine map commutes with bilinear
  interpolation, so the result equals the original's (up to its 1e-8 added to std). A ``mean``/``std`` stored in the
  checkpoint must agree with the spec's.
* ``std_conv_eps``: the epsilon of the weight standardisation, sqrt(var + eps); timm's BiT uses 1e-8 (the
  default), the Google BiT PyTorch code of the authors' checkpoints 1e-10.
* Optional: ``revision``, ``num_classes`` (default: the spec's), ``path`` (a local file instead of the hub).

timm's ImageNet BiT models (``resnetv2_*_bit.goog_*``) are plain ``kind = "timm"`` entries (plugin
``convnextv2``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mixzoo.core.errors import MissingFileError, RegistryError
from mixzoo.core.plugins import hookimpl

if TYPE_CHECKING:
    import torch
    from torch import nn

    from mixzoo.core.registry import ModelSpec

SOURCE_KINDS = ["bit-hf"]
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
    """Rename a Google-BiT-layout state dict to timm's ResNetV2 names.

    Returns (timm state dict, normalization found in the checkpoint: ``{'mean': ..., 'std': ...}`` or empty).
    A state dict already in timm's layout comes back unchanged.
    """
    if "root.conv.weight" not in state_dict:
        return dict(state_dict), {}
    out: dict[str, torch.Tensor] = {}
    norm: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        if key in ("mean", "std"):
            norm[key] = value
        elif key in _TOP_LEVEL:
            out[_TOP_LEVEL[key]] = value
        elif (m := _UNIT_RE.fullmatch(key)) is not None:
            block, unit, rest = int(m.group(1)), int(m.group(2)), m.group(3)
            part, _, param = rest.partition(".")
            if part not in _UNIT_PARTS:
                out[key] = value  # left for the strict load to report
                continue
            out[f"stages.{block - 1}.blocks.{unit - 1}.{_UNIT_PARTS[part]}.{param}"] = value
        else:
            out[key] = value
    return out, norm


def _check_checkpoint_normalization(norm: Mapping[str, torch.Tensor], spec: ModelSpec, source: str) -> None:
    import torch

    for key, stored in norm.items():
        want = torch.tensor(list(getattr(spec, key)), dtype=torch.float32).flatten()
        have = stored.detach().float().flatten()
        if want.numel() == 1:
            want = want.expand_as(have)
        if want.shape != have.shape or not torch.allclose(want, have, atol=1e-6):
            raise RegistryError(f"{source} normalizes with {key} {have.tolist()} but registry entry {spec.name!r}"
                                f" says {getattr(spec, key)}; set {key} = {have.tolist()}")


def checkpoint_path(spec: ModelSpec) -> Path:
    """The checkpoint file of a bit-hf spec: ``path`` if given, else the hub file (downloaded or cached)."""
    src = spec.source
    if "path" in src:
        path = Path(str(src["path"])).expanduser()
        if not path.is_file():
            raise MissingFileError(f"checkpoint {path} of registry entry {spec.name!r} does not exist; place the"
                                   " file there or fix source.path")
        return path
    if "repo" not in src or "filename" not in src:
        raise RegistryError(f"registry entry {spec.name!r}: a bit-hf source needs repo and filename (or path)")
    from mixzoo.zoo import loading

    return loading.hub_download(str(src["repo"]), str(src["filename"]), src.get("revision"))


def load_bit(spec: ModelSpec, allow_unsafe: bool = False) -> nn.Module:
    """The network of a ``bit-hf`` spec (normalized input at the spec's size -> logits)."""
    from torch import nn

    from mixzoo.zoo import loading

    layers, width = bit_layers(spec.source, spec.name)
    path = checkpoint_path(spec)
    loading.verify_sha256(path, spec.sha256, spec.name)
    state_dict = loading.state_dict_from(loading.load_checkpoint(path, allow_unsafe), str(path))
    state_dict, norm = bit_to_timm(state_dict)
    _check_checkpoint_normalization(norm, spec, str(path))
    network = build_bit(layers, width, int(spec.source.get("num_classes", spec.num_classes)),
                        float(spec.source.get("std_conv_eps", 1e-8)))
    loading.load_state_dict_strict(network, state_dict, str(path))
    resize = spec.source.get("resize")
    return nn.Sequential(loading.InputResize(int(resize)), network) if resize else network


@hookimpl
def mixzoo_load_model(spec: ModelSpec, device: str, allow_unsafe: bool) -> nn.Module | None:
    """Load ``bit-hf`` sources; None for every other kind."""
    if spec.source.get("kind") != "bit-hf":
        return None
    return load_bit(spec, allow_unsafe)
