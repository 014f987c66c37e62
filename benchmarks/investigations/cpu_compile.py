"""Would ``torch.compile`` speed up the zoo CNNs' attack step on this CPU? Forward and forward + input gradient,
µs per image at batch 250, eager vs compiled (inductor), for the shipped ABC and RBC architectures (random weights:
the arithmetic is the same).

    .venv/bin/python benchmarks/investigations/cpu_compile.py

Prints a Markdown table and the machine; results are recorded by hand in pipeline_speed.md.
"""

from __future__ import annotations

import platform
import time

import torch

from mixzoo_plugins.zoo_arch import ConvNet

ARCHS = {"RBC fmnist-pgd": dict(widths=[32, 64], hidden=128),
         "ABC fmnist-std": dict(widths=[32, 64, 128], hidden=256, convs_per_stage=2, batch_norm=True)}


def per_image_us(fn, x: torch.Tensor, reps: int = 10) -> float:
    for _ in range(3):
        fn(x)
    t = time.perf_counter()
    for _ in range(reps):
        fn(x)
    return (time.perf_counter() - t) / reps / x.shape[0] * 1e6


def steps(model: torch.nn.Module):
    def forward(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return model(x)

    def forward_backward(x: torch.Tensor) -> torch.Tensor:
        x = x.clone().requires_grad_(True)
        return torch.autograd.grad(model(x).logsumexp(1).sum(), x)[0]

    return forward, forward_backward


def main() -> None:
    torch.manual_seed(0)
    x = torch.randn(250, 1, 28, 28)
    print(f"{platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__},"
          f" {torch.backends.cpu.get_cpu_capability()}\n")
    print("| model | eager fwd | compiled fwd | eager fwd+grad | compiled fwd+grad |\n|---|---|---|---|---|")
    for name, kwargs in ARCHS.items():
        model = ConvNet(**kwargs).eval().requires_grad_(False)
        eager = [per_image_us(f, x) for f in steps(model)]
        compiled = [per_image_us(f, x) for f in steps(torch.compile(model))]
        print(f"| {name} | {eager[0]:.0f} | {compiled[0]:.0f} | {eager[1]:.0f} | {compiled[1]:.0f} |")


if __name__ == "__main__":
    main()
