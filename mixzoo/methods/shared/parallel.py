"""Training the mixing network on several processes (``torchrun``): the global batch's shard of each rank,
batch norm over the global batch, and the DistributedDataParallel wrapper.

The mixing network has batch norm (:mod:`.network`). Per-rank batch statistics would make N processes train a
different network from one process (each rank normalising by its own shard), and ``torch.nn.SyncBatchNorm`` runs
only on GPUs; :class:`GlobalBatchNorm2d` sums the per-channel sums and squares over the ranks with a differentiable
all-reduce, on CPU (gloo) and CUDA (NCCL) alike, so the statistics, their gradient and the running estimates are
those of the whole batch.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from mixzoo.core import distributed


def shard(n: int, world: distributed.World) -> tuple[int, int]:
    """The rank's slice ``[lo, hi)`` of a global batch of ``n`` examples: contiguous, sizes differing by at most one
    (the first ``n mod size`` ranks take one more), in rank order, so the shards' union is the batch."""
    base, extra = divmod(n, world.size)
    lo = world.rank * base + min(world.rank, extra)
    return lo, lo + base + (world.rank < extra)


class _SumOverRanks(torch.autograd.Function):
    """Sum of a tensor over the ranks; backward sums the gradient over the ranks too (the sum's gradient with
    respect to each rank's input is the sum of every rank's upstream gradient)."""

    @staticmethod
    def forward(ctx: object, t: torch.Tensor) -> torch.Tensor:
        out = t.clone()
        dist.all_reduce(out)
        return out

    @staticmethod
    def backward(ctx: object, grad: torch.Tensor) -> torch.Tensor:
        out = grad.clone()
        dist.all_reduce(out)
        return out


class GlobalBatchNorm2d(nn.BatchNorm2d):
    """``BatchNorm2d`` whose training-mode statistics are those of the batch over all ranks (the same parameters
    and buffers, so the state dict is a ``BatchNorm2d``'s). The variance is ``E[x^2] - E[x]^2`` of the global sums,
    which differs from ``F.batch_norm``'s in float rounding only."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
            return super().forward(x)
        c = x.shape[1]
        count = torch.full((1,), x.numel() // c, dtype=x.dtype, device=x.device)
        sums = _SumOverRanks.apply(torch.cat([x.sum(dim=(0, 2, 3)), (x * x).sum(dim=(0, 2, 3)), count]))
        total = sums[-1]
        mean = sums[:c] / total
        var = (sums[c:2 * c] / total - mean * mean).clamp_min(0)
        if self.track_running_stats and self.running_mean is not None and self.running_var is not None:
            with torch.no_grad():
                self.num_batches_tracked += 1
                m = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked)
                self.running_mean.mul_(1 - m).add_(mean.detach() * m)
                self.running_var.mul_(1 - m).add_(var.detach() * (total / (total - 1)).clamp_min(0) * m)
        y = (x - mean.view(1, c, 1, 1)) * torch.rsqrt(var + self.eps).view(1, c, 1, 1)
        if self.affine:
            y = y * self.weight.view(1, c, 1, 1) + self.bias.view(1, c, 1, 1)
        return y


def wrap(net: nn.Module, device: torch.device) -> nn.Module:
    """``net`` ready for DDP training: every ``BatchNorm2d`` a :class:`GlobalBatchNorm2d` in place (same tensors),
    then DistributedDataParallel (gradients averaged over the ranks in backward; rank 0's buffers, equal on every rank
    with global statistics, broadcast as usual)."""
    from torch.nn.parallel import DistributedDataParallel

    for module in net.modules():
        if type(module) is nn.BatchNorm2d:
            module.__class__ = GlobalBatchNorm2d
    ids = [device.index if device.index is not None else torch.cuda.current_device()] if device.type == "cuda" \
        else None
    return DistributedDataParallel(net, device_ids=ids)
