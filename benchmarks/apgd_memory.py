"""Memory per image of one APGD step on the ImageNet-size pair (ConvNeXt V2-L + Swin-L, random weights, 224 px),
measured on the CPU: what a GPU must hold per attacked row, and so what caps the batch there.

    python benchmarks/apgd_memory.py --json benchmarks/apgd_memory.json

One APGD step is :func:`mixzoo.attacks.apgd._loss_and_grad` on the mixture's ``forward_pair`` (the pair of
``gpu_scale.py``'s ``imagenet`` measurement, ``--n`` images, default 2): forward with autograd, loss, gradient to the
input. Measured:

* ``graph_bytes``: the tensors autograd saves for the backward pass (``torch.autograd.graph.saved_tensors_hooks``,
  each storage counted once): the activations held between forward and backward, device-independent; per image, and
  for each network alone (the mixture's gradient needs both networks' graphs at once, so they add up);
* ``peak_rss_increase_bytes``: the process's peak resident memory over the step (``resource.getrusage``), the CPU's
  own view (allocator slack included), and the parameters' bytes;
* the stacked-targets arithmetic: APGD-T's 9 targets stacked into one batch hold ``9 x batch`` rows' graphs at once,
  so the JSON also gives the graph of 16 images x 9 targets beside the 65.1 GiB that ``gpu_h200.md`` measured.

Timings are not the point (2-core CPU); the machine line says where it ran.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import sys
import time
from pathlib import Path
from typing import Any

import torch

from mixzoo.attacks.apgd import _loss_and_grad, ce_loss
from mixzoo.core.machine import machine_line, run_record

sys.path.insert(0, str(Path(__file__).resolve().parent))
GIB = 2 ** 30


class SavedTensors:
    """Bytes of the distinct storages autograd saves for backward inside the block."""

    def __init__(self) -> None:
        self.storages: dict[int, int] = {}

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        try:
            s = t.untyped_storage()
            self.storages[s.data_ptr()] = s.nbytes()
        except (RuntimeError, NotImplementedError):
            pass
        return t

    @property
    def bytes(self) -> int:
        return sum(self.storages.values())


def graph_bytes(forward: Any, x: torch.Tensor, y: torch.Tensor) -> tuple[int, float]:
    """(bytes autograd saved, seconds) of one APGD step of ``forward`` on ``x``."""
    saved = SavedTensors()
    t0 = time.perf_counter()
    with torch.autograd.graph.saved_tensors_hooks(saved.pack, lambda t: t):
        _loss_and_grad(forward, x, y, ce_loss, None)
    return saved.bytes, time.perf_counter() - t0


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: kilobytes


def measure(n: int = 2, archs: tuple[str, str] = ("convnextv2_large", "swin_large_patch4_window7_224"),
            device: str = "cpu") -> dict[str, Any]:
    from gpu_scale import imagenet_pair

    t0 = time.perf_counter()
    mix, _, x, y, _, _ = imagenet_pair(n, device, archs)
    build_s = time.perf_counter() - t0
    params = sum(p.numel() * p.element_size() for p in mix.parameters())
    rss0 = peak_rss()
    pair_bytes, step_s = graph_bytes(mix.forward_pair, x, y)
    rss1 = peak_rss()
    abc_bytes, _ = graph_bytes(mix.abc, x, y)
    rbc_bytes, _ = graph_bytes(mix.rbc, x, y)
    per = pair_bytes / n
    return {
        "what": "memory of one APGD step (forward with autograd, loss, input gradient) on the mixture",
        "archs": list(archs), "n": n, "size": 224, "device": device,
        "graph_bytes": pair_bytes, "graph_bytes_per_image": per, "graph_gib_per_image": per / GIB,
        "abc_graph_bytes_per_image": abc_bytes / n, "rbc_graph_bytes_per_image": rbc_bytes / n,
        "parameter_bytes": params, "peak_rss_increase_bytes": rss1 - rss0,
        "peak_rss_increase_gib_per_image": (rss1 - rss0) / n / GIB,
        "stacked_targets_16x9": {
            "label": "ARITHMETIC: graph per image x 16 images x 9 APGD-T targets stacked, plus the parameters",
            "gib": (per * 16 * 9 + params) / GIB, "measured_on_h200_gib": 65.1},
        "unstacked_16": {"label": "ARITHMETIC: graph per image x 16 images, plus the parameters",
                         "gib": (per * 16 + params) / GIB},
        "step_seconds": step_s, "build_seconds": build_s,
        "machine": machine_line(run_record(device)), "torch": torch.__version__,
        "python": platform.python_version(), "threads": torch.get_num_threads(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2)
    ap.add_argument("--abc-arch", default="convnextv2_large")
    ap.add_argument("--rbc-arch", default="swin_large_patch4_window7_224")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json", default=str(Path(__file__).with_name("apgd_memory.json")))
    args = ap.parse_args()
    out = measure(args.n, (args.abc_arch, args.rbc_arch), args.device)
    Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
