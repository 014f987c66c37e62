"""Loading base classifiers by name (registry spec -> the loader of ``spec.source['kind']``, hook
``mixzoo_model_sources``) and the wrapper every loaded model wears, :class:`BaseClassifier`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import torch
from torch import nn

from mixzoo.core.errors import InputError
from mixzoo.core.registry import ModelSpec, get_spec


class Normalize(nn.Module):
    """``(x - mean) / std`` per channel; the identity when mean = 0 and std = 1."""

    def __init__(self, mean: Sequence[float], std: Sequence[float]):
        super().__init__()
        self.register_buffer("mean", torch.tensor(list(mean), dtype=torch.float32).view(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(list(std), dtype=torch.float32).view(1, -1, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std

    def extra_repr(self) -> str:
        return f"mean={self.mean.flatten().tolist()}, std={self.std.flatten().tolist()}"


class BaseClassifier(nn.Module):
    """A base classifier (ABC or RBC, paper notation g_std / h_rob): [0, 1] images in, logits out; ``weight_hash``
    identifies its network's weights (recorded in mix cards; cache keys add the normalisation,
    :func:`mixzoo.zoo.pairs.model_key`)."""

    def __init__(self, network: nn.Module, spec: ModelSpec):
        super().__init__()
        self.spec = spec
        self.normalize = Normalize(spec.mean, spec.std)
        self.network = network
        self._hash: str | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def num_classes(self) -> int:
        return self.spec.num_classes

    @property
    def weight_hash(self) -> str:
        if self._hash is None:
            self._hash = weight_hash(self.network)
        return self._hash

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.network(self.normalize(x))

    def extra_repr(self) -> str:
        return f"name={self.spec.name!r}, role={self.spec.role}, input_size={self.spec.input_size}"


def weight_hash(module: nn.Module) -> str:
    """sha256 over parameter and buffer names, shapes and bytes, in state-dict order (first 16 hex digits)."""
    h = hashlib.sha256()
    for key, tensor in module.state_dict().items():
        t = tensor.detach().cpu().contiguous()
        h.update(key.encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]


def freeze(module: nn.Module) -> nn.Module:
    """Eval mode, no parameter gradients (attacks still differentiate w.r.t. inputs)."""
    module.eval()
    for p in module.parameters():
        p.requires_grad_(False)
    return module


def load_model(name: str | ModelSpec, device: str | torch.device = "cpu", allow_unsafe: bool = False) -> BaseClassifier:
    """A frozen eval-mode :class:`BaseClassifier` ([0, 1] NCHW images -> logits) by registry name, alias, ``hf-hub:``
    id or RobustBench ``dataset/threat/Name``; ``allow_unsafe`` permits checkpoints that need arbitrary unpickling."""
    from mixzoo.core.plugins import load_network

    spec = name if isinstance(name, ModelSpec) else get_spec(name)
    # any exception inside a plugin's loader (a corrupt file, a bug) becomes one line naming the plugin and model
    network = load_network(spec, str(device), allow_unsafe)
    model = network if isinstance(network, BaseClassifier) else BaseClassifier(network, spec)
    model = freeze(model.to(device))
    check_declared_shape(model, spec, device)
    from mixzoo.core.threads import fit_to_network

    fit_to_network(model)  # one thread for small networks, when the command chose the threads
    return model


def check_declared_shape(model: nn.Module, spec: ModelSpec, device: str | torch.device = "cpu") -> None:
    """One forward pass on a grey image of the declared ``input_size``: the network must take it and return
    ``num_classes`` logits, else a one-line :class:`InputError` naming the model, what its entry declares and what
    the network did (so a wrong entry fails when the model is loaded, not in a later bench's label check)."""
    where = f"model {spec.name!r} ({spec.plugin})"
    size = list(spec.input_size)
    try:
        with torch.no_grad():
            out = model(torch.full((1, *size), 0.5, device=device))
    except Exception as exc:  # noqa: BLE001 - whatever the network raises on that shape, said in one line
        text = " ".join(str(exc).split()) or type(exc).__name__
        raise InputError(f"{where} declares input_size {size} but its network cannot take an image of that size"
                         f" ({type(exc).__name__}: {text}); fix input_size in its registry entry") from None
    if not isinstance(out, torch.Tensor) or out.ndim != 2 or out.shape[0] != 1:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise InputError(f"{where} returns {got} for one image of its input_size {size}, expected logits of shape"
                         f" (1, {spec.num_classes}); its network must return one row of logits per image")
    if out.shape[1] != spec.num_classes:
        raise InputError(f"{where} declares num_classes {spec.num_classes} but its network returns {out.shape[1]}"
                         " logits per image; fix num_classes in its registry entry")


def check_images(images: torch.Tensor, input_size: Sequence[int] | None = None, what: str = "images") -> None:
    """Raise :class:`InputError` unless ``images`` is a float NCHW batch in [0, 1] (of ``input_size`` if given)."""
    if not isinstance(images, torch.Tensor):
        raise InputError(f"{what} must be a torch.Tensor, got {type(images).__name__}")
    if images.ndim != 4:
        raise InputError(f"{what} must be NCHW (4 dimensions), got shape {tuple(images.shape)}")
    if not images.is_floating_point():
        raise InputError(f"{what} must be floating point in [0, 1], got dtype {images.dtype}; divide by 255")
    if input_size is not None and tuple(images.shape[1:]) != tuple(input_size):
        raise InputError(f"{what} have shape {tuple(images.shape[1:])} per example, the model expects"
                         f" {tuple(input_size)}; resize them")
    if images.numel() and (torch.isnan(images).any() or images.min() < 0 or images.max() > 1):
        raise InputError(f"{what} must lie in [0, 1] (got range [{images.min():.3g}, {images.max():.3g}]);"
                         " pass unnormalized images, normalization happens inside the model")


def check_labels(labels: torch.Tensor, n: int, num_classes: int, what: str = "labels") -> None:
    """Raise :class:`InputError` unless ``labels`` is an integer vector of length ``n`` within [0, num_classes)."""
    if not isinstance(labels, torch.Tensor) or labels.ndim != 1 or labels.dtype.is_floating_point:
        raise InputError(f"{what} must be a 1-D integer tensor")
    if labels.shape[0] != n:
        raise InputError(f"{what} has {labels.shape[0]} entries for {n} examples; they must match")
    if labels.numel() and (labels.min() < 0 or labels.max() >= num_classes):
        raise InputError(f"{what} must lie in [0, {num_classes}), got range [{labels.min()}, {labels.max()}]")
