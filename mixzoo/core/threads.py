"""How many intra-op threads torch uses: chosen for the machine and the work, at a command's start.

torch starts a thread per core of the machine, whatever share of them the process may use; on a shared machine
(a cluster job, a container with a CPU quota, CI) those threads spin on oversubscribed cores and the same work
takes many times the CPU. mixzoo uses the CPUs it may run on (:func:`available_cpus`: the affinity mask and the
cgroup quota; ``OMP_NUM_THREADS`` when set), less the machine's load (:func:`load_average`), and at most
:data:`SMALL_NETWORK_THREADS` for small networks, whose layers are too small for more threads to pay for their
synchronisation; :func:`threads_for` is the rule. ``--threads N`` (or ``MIXZOO_THREADS=N``) overrides the choice.
The report records the number and the reason (:func:`mixzoo.core.machine.describe_machine`).
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mixzoo.core.errors import InputError

ENV = "MIXZOO_THREADS"
SMALL_NETWORK_PARAMETERS = 2_000_000
SMALL_NETWORK_THREADS = 2  # the most threads small networks get (their layers gain from a second core)


@dataclass(frozen=True)
class ThreadChoice:
    """The number of intra-op threads, why (one phrase for the report), and whether the user asked for it."""

    threads: int
    reason: str
    requested: bool = False
    cpus: int = 1  # the CPUs the process may use

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
            quotas += _along(root / "sys/fs/cgroup", path, ("cpu.max",))
        elif "cpu" in controllers.split(","):  # cgroup v1: the cpu controller's own hierarchy
            for mount in (controllers, "cpu,cpuacct", "cpu"):
                base = root / "sys/fs/cgroup" / mount
                if base.is_dir():
                    quotas += _along(base, path, ("cpu.cfs_quota_us", "cpu.cfs_period_us"))
                    break
    return min(quotas) if quotas else None


def _along(base: Path, path: str, files: tuple[str, ...]) -> list[float]:
    """The quotas (``quota / period`` in CPUs) in ``base / path`` and each of its parents up to ``base``: read from
    ``files``, ``cpu.max`` (v2: ``QUOTA PERIOD``, ``max`` unlimited) or the v1 quota and period files; a missing
    file, ``max`` or a number that is not positive is no quota."""
    found = []
    here = base / path.strip("/") if path.strip("/") else base
    while True:
        try:
            fields = [word for name in files for word in (here / name).read_text().split()]
            q, p = (float(v) for v in fields) if len(fields) == 2 else (0.0, 0.0)
        except (OSError, ValueError):
            q = p = 0.0
        if q > 0 and p > 0:
            found.append(q / p)
        if here == base or base not in here.parents:
            return found
        here = here.parent


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


def parse_threads(value: Any, what: str, cpus: int) -> int:
    """``value`` as a thread count from 1 to ``cpus`` (the CPUs mixzoo may use), else a one-line error naming
    ``what``."""
    try:
        n = int(str(value).strip())
    except ValueError:
        n = 0
    if not 1 <= n <= cpus:
        raise InputError(f"{what} {value!r} is not a number of threads from 1 to {cpus} (the CPUs this process may"
                         f" use); give e.g. 1 or {cpus}")
    return n


def load_average(root: str | Path = "/") -> float | None:
    """The machine's load: the larger of its 1-minute load average and the tasks runnable right now besides this
    one (``/proc/loadavg``'s fourth field; the average lags a minute behind jobs that just started), None where the
    system reports neither. ``root``: where ``proc/`` is found (``/``; another directory in tests)."""
    try:
        fields = (Path(root) / "proc/loadavg").read_text().split()
        return max(float(fields[0]), int(fields[3].split("/")[0]) - 1)
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.getloadavg()[0] if Path(root) == Path("/") else None
    except (AttributeError, OSError):
        return None


def threads_for(cpus: int, load: float | None, parameters: int | None, *,
                machine_cpus: int | None = None) -> tuple[int, str]:
    """The rule (pure), with its reason: the idle CPUs of ``cpus`` usable ones on a machine of ``machine_cpus``
    (default ``cpus``) under ``load`` (None: idle), the load falling on them in proportion to their share, rounded
    half up, at least one; at most :data:`SMALL_NETWORK_THREADS` while ``parameters`` (the largest network's; None:
    none loaded yet) is below :data:`SMALL_NETWORK_PARAMETERS`."""
    machine_cpus = max(machine_cpus or cpus, cpus)
    busy = 0.0 if load is None else max(0.0, load) * cpus / machine_cpus
    idle = max(1, min(cpus, math.floor(cpus - busy + 0.5)))
    why = f"{idle} of {cpus} CPUs idle (load {load:.2f})" if load is not None else f"{cpus} CPUs (load unknown)"
    if parameters is not None and parameters < SMALL_NETWORK_PARAMETERS and idle > SMALL_NETWORK_THREADS:
        return SMALL_NETWORK_THREADS, f"small networks: {parameters:,} parameters; {why}"
    return idle, why


def choose_threads(requested: int | None = None, *, env: Mapping[str, str] | None = None, root: str | Path = "/",
                   affinity: int | None = None, parameters: int | None = None,
                   load: float | None = None) -> ThreadChoice:
    """``requested`` (``--threads``), else ``MIXZOO_THREADS`` (either from 1 to the CPUs), else :func:`threads_for`
    the CPUs mixzoo may use (:func:`available_cpus`, capped by ``OMP_NUM_THREADS``), ``load`` (None:
    :func:`load_average` now) and ``parameters`` (the largest network's; None before any is loaded)."""
    env = os.environ if env is None else env
    cpus, why = available_cpus(root=root, affinity=affinity)
    if requested is not None:
        return ThreadChoice(parse_threads(requested, "--threads", cpus), "--threads", True, cpus)
    if env.get(ENV, "").strip():
        return ThreadChoice(parse_threads(env[ENV], ENV, cpus), ENV, True, cpus)
    omp = env.get("OMP_NUM_THREADS", "").strip()
    if omp.isdigit() and 0 < int(omp) < cpus:
        cpus, why = int(omp), f"OMP_NUM_THREADS={omp}"
    n, reason = threads_for(cpus, load_average() if load is None else load, parameters,
                            machine_cpus=os.cpu_count() or cpus)
    return ThreadChoice(n, f"{reason}; {why}", False, cpus)


_current: ThreadChoice | None = None
_largest: int | None = None  # the largest network loaded since configure()
_load: float | None = None  # the load average when configure() ran (the command's start)


def configure(requested: int | None = None, *, torch_now: bool = True) -> ThreadChoice:
    """Choose the thread count (:func:`choose_threads`, the load now kept for the whole command) and give it to
    torch, at a command's start; ``torch_now=False`` (``list``, which never needs torch): given with the first
    network loaded (:func:`fit_to_network`), if any."""
    global _current, _largest, _load
    _largest, _load = None, load_average()
    _current = choose_threads(requested, load=_load)
    if torch_now or "torch" in sys.modules:
        _apply(_current)
    return _current


def fit_to_network(network: Any) -> ThreadChoice | None:
    """After loading ``network``: the choice again for the largest network loaded since :func:`configure`; nothing
    without :func:`configure` (a library user's threads are theirs) or when the count was asked for."""
    global _current, _largest
    if _current is None or _current.requested:
        if _current is not None:
            _apply(_current)  # asked for before torch was imported
        return _current
    n = sum(p.numel() for p in network.parameters())
    _largest = n if _largest is None else max(_largest, n)
    _current = choose_threads(None, parameters=_largest, load=_load)
    _apply(_current)
    return _current


def current() -> ThreadChoice | None:
    """The choice in force, None when :func:`configure` was not called."""
    return _current


def reset() -> None:
    """Forget the choice (tests); torch keeps its thread count."""
    global _current, _largest, _load
    _current, _largest, _load = None, None, None


def _apply(choice: ThreadChoice) -> None:
    import torch

    if torch.get_num_threads() != choice.threads:
        torch.set_num_threads(choice.threads)


__all__ = ["ENV", "SMALL_NETWORK_PARAMETERS", "SMALL_NETWORK_THREADS", "ThreadChoice", "affinity_cpus",
           "available_cpus", "cgroup_quota", "choose_threads", "configure", "current", "fit_to_network",
           "load_average", "parse_threads", "reset", "threads_for"]
