"""Running under ``torchrun``: which process this is, and the few collectives the evaluation needs (issue 29).

mixzoo uses torch.distributed as PyTorch users launch it (``torchrun --nproc-per-node N``, ``--nnodes`` with a
rendezvous endpoint, or ``srun torchrun``), no scheduler of its own. The runner hands out whole batches round-robin
(batch ``k`` to rank ``k mod world_size``), every rank gathers every batch's outcome, and only rank 0 writes what the
user sees. Batch ``k`` is attacked exactly as in one process (same images, same seed), so the results do not
depend on the number of processes. Backend: NCCL when the device is CUDA (one GPU per rank from ``LOCAL_RANK``),
gloo otherwise. Collectives time out (``MIXZOO_DIST_TIMEOUT`` seconds, default 1800) so a lost rank fails the job
instead of hanging it; a rank that raises ends its process, and torchrun then stops the others.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from mixzoo.core.errors import InputError

DEFAULT_TIMEOUT_S = 1800


@dataclass(frozen=True)
class World:
    """This process's place in the job: ``rank`` of ``size`` processes, ``local_rank`` on its node."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        """Rank 0: the one process that prints, writes reports and cards."""
        return self.rank == 0

    def owns(self, batch: int) -> bool:
        """Whether this rank attacks batch number ``batch`` (round-robin)."""
        return batch % self.size == self.rank


def launched() -> bool:
    """Whether this process was started by torchrun (or another launcher that sets ``WORLD_SIZE`` > 1)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


_ALONE = [False]  # inside alone(): this rank works by itself, whatever the process group


@contextlib.contextmanager
def alone() -> Iterator[None]:
    """Run a block on this rank only, as a world of one: what rank 0 does after the others have finished (writing
    the report and its figures) must not enter a collective the other ranks will never join."""
    before, _ALONE[0] = _ALONE[0], True
    try:
        yield
    finally:
        _ALONE[0] = before


def world() -> World:
    """This process's :class:`World`: from the initialised process group, else (or inside :func:`alone`) a single
    process."""
    if _ALONE[0]:
        return World()
    if dist.is_available() and dist.is_initialized():
        return World(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))
    return World()


def init(device: str = "cpu") -> World:
    """Join the torchrun job if this process is part of one (idempotent); returns :func:`world`.

    ``device`` ``"cuda"`` selects NCCL and this rank's GPU (``LOCAL_RANK``); anything else gloo.
    """
    if not launched() or (dist.is_available() and dist.is_initialized()):
        return world()
    if not dist.is_available():
        raise InputError("this torch build has no torch.distributed; run mixzoo without torchrun")
    timeout = datetime.timedelta(seconds=float(os.environ.get("MIXZOO_DIST_TIMEOUT", DEFAULT_TIMEOUT_S)))
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    try:
        dist.init_process_group("nccl" if cuda else "gloo", timeout=timeout)
    except (ValueError, RuntimeError) as err:  # e.g. WORLD_SIZE set by hand without torchrun's rendezvous variables
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise InputError(f"cannot join the torch.distributed job (WORLD_SIZE={os.environ.get('WORLD_SIZE')}): "
                         f"{first}; launch with torchrun, or unset WORLD_SIZE for one process") from err
    w = world()
    if not w.main:  # rank 0 says it once; the other ranks show the user nothing
        warnings.simplefilter("ignore")
    return w


def rank_device(device: str) -> str:
    """``device`` for this rank: ``"cuda"`` becomes ``"cuda:LOCAL_RANK"`` under torchrun."""
    if device == "cuda" and launched():
        return f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    return device


def gather(obj: Any) -> list[Any]:
    """Every rank's ``obj``, in rank order, on every rank (``[obj]`` in one process). Objects are pickled: keep
    them to plain outcomes and CPU tensors."""
    w = world()
    if w.size == 1:
        return [obj]
    out: list[Any] = [None] * w.size
    dist.all_gather_object(out, obj)
    return out


def barrier() -> None:
    """Wait for every rank (nothing in one process)."""
    if world().size > 1:
        dist.barrier()


def check_shards(done: set[int] | dict[int, Any], n: int, batch_size: int, what: str) -> None:
    """Refuse to merge ``what`` while a batch (a shard of the work) is missing, naming the first missing batches
    and their images; the fix is to run the same command again (finished batches are cached and not redone)."""
    n_batches = -(-n // batch_size)
    missing = [i for i in range(n_batches) if i not in done]
    if missing:
        shown = ", ".join(f"{i} (images {i * batch_size}-{min(n, (i + 1) * batch_size) - 1})" for i in missing[:5])
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise InputError(f"{what}: {len(missing)} of {n_batches} batches are missing ({shown}{more}); nothing was"
                         " written: run the same command again to compute them (finished batches are cached)")
