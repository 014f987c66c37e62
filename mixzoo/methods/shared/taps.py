"""Layer taps: the intermediate features of a base classifier that the mixing network reads (Bai et al. 2024b, Sec.
4.3, App. D.1).

Two depths, ``early`` (Bai et al. 2024b, App. D.1: the first convolution / first block) and ``middle`` (the second
block). A model declares them as module names inside its network (the registry field ``taps``, e.g. ``taps = {early =
"features.2", middle = "features.5"}``, or an attribute ``taps`` of a plain module); the published families have
defaults by network class (:data:`FAMILY_TAPS`). The features are captured with forward hooks registered for one
forward pass only, so base models shared with other classifiers are never left hooked.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from mixzoo.core.errors import InputError

DEPTHS = ("early", "middle")

# module names of the published families (timm / RobustBench conventions), by network class name: the first
# alternative whose modules exist is used (RobustBench has two classes named WideResNet); ``nhwc``: the tapped
# tensors are channels-last (Swin's stages), permuted to NCHW. Checked against timm's resnetv2_50x1_bit,
# convnextv2_atto, swin_tiny_patch4_window7_224, resnet18 and robustbench 1.1.1's sources.
FAMILY_TAPS: dict[str, list[dict[str, str]]] = {
    "WideResNet": [{"early": "conv1", "middle": "block2"},  # robustbench wide_resnet.py (block1..3)
                   {"early": "init_conv", "middle": "layer.1"}],  # robustbench dm_rn.py
    "DMWideResNet": [{"early": "init_conv", "middle": "layer.1"}],  # Gowal et al. / Wang et al.
    "DMPreActResNet": [{"early": "conv_2d", "middle": "layer_1"}],
    "ResNetV2": [{"early": "stem", "middle": "stages.1"}],  # timm BiT
    "ResNet": [{"early": "conv1", "middle": "layer2"}],  # torchvision / timm ResNet
    "ConvNeXt": [{"early": "stem", "middle": "stages.1"}],  # timm ConvNeXt (V2)
    "SwinTransformer": [{"early": "patch_embed", "middle": "layers.1", "nhwc": "true"}],  # timm Swin
}


@dataclass(frozen=True)
class Taps:
    """Where a model's two tapped features are: module names inside ``network`` (the module the names resolve in)."""

    early: str
    middle: str
    nhwc: bool = False


def _network(model: nn.Module) -> nn.Module:
    """The module the tap names resolve in: a :class:`~mixzoo.zoo.models.BaseClassifier`'s network, else the model."""
    return getattr(model, "network", model)


def model_taps(model: nn.Module, role: str = "model") -> Taps:
    """The taps of ``model``: its registry entry's ``taps``, else a ``taps`` attribute, else its family's default.

    A model with none is a one-line :class:`InputError` naming the registry field.
    """
    spec = getattr(model, "spec", None)
    declared: Mapping[str, str] | None = dict(getattr(spec, "taps", {}) or {}) or getattr(model, "taps", None)
    if not declared:
        declared = family_taps(_network(model))
    name = spec.name if spec is not None else type(model).__name__
    if not declared:
        raise InputError(f"{role} {name!r} declares no layer taps for adaptive smoothing; add the registry field"
                         " taps = {early = \"MODULE\", middle = \"MODULE\"} (module names inside its network)")
    missing = [d for d in DEPTHS if d not in declared]
    if missing:
        raise InputError(f"{role} {name!r}: registry field 'taps' lacks {missing[0]!r}; give both early and middle")
    return check_taps(model, Taps(declared["early"], declared["middle"],
                                  str(declared.get("nhwc", "")).lower() == "true"), role)


def check_taps(model: nn.Module, taps: Taps, role: str = "model") -> Taps:
    """``taps`` if both name modules of ``model``'s network, else a one-line error naming the tap."""
    modules = dict(_network(model).named_modules())
    spec = getattr(model, "spec", None)
    name = spec.name if spec is not None else type(model).__name__
    for depth in DEPTHS:
        if getattr(taps, depth) not in modules:
            raise InputError(f"{role} {name!r}: taps.{depth} = {getattr(taps, depth)!r} is not a module of its"
                             " network; see `print(model.network)` for the names")
    return taps


def family_taps(network: nn.Module) -> dict[str, str] | None:
    """The default taps of the first module of ``network`` (itself included) whose class is a known family
    (:data:`FAMILY_TAPS`), with that module's path prefixed, so wrappers (input resizing, normalization) are
    looked through."""
    for path, module in network.named_modules():
        names = None
        for found in FAMILY_TAPS.get(type(module).__name__, []):
            names = names or dict(module.named_modules())
            if all(found[d] in names for d in DEPTHS):
                prefix = f"{path}." if path else ""
                return {k: (prefix + v if k in DEPTHS else v) for k, v in found.items()}
    return None


@contextlib.contextmanager
def tapped(model: nn.Module, taps: Taps, store: dict[str, torch.Tensor]) -> Iterator[None]:
    """Within the block, every forward pass of ``model`` writes its tapped features into ``store`` (NCHW)."""
    modules = dict(_network(model).named_modules())
    handles = []
    for depth in DEPTHS:
        def hook(_m: nn.Module, _inp: object, out: torch.Tensor, depth: str = depth) -> None:
            out = out[0] if isinstance(out, tuple | list) else out
            store[depth] = out.permute(0, 3, 1, 2) if taps.nhwc else out
        handles.append(modules[getattr(taps, depth)].register_forward_hook(hook))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def run_tapped(model: nn.Module, taps: Taps, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(logits, {"early": ..., "middle": ...}) of one forward pass."""
    store: dict[str, torch.Tensor] = {}
    with tapped(model, taps, store):
        logits = model(x)
    missing = [d for d in DEPTHS if d not in store]
    if missing:
        raise InputError(f"tap {missing[0]!r} ({getattr(taps, missing[0])}) was not reached in a forward pass; tap a"
                         " module the network calls (a fused conv + batch norm is not called: tap its ReLU)")
    return logits, store


def align(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Two NCHW features at the smaller of their spatial sizes (adaptive average pooling of the larger)."""
    size = (min(a.shape[-2], b.shape[-2]), min(a.shape[-1], b.shape[-1]))
    return (F.adaptive_avg_pool2d(a, size) if tuple(a.shape[-2:]) != size else a,
            F.adaptive_avg_pool2d(b, size) if tuple(b.shape[-2:]) != size else b)


def tap_shapes(model: nn.Module, taps: Taps, input_size: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
    """(C, H, W) of each tapped feature for one input of ``input_size`` (what the mixing network is built for)."""
    device = next(iter(model.parameters()), torch.zeros(())).device
    with torch.no_grad():
        _, feats = run_tapped(model, taps, torch.zeros(1, *input_size, device=device))
    return {d: tuple(feats[d].shape[1:]) for d in DEPTHS}
