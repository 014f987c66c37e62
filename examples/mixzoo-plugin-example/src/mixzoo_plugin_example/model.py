"""The model: a linear classifier on mixzoo's 8x8 ``digits``, trained when it is loaded (no weight file).

mixzoo calls :func:`load` for every registry entry whose ``source.kind`` is this plugin's source kind (hook
``mixzoo_model_sources``); the entry comes from hook ``mixzoo_model_specs``. The loader returns a plain
``nn.Module`` taking NORMALIZED input: mixzoo wraps it and applies the entry's ``mean`` / ``std`` to [0, 1] images.
Training is deterministic (fixed seed, full-batch steps on the train split, which never overlaps the calibration
split), so every load has the same weights and the same weight hash.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


def train_linear(seed: int, adv_eps: float, steps: int, mean: float, std: float) -> nn.Module:
    """A 64 -> 10 linear layer trained with full-batch SGD, on FGSM examples of radius ``adv_eps`` when > 0."""
    from mixzoo.zoo.data import load_dataset

    data = load_dataset("digits", "train")
    gen = torch.Generator().manual_seed(seed)
    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    with torch.no_grad():
        net[1].weight.copy_(0.01 * torch.randn(10, 64, generator=gen))
        net[1].bias.zero_()
    opt = torch.optim.SGD(net.parameters(), lr=0.5, momentum=0.9)
    for _ in range(steps):
        inputs = data.images
        if adv_eps > 0:
            x = data.images.clone().requires_grad_(True)
            (grad,) = torch.autograd.grad(F.cross_entropy(net((x - mean) / std), data.labels), x)
            inputs = (data.images + adv_eps * grad.sign()).clamp(0.0, 1.0)
        opt.zero_grad()
        F.cross_entropy(net((inputs - mean) / std), data.labels).backward()
        opt.step()
    return net.eval()


def load(spec: Any, device: str, allow_unsafe: bool) -> nn.Module:
    """The network of a registry entry of this plugin's source kind, trained as its ``source`` table says."""
    src = spec.source
    net = train_linear(int(src["seed"]), float(src["adv_eps"]), int(src["steps"]), spec.mean[0], spec.std[0])
    return net.to(device)
