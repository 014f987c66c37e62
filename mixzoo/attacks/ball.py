"""The threat model's ball in AutoAttack's arithmetic: APGD's random start and its projected momentum step, L-inf
and L2 (``pyautoattack.autopgd_base``)."""

from __future__ import annotations

import torch

from mixzoo.core import rng

NORMS = ("Linf", "L2")


def view(t: torch.Tensor, ndim: int) -> torch.Tensor:
    """Per-example values ``t`` (``[n]``) shaped to broadcast over ``ndim``-dimensional tensors."""
    return t.view(-1, *([1] * (ndim - 1)))


def normalize(t: torch.Tensor, norm: str) -> torch.Tensor:
    """Each example of ``t`` divided by its L-inf or L2 norm (+ 1e-12)."""
    flat = t.flatten(1)
    size = flat.abs().max(dim=1).values if norm == "Linf" else (flat ** 2).sum(dim=1).sqrt()
    return t / (view(size, t.ndim) + 1e-12)


def _l2(t: torch.Tensor) -> torch.Tensor:
    return view((t.flatten(1) ** 2).sum(dim=1).sqrt(), t.ndim)


def start_noise(draw: tuple[int, str, torch.Tensor], norm: str, shape: torch.Size) -> torch.Tensor:
    """The per-example draw of :func:`random_start` for ``draw = (seed, stream, index)``: uniform in [-1, 1)
    (L-inf) or standard normal (L2), ``[len(index), *shape]``, on the CPU."""
    seed, stream, index = draw
    if norm == "Linf":
        return 2 * rng.uniform(seed, stream, index.cpu(), shape) - 1
    return rng.normal(seed, stream, index.cpu(), shape)


def random_start(x: torch.Tensor, eps: float, norm: str, generator: torch.Generator | None = None, *,
                 draw: tuple[int, str, torch.Tensor] | None = None, noise: torch.Tensor | None = None
                 ) -> torch.Tensor:
    """AutoAttack's starting point: x plus eps times a normalised uniform (L-inf) or Gaussian (L2) draw, in [0, 1].

    With ``generator`` the draw is made on the CPU from it (as AutoAttack does), so seeded runs agree across devices
    and follow AutoAttack's trajectories for the same batch. With ``draw = (seed, stream, index)`` each example's draw
    is a function of its index in the whole data set (:mod:`mixzoo.core.rng`), whatever batch it is in.
    ``noise``: the draw itself (as :func:`start_noise` makes it, the shape of ``x``), e.g. one rank's rows of a draw
    made for a whole batch.
    """
    if noise is None and draw is not None:
        noise = start_noise(draw, norm, x.shape[1:])
    elif noise is None:
        if generator is None:
            raise ValueError("random_start needs a generator or a per-example draw")
        noise = 2 * torch.rand(x.shape, generator=generator) - 1 if norm == "Linf" else torch.randn(
            x.shape, generator=generator)
    return (x + eps * normalize(noise.to(device=x.device, dtype=x.dtype), norm)).clamp(0.0, 1.0)


def _project(z: torch.Tensor, x: torch.Tensor, eps: float, norm: str) -> torch.Tensor:
    """``z`` projected onto the eps-ball around ``x``, then clipped to [0, 1]."""
    if norm == "Linf":
        return torch.clamp(torch.min(torch.max(z, x - eps), x + eps), 0.0, 1.0)
    return torch.clamp(x + normalize(z - x, "L2") * torch.clamp(_l2(z - x), max=eps), 0.0, 1.0)


def project_step(x: torch.Tensor, x_adv: torch.Tensor, x_new: torch.Tensor, eps: float, norm: str,
                 a: float, prev_step: torch.Tensor) -> torch.Tensor:
    """AutoAttack's projected step with momentum: z = P(x_new); x' = P(x_adv + a (z - x_adv) + (1-a) prev)."""
    z = _project(x_new, x, eps, norm)
    return _project(x_adv + (z - x_adv) * a + prev_step * (1 - a), x, eps, norm)
