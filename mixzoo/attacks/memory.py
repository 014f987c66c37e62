"""How many images an attack batch (and APGD-T's stacked targets) can hold: from the device's free memory and the
measured memory of one attack step per image.

What fills a GPU during an attack on a large pair is one APGD step's autograd graph: the forward pass of *both*
networks (the mixture's gradient needs the ABC's and the RBC's activations at once) kept for the backward pass, per
row of the batch; APGD-T's stacked targets (:func:`mixzoo.attacks.apgd.apgd_t`) hold ``targets x examples`` rows,
so they run in chunks of the rows that fit (``stack_rows``), with the same outcome per example. On a CPU the
arithmetic, not memory, is the cost: ``--batch-size auto`` is :data:`CPU_BATCH` there (:func:`auto_batch_size`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from mixzoo.core.errors import InputError

CPU_BATCH = 250  # --batch-size auto on a CPU: the bench's default batch
MAX_AUTO_BATCH = 4096  # beyond it a GPU gains nothing from a larger batch and one batch's outcome is a long wait
MEMORY_FRACTION = 0.8  # of the free memory: room for the allocator's fragmentation and the attack's own tensors
AUTO = "auto"


def parse_batch_size(value: int | str) -> int | str:
    """``value`` as a positive batch size or ``"auto"``; a one-line error naming both forms otherwise."""
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return AUTO
    try:
        size = int(value)
    except (TypeError, ValueError):
        size = 0  # refused below
    if isinstance(value, float) and value != size or size <= 0:
        raise InputError(f"--batch-size must be positive (a number of images) or 'auto', got {value!r}")
    from mixzoo.core.checks import int64

    return int64(size, "--batch-size")


def rows_that_fit(free_bytes: int, bytes_per_row: float, fraction: float = MEMORY_FRACTION,
                  at_most: int | None = None) -> int:
    """How many rows of ``bytes_per_row`` fit in ``fraction`` of ``free_bytes``: at least 1, at most ``at_most``."""
    rows = int(free_bytes * fraction // bytes_per_row) if bytes_per_row > 0 else at_most or MAX_AUTO_BATCH
    return max(rows if at_most is None else min(rows, at_most), 1)


def free_bytes(device: str | torch.device) -> int | None:
    """Free memory of a CUDA ``device`` (driver's view, ``torch.cuda.mem_get_info``) plus what PyTorch's allocator
    holds unused; None elsewhere."""
    dev = torch.device(device)
    if dev.type != "cuda":
        return None
    free, _ = torch.cuda.mem_get_info(dev)
    return int(free + torch.cuda.memory_reserved(dev) - torch.cuda.memory_allocated(dev))


def step_bytes_per_image(forward: Callable[[torch.Tensor], torch.Tensor | tuple[torch.Tensor, torch.Tensor]],
                         images: torch.Tensor, labels: torch.Tensor, rows: int = 2) -> float | None:
    """Bytes one APGD step holds per image on a CUDA device: the growth of allocated memory while the autograd
    graph of ``rows`` images is alive, plus their input gradient, divided by ``rows``. None on other devices (no
    allocator to ask). Does not reset the device's peak-memory statistics."""
    if images.device.type != "cuda":
        return None
    x = images[:rows].detach().clone().requires_grad_(True)
    dev = x.device
    torch.cuda.synchronize(dev)
    base = torch.cuda.memory_allocated(dev)
    with torch.enable_grad():
        out = forward(x)
        loss_logits = out[1] if isinstance(out, tuple | list) else out  # a (judged, loss) pair: the loss side
        loss = F.cross_entropy(loss_logits.float(), labels[:rows].to(dev), reduction="sum")
        held = torch.cuda.memory_allocated(dev) - base
        if loss.requires_grad:
            torch.autograd.grad(loss, x)
    del loss, loss_logits
    return (held + x.numel() * x.element_size()) / x.shape[0]


def auto_batch_size(forward: Callable[[torch.Tensor], torch.Tensor | tuple[torch.Tensor, torch.Tensor]],
                    images: torch.Tensor, labels: torch.Tensor, n: int | None = None) -> int:
    """``--batch-size auto`` for ``n`` images (default: ``len(images)``), measured on the first of ``images``: on a
    CUDA device the attack rows that fit in the free memory (:func:`rows_that_fit` of
    :func:`step_bytes_per_image`, at most :data:`MAX_AUTO_BATCH`); elsewhere :data:`CPU_BATCH`. At most ``n``."""
    n = max(len(images) if n is None else n, 1)
    per = step_bytes_per_image(forward, images, labels)
    if per is None:
        return min(CPU_BATCH, n)
    return rows_that_fit(free_bytes(images.device) or 0, per, at_most=min(MAX_AUTO_BATCH, n))
