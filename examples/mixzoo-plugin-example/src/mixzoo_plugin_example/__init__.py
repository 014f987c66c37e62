"""mixzoo-plugin-example: a third-party mixzoo plugin, complete and small.

Registered through the entry point ``[project.entry-points.mixzoo] example = "mixzoo_plugin_example"``; mixzoo
calls the hooks below (specified in :mod:`mixzoo.hookspecs`):

* ``mixzoo_model_specs``: one registry entry, ``example-digits-linear`` (robust, digits, Linf 0.1);
* ``mixzoo_load_model``: builds models of source kind ``example-digits``; returns None for any other kind;
* ``mixzoo_clamp_functions``: ``tanh-clamp`` for the RBC transform M(s, p, c) (paper 000, Eq. 4).

The model needs no weight file: :func:`linear_digits_classifier` trains it when it is loaded, deterministically
(fixed seed, full-batch updates on mixzoo's ``digits`` train split, which never overlaps the calibration split).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from mixzoo.plugins import hookimpl

__version__ = "0.1.0"
KIND = "example-digits"
SOURCE_KINDS = [KIND]  # what `mixzoo plugins` lists under "loads source kinds"
MODEL_NAME = "example-digits-linear"
CLAMP_NAME = "tanh-clamp"
MEAN, STD = 0.3, 0.4  # normalization the network is trained with; the spec says so and the wrapper applies it


def linear_digits_classifier(seed: int = 0, adv_eps: float = 0.1, steps: int = 150, lr: float = 0.5) -> nn.Module:
    """A linear classifier on 8x8 digits (64 -> 10), trained with full-batch SGD, FGSM examples when
    ``adv_eps > 0``. Returns a network taking NORMALIZED input ((x - MEAN) / STD)."""
    from mixzoo.data import load_dataset

    data = load_dataset("digits", "train")
    images, labels = data.images, data.labels
    gen = torch.Generator().manual_seed(seed)
    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    with torch.no_grad():
        net[1].weight.copy_(0.01 * torch.randn(10, 64, generator=gen))
        net[1].bias.zero_()
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    for _ in range(steps):
        inputs = images
        if adv_eps > 0:
            x = images.clone().requires_grad_(True)
            (grad,) = torch.autograd.grad(F.cross_entropy(net((x - MEAN) / STD), labels), x)
            inputs = (images + adv_eps * grad.sign()).clamp(0.0, 1.0)
        opt.zero_grad()
        F.cross_entropy(net((inputs - MEAN) / STD), labels).backward()
        opt.step()
    return net.eval()


def tanh_clamp(x: torch.Tensor) -> torch.Tensor:
    """A smooth clamp x * (1 + tanh(x)) / 2: about 0 for x << 0, about x for x >> 0, differentiable."""
    return 0.5 * x * (1.0 + torch.tanh(x))


@hookimpl
def mixzoo_model_specs() -> list[dict[str, Any]]:
    return [{
        "name": MODEL_NAME,
        "role": "robust",
        "dataset": "digits",
        "num_classes": 10,
        "input_size": [1, 8, 8],
        "mean": [MEAN],
        "std": [STD],
        "threat_model": "Linf",
        "epsilon": 0.1,
        "source": {"kind": KIND, "seed": 0, "adv_eps": 0.1, "steps": 150},
        "description": "linear digits classifier, FGSM-trained at load time (mixzoo-plugin-example)",
        "license": "MIT",
    }]


@hookimpl
def mixzoo_load_model(spec: Any, device: str, allow_unsafe: bool) -> nn.Module | None:
    if spec.source.get("kind") != KIND:
        return None
    src = spec.source
    return linear_digits_classifier(seed=int(src.get("seed", 0)), adv_eps=float(src.get("adv_eps", 0.1)),
                                    steps=int(src.get("steps", 150)))


@hookimpl
def mixzoo_clamp_functions() -> dict[str, Any]:
    return {CLAMP_NAME: tanh_clamp}
