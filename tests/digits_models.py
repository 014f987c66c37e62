"""A small MLP trained in a second on scikit-learn's digits, shared by the attack, Square and transfer tests."""

from __future__ import annotations

import copy
from functools import cache

import torch
from torch import nn


def train_digits_mlp(seed: int = 0, steps: int = 300) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """A standard (non-robust) MLP on digits (8x8 in [0, 1]); returns the frozen model and 300 held-out examples.

    Each (seed, steps) is trained once per test session; every call gets its own copy of the model and tensors, and
    leaves torch's global random state where training it leaves it (training seeds it)."""
    model, x, y, rng_state = _trained(seed, steps)
    torch.set_rng_state(rng_state)
    return copy.deepcopy(model), x.clone(), y.clone()


@cache
def _trained(seed: int, steps: int) -> tuple[nn.Module, torch.Tensor, torch.Tensor, torch.Tensor]:
    from sklearn.datasets import load_digits

    data = load_digits()
    x = torch.tensor(data.data, dtype=torch.float32).view(-1, 1, 8, 8) / 16
    y = torch.tensor(data.target)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x[:1400]), y[:1400]).backward()
        opt.step()
    model.eval().requires_grad_(False)
    return model, x[1400:1700], y[1400:1700], torch.get_rng_state()
