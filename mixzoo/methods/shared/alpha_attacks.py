"""Attacks on a mixture whose weight a(x) is computed from the input (a classifier with ``forward_alpha``): the
training-time attacks of adaptive smoothing's settings A, B, C (Bai et al. 2024b, Sec. 4.2, 5.2), which
``local-smoothing-adaptive`` trains with too, and the APGD run of setting D.

Every loss here is the authors' ``SimpleCompLoss`` form, maximised by the adversary:
``(1 - w) * L(h^a(x'), y) + w * BCE(a(x'), 1)`` with ``BCE(a, 1) = -log a``: the second term pushes a(x) down,
toward the non-robust ABC (Sec. 5.2: "a randomly-weighted binary cross-entropy component that aims to decrease
the mixing network output"). ``w = 1`` attacks the mixing network alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from mixzoo.attacks.apgd import ApgdSettings, apgd_run, clean_record, dlr_targeted_loss


def _packed(model: nn.Module) -> Any:
    """``x -> (log-probs, [log-probs | log a])``: APGD judges the first and differentiates the second."""
    def forward(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out, log_a = model.forward_alpha(x)
        return out, torch.cat([out, log_a[:, None]], dim=1)
    return forward


def alpha_loss(base: str, w: torch.Tensor | float) -> Any:
    """The APGD loss ``(1 - w) L + w (-log a)`` on packed logits; ``base``: ``ce``, ``dlr-targeted`` or ``none``."""
    def loss(packed: torch.Tensor, labels: torch.Tensor, target: torch.Tensor | None) -> torch.Tensor:
        out, log_a = packed[:, :-1], packed[:, -1]
        if base == "none":
            return -log_a
        main = F.nll_loss(out, labels, reduction="none") if base == "ce" else dlr_targeted_loss(out, labels, target)
        return (1 - w) * main - w * log_a
    return loss


@dataclass(frozen=True)
class AttackBall:
    """One attack run's threat model and length: radius ``eps`` in ``norm`` (``Linf`` or ``L2``), ``n_iter`` APGD
    iterations."""

    eps: float
    norm: str
    n_iter: int


def alpha_apgd(model: nn.Module, x: torch.Tensor, y: torch.Tensor, ball: AttackBall, *, base: str,
               w: torch.Tensor | float, generator: torch.Generator | None, target: torch.Tensor | None = None,
               noise: torch.Tensor | None = None, draw: tuple[int, str, torch.Tensor] | None = None) -> torch.Tensor:
    """One APGD run (:func:`mixzoo.attacks.apgd.apgd_run`) in ``ball`` on :func:`alpha_loss` (Bai et al. 2024b,
    Sec. 4.2 setting D: ``(1 - w) L + w (-log a(x))``); returns the best point found for the judged output (the
    record's point: misclassified if any visited point was). The random start comes from ``noise`` or the
    per-example ``draw`` (:func:`mixzoo.attacks.apgd.random_start`) if given, else from ``generator``."""
    forward = _packed(model)
    record = clean_record(forward, x, y)
    apgd_run(forward, x, y, record,
             ApgdSettings(eps=ball.eps, norm=ball.norm, n_iter=ball.n_iter, loss=alpha_loss(base, w)), target=target,
             generator=generator, noise=noise, draw=draw)
    return record.x


def pgd_alpha(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, eps: torch.Tensor, steps: int,
              w: torch.Tensor, generator: torch.Generator | None = None, noise: torch.Tensor | None = None,
              norm: str = "Linf") -> torch.Tensor:
    """PGD with per-example radius ``eps`` ([n]) and alpha-loss weight ``w`` (settings A, B: the gradient variant
    is the model's), step 2.5 eps / steps, uniform random start (L-inf; L2: a random direction at eps / 2) from
    ``noise`` (uniform [0, 1), the shape of ``x``) if given, else drawn from ``generator``."""
    e = eps.view(-1, *([1] * (x.ndim - 1)))
    if noise is None:
        if generator is None:
            raise ValueError("pgd_alpha needs a generator or noise")
        noise = torch.rand(x.shape, generator=generator)
    noise = noise.to(x) * 2 - 1
    if norm == "Linf":
        delta = noise * e
    else:
        delta = noise / noise.flatten(1).norm(dim=1).clamp_min(1e-12).view_as(e) * e / 2
    x_adv = (x + delta).clamp(0, 1).detach()
    loss_fn = alpha_loss("ce", w)
    for _ in range(steps):
        x_adv.requires_grad_(True)
        with torch.enable_grad():
            out, log_a = model.forward_alpha(x_adv)
            loss = loss_fn(torch.cat([out, log_a[:, None]], dim=1), y, None).sum()
            (grad,) = torch.autograd.grad(loss, x_adv)
        with torch.no_grad():
            if norm == "Linf":
                x_adv = torch.min(torch.max(x_adv + 2.5 * e / steps * grad.sign(), x - e), x + e)
            else:
                g = grad / grad.flatten(1).norm(dim=1).clamp_min(1e-12).view_as(e)
                d = x_adv + 2.5 * e / steps * g - x
                d = d * (e / d.flatten(1).norm(dim=1).clamp_min(1e-12).view_as(e)).clamp(max=1)
                x_adv = x + d
            x_adv = x_adv.clamp(0, 1).detach()
    return x_adv
