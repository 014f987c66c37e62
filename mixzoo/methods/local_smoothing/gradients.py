"""Input gradients for locally biased smoothing: per-class Jacobians in one batched backward pass, and dual norms.

The smoothing weights of Bai et al. (local smoothing) (Eq. 1-2, 5, 10) and Bai et al. 2024b (Eq. 3.2-3.3, App. B.1) use
``||grad_x g_i(x)||_*``, the dual norm of the threat model's norm (l1 for l-inf attacks, l2 for l2, l-inf for l1), for
every class ``i``.
:func:`class_gradients` computes the whole Jacobian with one forward pass and one vectorised backward pass over
the ``c`` output directions (``torch.autograd.grad(..., is_grads_batched=True)``, which runs the backward under
``torch.func.vmap``), never a Python loop over classes or examples.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from mixzoo.core.errors import InputError

# threat-model norm -> the order of its dual norm (Hoelder: 1/p + 1/q = 1)
DUAL_ORDER: dict[str, float] = {"Linf": 1.0, "L2": 2.0, "L1": float("inf")}


def check_norm(norm: str, where: str = "norm") -> str:
    """``norm`` if it is a threat model with a dual norm here, else a one-line error."""
    if norm not in DUAL_ORDER:
        raise InputError(f"{where} must be one of {', '.join(DUAL_ORDER)} (the attack's norm), got {norm!r}")
    return norm


def dual_norm(grad: torch.Tensor, norm: str, n_input_dims: int = 3) -> torch.Tensor:
    """``||grad||_*`` over the last ``n_input_dims`` dimensions (C, H, W), for the threat model ``norm``."""
    order = DUAL_ORDER[check_norm(norm)]
    flat = grad.flatten(start_dim=grad.ndim - n_input_dims)
    return torch.linalg.vector_norm(flat, ord=order, dim=-1)


def _input(x: torch.Tensor, create_graph: bool) -> torch.Tensor:
    """``x`` itself when the caller differentiates through it (``create_graph``), else a fresh leaf."""
    if create_graph and x.requires_grad:
        return x
    return x.detach().requires_grad_(True)


def class_gradients(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, *,
                    create_graph: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``(fn(x), J)`` with ``J[i, b] = grad_x fn(x)[b, i]``: every class's input gradient, shape ``(c, B, *x)``.

    One forward pass and one batched backward pass over the ``c`` one-hot output directions. Examples are
    independent (models in eval mode), so the gradient of ``sum_b fn(x)[b, i]`` is each example's own gradient.
    With ``create_graph`` the gradients stay differentiable in ``x`` (an attack differentiates through them).
    """
    with torch.enable_grad():
        xg = _input(x, create_graph)
        out = fn(xg)
        c, b = out.shape[1], out.shape[0]
        eye = torch.eye(c, dtype=out.dtype, device=out.device).unsqueeze(1).expand(c, b, c)
        (jac,) = torch.autograd.grad(out, xg, grad_outputs=eye, is_grads_batched=True, create_graph=create_graph)
    return (out if create_graph else out.detach()), jac


def selected_gradient(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, *,
                      select: str | torch.Tensor = "argmax",
                      create_graph: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``(fn(x), grad_x fn(x)[b, k_b])``: one class per example, one backward pass (Bai et al. (local smoothing), App.
    A.1, Bai et al. 2024b, App. B.1).

    ``select="argmax"`` takes ``k_b = argmax_j fn(x)[b, j]`` (the gradient of ``max_j fn_j``); a tensor gives the
    classes.
    """
    with torch.enable_grad():
        xg = _input(x, create_graph)
        out = fn(xg)
        k = out.detach().argmax(dim=1) if isinstance(select, str) else select
        picked = out.gather(1, k.view(-1, 1)).sum()
        (grad,) = torch.autograd.grad(picked, xg, create_graph=create_graph)
    return (out if create_graph else out.detach()), grad
