"""The last gate attack, ``gate-refine`` (:mod:`mixzoo.methods.shared.gate_attacks`): from the point of smallest
mixture margin the gate attacks visited, small signed steps on the margin toward the decision boundary, projected to
the eps-ball and [0, 1]; a step is kept only if the margin falls, else halved."""

from __future__ import annotations

from collections.abc import Callable

import torch

from mixzoo.attacks.margins import MarginRecord

GateForward = Callable[[torch.Tensor], "tuple[torch.Tensor, torch.Tensor]"]


def log_prob_margin(log_probs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``log p_y - max_{j != y} log p_j`` per example: negative exactly where the prediction is wrong."""
    true = log_probs.gather(1, labels[:, None]).squeeze(1)
    return true - log_probs.scatter(1, labels[:, None], float("-inf")).max(dim=1).values


def _step(x: torch.Tensor, x_adv: torch.Tensor, grad: torch.Tensor, size: torch.Tensor, eps: float,
          norm: str) -> torch.Tensor:
    """``x_adv - size * direction(grad)`` projected to the eps-ball around ``x`` and to [0, 1]."""
    view = size.view(-1, *([1] * (x.ndim - 1)))
    if norm == "Linf":
        z = x_adv - view * grad.sign()
        return torch.min(torch.max(z, x - eps), x + eps).clamp(0.0, 1.0)
    g = grad / grad.flatten(1).norm(dim=1).clamp_min(1e-12).view_as(view)
    d = x_adv - view * g - x
    d = d * (eps / d.flatten(1).norm(dim=1).clamp_min(1e-12)).clamp(max=1.0).view_as(view)
    return (x + d).clamp(0.0, 1.0)


def boundary_refine(gate: GateForward, x: torch.Tensor, y: torch.Tensor, start: torch.Tensor, *, eps: float,
                    norm: str, steps: int, first_step: float) -> MarginRecord:
    """Small signed steps on the mixture's log-probability margin from ``start`` (inside the ball), each projected
    to the eps-ball around ``x`` and [0, 1]: a step is kept where the margin falls, otherwise that example's step
    size is halved (from ``first_step`` times eps). Every visited point is offered to the returned record."""
    def margin_and_grad(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        z = z.detach().requires_grad_(True)
        with torch.enable_grad():
            out, _ = gate(z)
            m = log_prob_margin(out, y)
            (grad,) = torch.autograd.grad(m.sum(), z)
        return out.detach(), m.detach(), grad.detach()

    out, m, grad = margin_and_grad(start)
    record = MarginRecord.start(start, out, y)
    cur = start.detach().clone()
    size = torch.full((len(x),), first_step * eps, dtype=x.dtype, device=x.device)
    for _ in range(steps):
        cand = _step(x, cur, grad, size, eps, norm)
        c_out, c_m, c_grad = margin_and_grad(cand)
        record.update(cand, c_out)
        better = c_m < m
        view = better.view(-1, *([1] * (x.ndim - 1)))
        cur, grad = torch.where(view, cand, cur), torch.where(view, c_grad, grad)
        m, size = torch.where(better, c_m, m), torch.where(better, size, size / 2)
    record.check_finite()
    return record
