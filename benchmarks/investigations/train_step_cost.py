"""Per-step CPU cost of the Fashion-MNIST zoo recipes (benchmarks/zoo_training.md).

    .venv/bin/python benchmarks/investigations/train_step_cost.py

Times 20 training steps (after 3 warm-up steps) of each recipe at its batch size on random 28x28 inputs: the
attack (PGD / TRADES KL-PGD) and the optimizer step included, data loading not. Prints ms per step and the
implied time per epoch (55,000 training images) and per recipe.
"""

from __future__ import annotations

import time

import torch
from torch import nn

from mixzoo.training.train import _objective, build_network, get_recipe
from mixzoo.zoo.models import Normalize

NAMES = ("fmnist-std", "fmnist-pgd", "fmnist-trades")
TRAIN_IMAGES = 55_000


def step_seconds(name: str, warmup: int = 3, steps: int = 20) -> float:
    r = get_recipe(name)
    torch.manual_seed(0)
    model = nn.Sequential(Normalize(r.mean, r.std), build_network(r))
    opt = torch.optim.AdamW(model.parameters(), lr=r.lr, weight_decay=r.weight_decay)  # the zoo recipes use Adam
    gen = torch.Generator().manual_seed(1)
    x = torch.rand(r.batch_size, 1, 28, 28)
    y = torch.randint(0, 10, (r.batch_size,))

    def one() -> None:
        model.train()
        loss = _objective(model, r, x, y, r.eps if r.train_eps is None else r.train_eps, gen)()
        opt.zero_grad()
        loss.backward()
        opt.step()

    for _ in range(warmup):
        one()
    t = time.perf_counter()
    for _ in range(steps):
        one()
    return (time.perf_counter() - t) / steps


def main() -> None:
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for name in NAMES:
        r = get_recipe(name)
        dt = step_seconds(name)
        per_epoch = dt * TRAIN_IMAGES / r.batch_size
        print(f"{name}: {dt * 1e3:.0f} ms/step, {per_epoch:.0f} s/epoch, {per_epoch * r.epochs / 60:.1f} min for "
              f"{r.epochs} epochs")


if __name__ == "__main__":
    main()
