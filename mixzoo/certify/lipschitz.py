"""Lipschitz constants of an RBC's class probabilities, for Bai et al. 2024b, Thm 3.5.

Two kinds, never mixed:

- :func:`lipschitz_bound`: a provable global upper bound of ``Lip_p(softmax(h)_i)`` for a network that is a chain
  of known layers (the built-in zoo's convnets; any ``nn.Sequential`` of the layers in :data:`LAYER_BOUNDS`): the
  product of per-layer l2 operator norms (exact per-frequency singular values for convolutions, below), times the
  softmax's own constant sqrt(2)/4. It is a certificate; for deep networks it is loose, and the report says how
  loose with the numbers.
- :func:`estimate_local_lipschitz`: Bai et al. 2024b, App. C.3 Eq. C.1, the largest change of each class probability
  found by PGD within an eps-ball, divided by eps. An attack can miss the true maximum, so this is an **estimate**, not
  a certificate, and results built on it are labelled "estimated".

Convolution bound: a zero-padded, stride-1 convolution on an H x W input equals a crop of the circular
convolution on an (H + k - 1) x (W + k - 1) grid applied to the zero-embedded input (embedding is an isometry, a
crop has norm <= 1), and a circular convolution is block-diagonalised by the 2-D DFT (Sedghi et al. 2019), so its
l2 norm is the largest singular value over the per-frequency ``c_out x c_in`` kernel matrices. A stride > 1 only
subsamples the stride-1 output (norm <= 1). Computed in float64.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from mixzoo.attacks.pgd import project
from mixzoo.certify.radii import SOFTMAX_CLASS_LIPSCHITZ
from mixzoo.core.errors import InputError

__all__ = ["LAYER_BOUNDS", "LipschitzBound", "SOFTMAX_CLASS_LIPSCHITZ", "conv2d_operator_norm",
           "estimate_local_lipschitz", "lipschitz_bound", "lipschitz_layers"]


@dataclass
class LipschitzBound:
    """A provable bound: ``probs`` bounds ``Lip_norm(softmax(h)_i)`` for every class i; ``logits_l2`` the l2
    constant of the logit map; ``layers`` each layer's factor (name, l2 operator-norm bound)."""

    norm: str
    probs: float
    logits_l2: float
    input_dim: int
    layers: list[tuple[str, float]] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"norm": self.norm, "probs": self.probs, "logits_l2": self.logits_l2, "input_dim": self.input_dim,
                "layers": [list(x) for x in self.layers], "kind": "provable upper bound"}


def conv2d_operator_norm(conv: nn.Conv2d, input_hw: tuple[int, int], scale: torch.Tensor | None = None) -> float:
    """Upper bound of the l2 operator norm of ``conv`` (bias ignored) on ``input_hw`` inputs; ``scale`` multiplies
    each output channel (a folded batch norm). See the module docstring for why it is sound."""
    if conv.groups != 1 or tuple(conv.dilation) != (1, 1) or conv.padding_mode != "zeros":
        raise InputError(f"no Lipschitz bound for {conv}: only groups=1, dilation=1, zero padding are supported;"
                         " use a randomized-smoothing RBC (--sigma) instead")
    w = conv.weight.detach().to("cpu", torch.float64)
    if scale is not None:
        w = w * scale.detach().to("cpu", torch.float64)[:, None, None, None]
    kh, kw = w.shape[-2:]
    size = (input_hw[0] + kh - 1, input_hw[1] + kw - 1)
    spectrum = torch.fft.fft2(w, s=size)  # (c_out, c_in, H', W')
    blocks = spectrum.permute(2, 3, 0, 1).reshape(-1, w.shape[0], w.shape[1])
    return float(torch.linalg.matrix_norm(blocks, ord=2).max())


def _bn_scale(bn: nn.BatchNorm2d | nn.BatchNorm1d) -> torch.Tensor:
    scale = torch.rsqrt(bn.running_var.detach().double() + bn.eps)
    return scale * bn.weight.detach().double() if bn.weight is not None else scale


def _pool_factor(pool: nn.MaxPool2d | nn.AvgPool2d) -> float:
    k = pool.kernel_size if isinstance(pool.kernel_size, tuple) else (pool.kernel_size,) * 2
    s = pool.stride if isinstance(pool.stride, tuple) else (pool.stride or pool.kernel_size,) * 2
    d = getattr(pool, "dilation", 1)
    d = d if isinstance(d, tuple) else (d,) * 2
    # windows an input pixel can fall in: at most one per kernel tap, and starts spread over the dilated extent
    windows = math.prod(min(k[i], math.ceil(((k[i] - 1) * d[i] + 1) / s[i])) for i in (0, 1))
    if isinstance(pool, nn.MaxPool2d):  # |max a - max b| <= ||a - b||_inf per window
        return math.sqrt(windows)
    if pool.divisor_override:  # a sum of at most k0*k1 values divided by the override
        return math.sqrt(windows * k[0] * k[1]) / pool.divisor_override
    pad = pool.padding if isinstance(pool.padding, tuple) else (pool.padding,) * 2
    if pool.ceil_mode or (any(pad) and not pool.count_include_pad):  # some windows average fewer values
        return math.sqrt(windows)
    return math.sqrt(windows) / math.sqrt(k[0] * k[1])  # a mean over k0*k1 values has l2 norm 1/sqrt(k0*k1)


_ONE: tuple[type, ...] = (nn.ReLU, nn.Tanh, nn.Flatten, nn.Dropout, nn.Identity, nn.PixelUnshuffle)

LAYER_BOUNDS: dict[type, Callable[[nn.Module], float]] = {
    **{t: (lambda m: 1.0) for t in _ONE},
    nn.LeakyReLU: lambda m: max(1.0, abs(m.negative_slope)),  # slopes 1 and negative_slope
    nn.ELU: lambda m: max(1.0, abs(m.alpha)),  # slope alpha e^x below 0
    nn.Linear: lambda m: float(torch.linalg.matrix_norm(m.weight.detach().double(), ord=2)),
    nn.BatchNorm1d: lambda m: float(_bn_scale(m).abs().max()),
    nn.BatchNorm2d: lambda m: float(_bn_scale(m).abs().max()),
    nn.MaxPool2d: _pool_factor,
    nn.AvgPool2d: _pool_factor,
}
"""l2 operator-norm bound of a layer type (1-Lipschitz activations and permutations such as pixel unshuffle: 1).
Third parties may add types here, or give a layer a float attribute ``lipschitz_l2`` (its own l2 bound);
convolutions are handled by :func:`conv2d_operator_norm` (they need the input size)."""


def lipschitz_layers(model: nn.Module) -> list[nn.Module]:
    """The layers whose composition is ``model``'s forward, in order: a zoo ``BaseClassifier`` is its
    normalisation then its network's ``lipschitz_layers()`` (or the leaves of an ``nn.Sequential``)."""
    parts: list[nn.Module] = []
    normalize, network = getattr(model, "normalize", None), getattr(model, "network", model)
    if normalize is not None and network is not model:
        parts.append(normalize)
    if hasattr(network, "lipschitz_layers"):
        parts += list(network.lipschitz_layers())
    elif isinstance(network, nn.Sequential):
        parts += _flatten(network)
    else:
        raise InputError(f"no Lipschitz bound for {type(network).__name__}: certify bounds chains of known layers"
                         " (an nn.Sequential, or a network with lipschitz_layers()); use a randomized-smoothing RBC"
                         " (--sigma) instead")
    return parts


def _flatten(seq: nn.Sequential) -> list[nn.Module]:
    out: list[nn.Module] = []
    for m in seq:
        out += _flatten(m) if isinstance(m, nn.Sequential) else [m]
    return out


def lipschitz_bound(model: nn.Module, input_size: tuple[int, int, int], norm: str = "l2") -> LipschitzBound:
    """Provable upper bound of ``Lip_norm(softmax(model(x))_i)`` over all x, for every class i.

    The layer chain is checked against ``model``'s forward on random inputs first (a chain that does not compute
    the model would certify the wrong function). l-inf: ``||d||_2 <= sqrt(dim) ||d||_inf``, so the l2 constant
    times sqrt(dim).
    """
    if norm not in ("l2", "linf"):
        raise InputError(f"unknown norm {norm!r}; certify takes l2 or linf")
    layers = lipschitz_layers(model)
    _check_chain(model, layers, input_size)
    factors: list[tuple[str, float]] = []
    x = torch.zeros(1, *input_size)
    i = 0
    with torch.no_grad():
        while i < len(layers):
            layer = layers[i]
            if isinstance(layer, nn.Conv2d):
                bn = layers[i + 1] if i + 1 < len(layers) and isinstance(layers[i + 1], nn.BatchNorm2d) else None
                f = conv2d_operator_norm(layer, tuple(x.shape[-2:]), _bn_scale(bn) if bn is not None else None)
                name = f"{type(layer).__name__}{'+BatchNorm2d' if bn is not None else ''}{tuple(layer.weight.shape)}"
                x = layer(x) if bn is None else bn(layer(x))
                i += 2 if bn is not None else 1
            elif type(layer).__name__ == "Normalize" and hasattr(layer, "std"):
                f, name = float((1.0 / layer.std.double()).abs().max()), "Normalize"
                x, i = layer(x), i + 1
            elif type(layer) in LAYER_BOUNDS:
                f, name = LAYER_BOUNDS[type(layer)](layer), type(layer).__name__
                x, i = layer(x), i + 1
            elif isinstance(getattr(layer, "lipschitz_l2", None), float):
                f, name = float(layer.lipschitz_l2), type(layer).__name__
                x, i = layer(x), i + 1
            else:
                raise InputError(f"no Lipschitz bound for layer {type(layer).__name__}; add its l2 operator norm to"
                                 " mixzoo.certify.lipschitz.LAYER_BOUNDS or use a randomized-smoothing RBC (--sigma)")
            if f != 1.0:
                factors.append((name, f))
    logits_l2 = math.prod(f for _, f in factors)
    dim = math.prod(input_size)
    probs = SOFTMAX_CLASS_LIPSCHITZ * logits_l2 * (math.sqrt(dim) if norm == "linf" else 1.0)
    return LipschitzBound(norm, probs, logits_l2, dim, factors)


def _check_chain(model: nn.Module, layers: list[nn.Module], input_size: tuple[int, int, int]) -> None:
    x = torch.rand(4, *input_size, generator=torch.Generator().manual_seed(0))
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    with torch.no_grad():
        want = model(x.to(device)).float().cpu()
        got = x.to(device)
        for layer in layers:
            got = layer(got)
    if got.shape != want.shape or not torch.allclose(got.float().cpu(), want, rtol=1e-4, atol=1e-4):
        raise InputError(f"the layers of {type(model).__name__} do not compose to its forward, so no Lipschitz"
                         " bound can be derived from them; fix its lipschitz_layers() or use --sigma")


def estimate_local_lipschitz(model: nn.Module, images: torch.Tensor, eps: float, norm: str = "l2",
                             steps: int = 20, top: torch.Tensor | None = None,
                             generator: torch.Generator | None = None) -> torch.Tensor:
    """Bai et al. 2024b, App. C.3 Eq. C.1, per class: ``(n, c)`` estimates of the one-sided local Lipschitz constants
    within the eps-ball, ``max_d (p_y(x) - p_y(x + d)) / eps`` for the top class y and ``max_d (p_i(x + d) - p_i(x)) /
    eps`` for the others, each maximised by its own PGD run (all classes and examples in one batch). An ESTIMATE: PGD
    may miss the maximum, so radii from it are not certificates."""
    if norm not in ("l2", "linf"):
        raise InputError(f"unknown norm {norm!r}; certify takes l2 or linf")
    with torch.no_grad():
        p0 = model(images).softmax(1)
    n, c = p0.shape
    y = p0.argmax(1) if top is None else top
    sign = torch.ones(n, c, device=images.device)
    sign[torch.arange(n), y] = -1.0  # the top class is pushed down, the others up
    x = images.repeat_interleave(c, 0)
    cls = torch.arange(c, device=images.device).repeat(n)
    base, sgn = p0.reshape(-1), sign.reshape(-1)
    delta = torch.zeros_like(x)
    if generator is not None:
        delta = (torch.rand(x.shape, generator=generator, device=generator.device).to(x) * 2 - 1) * eps * 0.5
        if norm == "l2":
            delta = delta / delta.flatten(1).norm(dim=1).clamp_min(1e-12).view(-1, *[1] * (x.dim() - 1)) * eps * 0.5
    step = 2.5 * eps / steps
    best = torch.zeros(n * c, device=images.device)
    for _ in range(steps + 1):
        delta.requires_grad_(True)
        p = model((x + delta).clamp(0, 1)).softmax(1).gather(1, cls[:, None]).squeeze(1)
        gain = sgn * (p - base)
        best = torch.maximum(best, gain.detach())
        (grad,) = torch.autograd.grad(gain.sum(), delta)
        with torch.no_grad():
            if norm == "linf":
                delta = project(delta + step * grad.sign(), eps, "Linf")
            else:
                g = grad / grad.flatten(1).norm(dim=1).clamp_min(1e-12).view(-1, *[1] * (x.dim() - 1))
                delta = project(delta + step * g, eps, "L2")
    return (best / eps).view(n, c)
