"""Where a result was measured: the run record that bench and sanity reports carry.

Float rounding differs between CPU kernels, GPUs and torch releases, and attacks stop on the first point they find
misclassified, so a robustness number is reproducible only with this record: what ran (mixzoo, torch, Python, git
commit), where (CPU model, its vector instruction set as torch dispatches it, threads, GPU) and when it finished.
"""

from __future__ import annotations

import functools
import os
import platform
import sys
from pathlib import Path
from typing import Any

import torch

AUTO_DEVICE = "auto"


def resolve_device(device: str) -> str:
    """``device`` as torch takes it: ``"auto"`` is ``"cuda"`` when a GPU is visible, else ``"cpu"``; any other
    name is returned unchanged (torch checks it where it is used)."""
    if str(device) != AUTO_DEVICE:
        return str(device)
    return "cuda" if torch.cuda.is_available() else "cpu"


@functools.cache  # read once: every attacked batch records it
def cpu_model() -> str:
    """The CPU's marketing name from /proc/cpuinfo (Linux), else :func:`platform.processor`, else the machine."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_capability() -> str:
    """The vector instruction set torch's CPU kernels dispatch to (e.g. ``AVX2``, ``AVX512``), or ``""``."""
    try:
        return str(torch.backends.cpu.get_cpu_capability())
    except (AttributeError, RuntimeError):
        return ""


def describe_machine(device: str = "cpu") -> dict[str, Any]:
    """The hardware a run used: CPU model, cores, vector capability, torch threads, and the GPU for ``cuda``."""
    from mixzoo.core.threads import current

    out: dict[str, Any] = {"cpu": cpu_model(), "cpu_count": os.cpu_count(), "cpu_capability": cpu_capability(),
                           "torch_threads": torch.get_num_threads(), "platform": platform.platform()}
    choice = current()  # why that many (mixzoo.core.threads), when the command chose them
    if choice is not None and choice.threads == out["torch_threads"]:
        out.update(torch_threads_reason=choice.reason, cpus_available=choice.cpus)
    if str(device).startswith("cuda") and torch.cuda.is_available():
        dev = torch.device(device)
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        out["gpu"] = torch.cuda.get_device_name(index)
        out["cuda_version"] = torch.version.cuda
    return out


def machine_summary(device: str | torch.device = "cpu") -> str:
    """A short label of the hardware an attack batch ran on: the GPU's name on ``cuda``, else the CPU model with
    its vector capability and torch's thread count (e.g. ``AMD EPYC (AVX2), 2 threads``)."""
    m = describe_machine(str(device))
    return _hardware(m) if m.get("gpu") else f"{_hardware(m)}, {m['torch_threads']} threads"


def _hardware(m: dict[str, Any]) -> str:
    """The GPU's name if the run used one, else the CPU model with its vector capability."""
    if m.get("gpu"):
        return str(m["gpu"])
    cap = f" ({m['cpu_capability']})" if m.get("cpu_capability") else ""
    return f"{m.get('cpu') or 'unknown machine'}{cap}"


@functools.cache
def source_modified() -> bool | None:
    """Whether the mixzoo checkout has uncommitted changes (then its git commit alone does not say what ran);
    None when it is not a git checkout."""
    from mixzoo.core.card import git_output

    status = git_output("status", "--porcelain", "--untracked-files=no")
    return None if status is None else bool(status)


def run_record(device: str = "cpu", **extra: Any) -> dict[str, Any]:
    """Provenance of one run (:func:`mixzoo.core.card.provenance`: versions, git commit, UTC time) plus the Python
    version and :func:`describe_machine`; ``extra`` is added as is."""
    from mixzoo.core.card import git_commit, provenance

    record = provenance(python_version=platform.python_version(), python=sys.implementation.name,
                        device=str(device), machine=describe_machine(device), **extra)
    if git_commit():
        record["source_modified"] = source_modified()
    return record


def machine_line(record: dict[str, Any] | None) -> str:
    """One human-readable line for report.md, e.g. ``AMD EPYC (AVX2); 2 CPU cores, 2 torch threads; torch 2.14.1;
    mixzoo 0.1.0; commit 718cff78a548; finished 2026-11-23T20:43:54+00:00``."""
    if not record:
        return "machine not recorded"
    m = record.get("machine", {}) or {}
    why = f" ({m['torch_threads_reason']})" if m.get("torch_threads_reason") else ""
    parts = [_hardware(m), f"{m.get('cpu_count', '?')} CPU cores, {m.get('torch_threads', '?')} torch threads{why}",
             f"torch {record.get('torch_version', '?')}", f"mixzoo {record.get('mixzoo_version', '?')}"]
    if record.get("git_commit"):
        modified = " with uncommitted changes" if record.get("source_modified") else ""
        parts.append(f"commit {str(record['git_commit'])[:12]}{modified}")
    return "; ".join(parts) + f"; finished {record.get('created', '?')}"


__all__ = ["cpu_capability", "cpu_model", "describe_machine", "machine_line", "machine_summary", "run_record",
           "source_modified"]
