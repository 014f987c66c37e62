"""Plain projected gradient descent (Madry et al. 2018): fixed step, cross-entropy, L-inf or L2.

Used for quick checks and as the inner maximisation of adversarial training in the built-in zoo.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mixzoo.attacks.arguments import check_attack_settings
from mixzoo.core.errors import InputError


def _l2_normalize(t: torch.Tensor) -> torch.Tensor:
    return t / t.flatten(1).norm(dim=1).clamp_min(1e-12).view(-1, *([1] * (t.ndim - 1)))


def project(delta: torch.Tensor, eps: float, norm: str) -> torch.Tensor:
    """Project perturbations onto the eps-ball of the given norm (per example)."""
    if norm == "Linf":
        return delta.clamp(-eps, eps)
    scale = (eps / delta.flatten(1).norm(dim=1).clamp_min(1e-12)).clamp(max=1.0)
    return delta * scale.view(-1, *([1] * (delta.ndim - 1)))


def pgd(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    eps: float,
    steps: int = 10,
    step_size: float | None = None,
    norm: str = "Linf",
    random_start: bool = True,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Return adversarial images maximising cross-entropy within the eps-ball, clipped to [0, 1].

    ``step_size`` defaults to 2.5 * eps / steps. The model's train/eval mode is left as the caller set it.
    """
    check_attack_settings(eps, norm)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise InputError(f"steps must be an integer >= 1, got {steps!r}")
    if step_size is not None and not step_size >= 0:  # 0 keeps the random start (a check of the start itself)
        raise InputError(f"step_size must be >= 0, got {step_size!r}")
    step_size = 2.5 * eps / steps if step_size is None else step_size
    x0 = images.detach()
    if random_start:
        noise = torch.rand(x0.shape, generator=generator, device=x0.device, dtype=x0.dtype) * 2 - 1
        delta = project(noise * eps if norm == "Linf" else _l2_normalize(noise) * eps * 0.5, eps, norm)
    else:
        delta = torch.zeros_like(x0)
    delta = ((x0 + delta).clamp(0, 1) - x0).requires_grad_(True)
    for _ in range(steps):
        loss = F.cross_entropy(model(x0 + delta), labels)
        (grad,) = torch.autograd.grad(loss, delta)
        with torch.no_grad():
            step = grad.sign() if norm == "Linf" else _l2_normalize(grad)
            delta = project(delta + step_size * step, eps, norm)
            delta = (x0 + delta).clamp(0, 1) - x0
        delta.requires_grad_(True)
    return (x0 + delta).detach()
