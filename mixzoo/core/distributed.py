"""Running under ``torchrun``: which process this is, and the few collectives the evaluation needs.

Launched as PyTorch users launch it (``torchrun --nproc-per-node N``, ``--nnodes`` with a rendezvous endpoint,
``srun torchrun``). Batch ``k`` goes to rank ``k mod world_size`` and is attacked exactly as in one process (same
images, same seed), every rank gathers every batch's outcome, and only rank 0 writes what the user sees. Backend:
NCCL on CUDA (one GPU per rank from ``LOCAL_RANK``), else gloo. Collectives time out (``MIXZOO_DIST_TIMEOUT``
seconds; default 1800 with NCCL, 86400 with gloo: a finished rank waits in the gather for the slowest rank's last
batch, and one CPU batch can take over 30 minutes, benchmarks/lineage_bench.md) with a one-line error naming the
variable, so a hung rank fails the job; a rank that raises ends its process, and torchrun then stops the others.
"""

from __future__ import annotations

import atexit
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
from mixzoo.core.options import world_size_env

DEFAULT_TIMEOUT_S = {"nccl": 1800, "gloo": 86400}
MAX_TIMEOUT_S = 366 * 86400  # a year: what a timedelta and every backend hold


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
        return World(dist.get_rank(), dist.get_world_size(), world_size_env()[1])
    return World()


def timeout_s(backend: str) -> float:
    """Seconds a collective of ``backend`` waits for the other ranks: ``MIXZOO_DIST_TIMEOUT`` if set, else
    :data:`DEFAULT_TIMEOUT_S`."""
    raw = os.environ.get("MIXZOO_DIST_TIMEOUT")
    if raw is None:
        return float(DEFAULT_TIMEOUT_S[backend])
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 < value <= MAX_TIMEOUT_S:
        raise InputError(f"MIXZOO_DIST_TIMEOUT={raw!r} is not a positive number of seconds (at most"
                         f" {MAX_TIMEOUT_S}, a year); set it to e.g. 86400")
    return value


def init(device: str = "cpu") -> World:
    """Join the torchrun job if this process is part of one (idempotent); returns :func:`world`. ``device``
    ``"cuda"`` selects NCCL and this rank's GPU (``LOCAL_RANK``); anything else gloo."""
    size, local_rank = world_size_env()
    if size <= 1 or (dist.is_available() and dist.is_initialized()):
        return world()
    if not dist.is_available():
        raise InputError("this torch build has no torch.distributed; run mixzoo without torchrun")
    cuda = device.startswith("cuda")
    backend = "nccl" if cuda else "gloo"
    timeout = datetime.timedelta(seconds=timeout_s(backend))
    if cuda:
        check_gpu_per_rank(local_rank, torch.cuda.device_count())
        torch.cuda.set_device(local_rank)
    try:
        dist.init_process_group(backend, timeout=timeout)
    except (ValueError, RuntimeError) as err:  # e.g. WORLD_SIZE set by hand without torchrun's rendezvous variables
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise InputError(f"cannot join the torch.distributed job (WORLD_SIZE={os.environ.get('WORLD_SIZE')}): "
                         f"{first}; launch with torchrun, or unset WORLD_SIZE for one process") from err
    atexit.register(finish, wait=False)
    w = world()
    if not w.main:  # rank 0 says it once; the other ranks show the user nothing
        warnings.simplefilter("ignore")
    return w


def check_gpu_per_rank(local_rank: int, gpus: int) -> None:
    """NCCL needs one GPU per rank (it refuses two ranks on one device): a one-line error naming the fix when this
    rank's ``LOCAL_RANK`` has no GPU of its own."""
    if local_rank >= gpus:
        raise InputError(f"rank with LOCAL_RANK={local_rank} has no GPU of its own (this machine has {gpus}): NCCL"
                         f" needs one GPU per rank; use torchrun --nproc-per-node {max(gpus, 1)} or fewer, or"
                         " --device cpu (gloo)")


def finish(wait: bool = True) -> None:
    """Leave the job (nothing in one process), first waiting for every rank when ``wait``: a command's success
    (without the wait, a rank that leaves first closes its gloo connections while another still uses them, and
    that rank aborts after its work is done; a rank that failed exits at once, and torchrun stops the others).
    :func:`init` registers ``finish(wait=False)`` for interpreter exit: a gloo process group still alive then is
    torn down with its threads running, which aborts the rank ("terminate called without an active exception")
    after its work is done, and torchrun then reports the whole job as failed."""
    if dist.is_available() and dist.is_initialized():
        if wait:
            barrier()
        dist.destroy_process_group()


def rank_device(device: str) -> str:
    """``device`` for this rank: ``"cuda"`` becomes ``"cuda:LOCAL_RANK"`` under torchrun."""
    size, local_rank = world_size_env()
    return f"cuda:{local_rank}" if device == "cuda" and size > 1 else device


def gather(obj: Any) -> list[Any]:
    """Every rank's ``obj``, in rank order, on every rank (``[obj]`` in one process). Objects are pickled: keep
    them to plain outcomes and CPU tensors."""
    w = world()
    if w.size == 1:
        return [obj]
    out: list[Any] = [None] * w.size
    with _timeout_as_input_error():
        dist.all_gather_object(out, obj)
    return out


def barrier() -> None:
    """Wait for every rank (nothing in one process)."""
    if world().size > 1:
        with _timeout_as_input_error():
            dist.barrier()


@contextlib.contextmanager
def _timeout_as_input_error() -> Iterator[None]:
    """A collective that timed out (gloo and NCCL raise RuntimeError subclasses saying so) becomes the one-line
    error that names the fix; anything else propagates unchanged."""
    try:
        yield
    except RuntimeError as err:
        if "timed out" not in str(err).lower() and "timeout" not in str(err).lower():
            raise
        backend = dist.get_backend() if dist.is_initialized() else "gloo"
        raise InputError(f"rank {world().rank} waited more than {timeout_s(backend):.0f} s for the other ranks (one"
                         " rank's batches took that much longer); set MIXZOO_DIST_TIMEOUT to more seconds and run the"
                         " same command again (finished batches are cached)") from None


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
