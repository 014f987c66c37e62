"""How many intra-op threads torch uses: chosen for the machine and the work, at a command's start.

torch starts as many intra-op threads as the machine has cores, whatever share of them the process may use. On a
shared machine (a cluster node whose job has two of 64 cores, a container with a CPU quota, a laptop running other
jobs, CI) those threads spin on oversubscribed cores: the same work then takes many times the CPU. mixzoo instead
uses the CPUs it may run on, the smallest of

* the CPU affinity mask (:func:`os.sched_getaffinity`; ``taskset``, Slurm, ``docker --cpuset-cpus``),
* the cgroup CPU quota (cgroup v2 ``cpu.max``, cgroup v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``, along the
  process's cgroup path up to the root: ``docker --cpus``, Kubernetes CPU limits),
* ``OMP_NUM_THREADS`` when it is set,

and one thread when every network loaded is small (fewer than :data:`SMALL_NETWORK_PARAMETERS` parameters, such as
the built-in digits and Fashion-MNIST models): their layers are too small for threads to pay for their
synchronisation. ``--threads N`` (or ``MIXZOO_THREADS=N``) overrides the choice. The report records the number and
the reason (:func:`mixzoo.core.machine.describe_machine`).
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mixzoo.core.errors import InputError

ENV = "MIXZOO_THREADS"
SMALL_NETWORK_PARAMETERS = 2_000_000


@dataclass(frozen=True)
class ThreadChoice:
    """The number of intra-op threads, why (one phrase for the report), and whether the user asked for it."""

    threads: int
    reason: str
    requested: bool = False
    cpus: int = 1  # the CPUs the process may use

    def to_dict(self) -> dict[str, Any]:
        return {"threads": self.threads, "reason": self.reason, "requested": self.requested, "cpus": self.cpus}


def cgroup_quota(root: str | Path = "/") -> float | None:
    """The CPU quota of this process's cgroup in CPUs (e.g. 1.5), the smallest along its path; None if unlimited or
    unknown. ``root`` is where ``proc/`` and ``sys/fs/cgroup/`` are found (``/``; another directory in tests)."""
    root = Path(root)
    try:
        lines = (root / "proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    quotas: list[float] = []
    for line in lines:
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":  # cgroup v2: one unified hierarchy
            quotas += _along(root / "sys/fs/cgroup", path, _v2_quota)
        elif "cpu" in controllers.split(","):  # cgroup v1: the cpu controller's own hierarchy
            for mount in (controllers, "cpu,cpuacct", "cpu"):
                base = root / "sys/fs/cgroup" / mount
                if base.is_dir():
                    quotas += _along(base, path, _v1_quota)
                    break
    return min(quotas) if quotas else None


def _along(base: Path, path: str, read: Any) -> list[float]:
    """The quotas ``read`` finds in ``base / path`` and each of its parents up to ``base``."""
    found = []
    here = base / path.strip("/") if path.strip("/") else base
    while True:
        q = read(here)
        if q is not None:
            found.append(q)
        if here == base or base not in here.parents:
            return found
        here = here.parent


def _v2_quota(folder: Path) -> float | None:
    try:
        fields = (folder / "cpu.max").read_text().split()
    except OSError:
        return None
    if len(fields) != 2 or fields[0] == "max":
        return None
    try:
        quota, period = float(fields[0]), float(fields[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def _v1_quota(folder: Path) -> float | None:
    try:
        quota = float((folder / "cpu.cfs_quota_us").read_text().strip())
        period = float((folder / "cpu.cfs_period_us").read_text().strip())
    except (OSError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None


def affinity_cpus() -> int:
    """The CPUs this process may run on (its affinity mask), else :func:`os.cpu_count`."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def available_cpus(*, root: str | Path = "/", affinity: int | None = None) -> tuple[int, str]:
    """The CPUs mixzoo may use, and what limits them: the affinity mask and the cgroup quota (rounded up)."""
    cpus = affinity if affinity is not None else affinity_cpus()
    why = f"{cpus} CPUs in the affinity mask"
    quota = cgroup_quota(root)
    if quota is not None and math.ceil(quota) < cpus:
        cpus, why = max(1, math.ceil(quota)), f"cgroup CPU quota {quota:g}"
    return max(1, cpus), why


def parse_threads(value: Any, what: str) -> int:
    """``value`` as a positive thread count, else a one-line error naming ``what``."""
    try:
        n = int(str(value).strip())
    except ValueError:
        n = 0
    if n < 1:
        raise InputError(f"{what} {value!r} is not a positive number of threads; give e.g. 1 or 4")
    return n


def choose_threads(requested: int | None = None, *, env: Mapping[str, str] | None = None, root: str | Path = "/",
                   affinity: int | None = None, parameters: int | None = None) -> ThreadChoice:
    """The thread count for a run: ``requested`` (``--threads``), else ``MIXZOO_THREADS``, else the CPUs mixzoo
    may use (:func:`available_cpus`, capped by ``OMP_NUM_THREADS``), one for small networks (``parameters``: the
    largest network's parameter count, None before any is loaded)."""
    env = os.environ if env is None else env
    cpus, why = available_cpus(root=root, affinity=affinity)
    if requested is not None:
        return ThreadChoice(parse_threads(requested, "--threads"), "--threads", True, cpus)
    if env.get(ENV, "").strip():
        return ThreadChoice(parse_threads(env[ENV], ENV), ENV, True, cpus)
    omp = env.get("OMP_NUM_THREADS", "").strip()
    if omp.isdigit() and 0 < int(omp) < cpus:
        cpus, why = int(omp), f"OMP_NUM_THREADS={omp}"
    if parameters is not None and parameters < SMALL_NETWORK_PARAMETERS and cpus > 1:
        return ThreadChoice(1, f"small networks: {parameters:,} parameters", False, cpus)
    return ThreadChoice(cpus, why, False, cpus)


_current: ThreadChoice | None = None
_largest: int | None = None  # the largest network loaded since configure()


def configure(requested: int | None = None, *, torch_now: bool = True) -> ThreadChoice:
    """Choose the thread count (:func:`choose_threads`) and give it to torch; commands call it at their start.
    Networks loaded afterwards may lower it to one (:func:`fit_to_network`) unless it was asked for.
    ``torch_now=False`` (commands that never need torch, such as ``list``): torch is not imported for it; the count
    is given to torch with the first network loaded, if any."""
    global _current, _largest
    _largest = None
    _current = choose_threads(requested)
    if torch_now or "torch" in sys.modules:
        _apply(_current)
    return _current


def fit_to_network(network: Any) -> ThreadChoice | None:
    """After loading ``network``: one thread while every network loaded since :func:`configure` is small, the
    machine's count again once a large one is loaded. Does nothing when :func:`configure` was not called (a
    library user's threads are theirs) or the count was asked for."""
    global _current, _largest
    if _current is None or _current.requested:
        if _current is not None:
            _apply(_current)  # asked for before torch was imported
        return _current
    n = sum(p.numel() for p in network.parameters())
    _largest = n if _largest is None else max(_largest, n)
    _current = choose_threads(None, parameters=_largest)
    _apply(_current)
    return _current


def current() -> ThreadChoice | None:
    """The choice in force, None when :func:`configure` was not called."""
    return _current


def reset() -> None:
    """Forget the choice (tests); torch keeps its thread count."""
    global _current, _largest
    _current, _largest = None, None


def _apply(choice: ThreadChoice) -> None:
    import torch

    if torch.get_num_threads() != choice.threads:
        torch.set_num_threads(choice.threads)


__all__ = ["ENV", "SMALL_NETWORK_PARAMETERS", "ThreadChoice", "affinity_cpus", "available_cpus", "cgroup_quota",
           "choose_threads", "configure", "current", "fit_to_network", "parse_threads", "reset"]
