"""BiT ResNet (Kolesnikov et al., 2020): the accurate base classifier of Bai et al. 2024a on CIFAR-10/100 (App. C.1,
Table 2; Table 5 reports ResNet-152 at 98.50% / 91.38% clean).

Source kind ``bit-hf``: a checkpoint file (the MixedNUTS authors' CIFAR fine-tuned BiT-M-R152x2) fetched from the
Hugging Face hub with ``hf_hub_download(repo, filename)`` (or a local ``path``), loaded into timm's BiT ResNetV2::

    source = { kind = "bit-hf", repo = "Bai-YT/MixedNUTS", filename = "bit-r152x2-cifar10.pt",
               arch = "resnetv2_152x2_bit", resize = 128 }

* ``arch`` (or ``layers`` and ``width_factor``) and the checkpoint layouts read: :mod:`mixzoo_plugins.bit_arch`.
* ``resize``: the authors' CIFAR models upsample their 32x32 input to 128x128 (bilinear) before the network;
  :class:`mixzoo.zoo.loading.InputResize` does the same. Their normalization (x - 0.5) / 0.5 goes in the spec's
  mean/std, which the wrapper applies before the resize: a per-channel affine map commutes with bilinear
  interpolation, so the result equals the original's (up to its 1e-8 added to std). A ``mean``/``std`` stored in the
  checkpoint must agree with the spec's.
* ``std_conv_eps``: the epsilon of the weight standardisation, sqrt(var + eps); timm's BiT uses 1e-8 (the
  default), the Google BiT PyTorch code of the authors' checkpoints 1e-10.
* Optional: ``revision``, ``num_classes`` (default: the spec's), ``path`` (a local file instead of the hub).

timm's ImageNet BiT models (``resnetv2_*_bit.goog_*``) are plain ``kind = "timm"`` entries (plugin ``timm-hub``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mixzoo.core.errors import MissingFileError, RegistryError
from mixzoo.core.plugins import hookimpl

if TYPE_CHECKING:
    import torch
    from torch import nn

    from mixzoo.core.registry import ModelSpec

SOURCE_KINDS = ["bit-hf"]


def _check_checkpoint_normalization(norm: Mapping[str, torch.Tensor], spec: ModelSpec, source: str) -> None:
    """A :class:`RegistryError` unless a ``mean``/``std`` stored in the checkpoint is the spec's."""
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
    from mixzoo.zoo.hub import hub_download

    return hub_download(str(src["repo"]), str(src["filename"]), src.get("revision"))


def load_bit(spec: ModelSpec, allow_unsafe: bool = False) -> nn.Module:
    """The network of a ``bit-hf`` spec (normalized input at the spec's size -> logits)."""
    from torch import nn

    from mixzoo.zoo.checkpoints import load_checkpoint, load_state_dict_strict, state_dict_from, verify_sha256
    from mixzoo.zoo.input_layers import InputResize
    from mixzoo_plugins.bit_arch import bit_layers, bit_to_timm, build_bit

    layers, width = bit_layers(spec.source, spec.name)
    path = checkpoint_path(spec)
    verify_sha256(path, spec.sha256, spec.name)
    state_dict = state_dict_from(load_checkpoint(path, allow_unsafe), str(path))
    state_dict, norm = bit_to_timm(state_dict)
    _check_checkpoint_normalization(norm, spec, str(path))
    network = build_bit(layers, width, int(spec.source.get("num_classes", spec.num_classes)),
                        float(spec.source.get("std_conv_eps", 1e-8)))
    load_state_dict_strict(network, state_dict, str(path))
    resize = spec.source.get("resize")
    return nn.Sequential(InputResize(int(resize)), network) if resize else network


@hookimpl
def mixzoo_model_sources() -> dict[str, Any]:
    """``bit-hf``: :func:`load_bit`."""
    from mixzoo.zoo.specs import source_loader

    return {"bit-hf": source_loader(__name__, "load_bit")}
