"""The attack's overhead over the networks' own forward and backward time: what mixzoo's APGD adds (step
arithmetic, projections, margin records, the judgement's bookkeeping) on top of the passes through the network it
cannot avoid.

    python benchmarks/attack_overhead.py --json benchmarks/attack_overhead.json

The network: timm's ``--arch`` (default resnet50) with random weights at ``--size`` px (default 224), on ``--n``
images (default 8) labelled with its own predictions, attacked at eps 1e-4 (L-inf) so every image goes through every
iteration. The attack: ``mixzoo.core.plugins.lookup("attack", "apgd")`` with APGD-CE only (``--n-iter``
iterations), run as ``mixzoo bench`` runs it per batch (``Attack.run``: clean pass, attack, float32 judgement).

Accounting. The network is wrapped in a recorder that logs every call the attack makes: its rows and whether
autograd was on. The networks' own time replays that log with the same functions the attack calls: a call with
autograd is :func:`mixzoo.attacks.apgd._loss_and_grad` (forward, cross-entropy, ``torch.autograd.grad`` to the
input: APGD's step), one without is a forward under ``torch.no_grad`` (the clean pass and the judgement). Both
sides go through the same recorder, and the replay's log must equal the attack's. The headline ``overhead`` times
the network where the attack calls it (each APGD step, ``_loss_and_grad``, and each no-grad call, synchronised on a
GPU): ``(attack - network inside it) / network inside it`` summed over ``--reps`` runs, so a load change between
runs cancels; ``overhead_vs_replay`` compares the attack's median time with the replay's (attack and replay
alternate which goes first). The JSON keeps every raw time; both figures are recomputable from them. Timings on a
shared machine are noisy: the machine line says where they ran.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mixzoo.attacks import apgd
from mixzoo.attacks.apgd import _loss_and_grad, ce_loss
from mixzoo.core.machine import machine_line, run_record

TARGET = 0.10  # at most 10 % over the networks' own time


class Recorder(nn.Module):
    """``model`` logging every call as (rows, autograd on), and the seconds of each call made without autograd
    (a call with autograd is timed with its backward pass, around APGD's step: :func:`timed_steps`)."""

    def __init__(self, model: nn.Module, device: str = "cpu"):
        super().__init__()
        self.model, self.device = model, device
        self.log: list[tuple[int, bool]] = []
        self.seconds: list[float] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        grad = torch.is_grad_enabled() and x.requires_grad
        self.log.append((int(x.shape[0]), grad))
        if grad:
            return self.model(x)
        sync(self.device)
        t0 = time.perf_counter()
        out = self.model(x)
        sync(self.device)
        self.seconds.append(time.perf_counter() - t0)
        return out


@contextlib.contextmanager
def timed_steps(device: str) -> Iterator[list[float]]:
    """Seconds of every APGD step (:func:`mixzoo.attacks.apgd._loss_and_grad`: forward, loss, input gradient) the
    attack makes inside the block: the function itself, timed where the attack calls it."""
    seconds: list[float] = []
    inner = apgd._loss_and_grad

    def step(*args: Any, **kwargs: Any) -> Any:
        sync(device)
        t0 = time.perf_counter()
        out = inner(*args, **kwargs)
        sync(device)
        seconds.append(time.perf_counter() - t0)
        return out

    apgd._loss_and_grad = step
    try:
        yield seconds
    finally:
        apgd._loss_and_grad = inner


def build(arch: str, n: int, size: int, device: str) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """(frozen random-weight network, images, its own predictions as labels)."""
    from mixzoo.core.compat import import_timm

    torch.manual_seed(0)
    model = import_timm().create_model(arch, pretrained=False).to(device).eval().requires_grad_(False)
    x = torch.rand(n, 3, size, size, generator=torch.Generator().manual_seed(0)).to(device)
    with torch.no_grad():
        y = model(x).argmax(1)
    return model, x, y


def replay(model: Recorder, log: list[tuple[int, bool]], x: torch.Tensor, y: torch.Tensor) -> None:
    """The network's own passes of ``log``: APGD's forward + loss + input gradient for an autograd call, a no-grad
    forward otherwise, on the first ``rows`` images."""
    for rows, grad in log:
        if grad:
            _loss_and_grad(model, x[:rows], y[:rows], ce_loss, None)
        else:
            with torch.no_grad():
                model(x[:rows])


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def measure(arch: str = "resnet50", n: int = 8, size: int = 224, n_iter: int = 4, reps: int = 2,
            device: str = "cpu", model: nn.Module | None = None) -> dict[str, Any]:
    """Raw attack and network times over ``reps`` alternating repetitions, the call logs and the overhead.
    ``model`` replaces the timm network (tests)."""
    from mixzoo.core.plugins import lookup

    if model is None:
        net, x, y = build(arch, n, size, device)
    else:
        net = model.to(device).eval().requires_grad_(False)
        x = torch.rand(n, 3, size, size, generator=torch.Generator().manual_seed(0)).to(device)
        with torch.no_grad():
            y = net(x).argmax(1)
    rec = Recorder(net, device)
    attack = lookup("attack", "apgd")(eps=1e-4, norm="Linf", seed=0, n_iter=n_iter, components=["apgd-ce"],
                                      n_target_classes=0, batch_size=n)
    with torch.no_grad():
        rec(x[:2])  # warm-up
    attack_s, inside_s, replay_s, logs = [], [], [], []

    def attack_once() -> Any:
        rec.log, rec.seconds = [], []
        sync(device)
        t0 = time.perf_counter()
        with timed_steps(device) as steps:
            res = attack.run(rec, x, y, progress=False, index=torch.arange(n))
        sync(device)
        attack_s.append(time.perf_counter() - t0)
        inside_s.append(sum(steps) + sum(rec.seconds))
        return res

    def replay_once(log: list[tuple[int, bool]]) -> list[tuple[int, bool]]:
        rec.log = []
        sync(device)
        t0 = time.perf_counter()
        replay(rec, log, x, y)
        sync(device)
        replay_s.append(time.perf_counter() - t0)
        return list(rec.log)

    res = attack_once()  # rep 0: the attack first, its calls replayed
    logs.append({"attack": list(rec.log), "replay": replay_once(list(rec.log))})
    for _ in range(1, reps):  # then the replay first, so neither side always runs on a warmer cache
        replayed = replay_once(logs[0]["attack"])
        res = attack_once()
        logs.append({"attack": list(rec.log), "replay": replayed})
    total, inside = sum(attack_s), sum(inside_s)
    a, b = statistics.median(attack_s), statistics.median(replay_s)
    return {
        "what": "mixzoo APGD-CE's time over the network's own forward+backward time for the same calls",
        "arch": arch if model is None else type(model).__name__, "n": n, "size": size, "n_iter": n_iter,
        "reps": reps, "device": device, "eps": 1e-4, "robust": int(res.robust_correct.sum()),
        "attack_seconds": attack_s, "network_seconds_inside_attack": inside_s, "network_seconds_replay": replay_s,
        "calls": logs[0]["attack"], "replay_calls": logs[0]["replay"],
        "calls_equal": all(c["attack"] == c["replay"] for c in logs),
        "overhead": (total - inside) / inside,
        "overhead_note": "(sum attack_seconds - sum network_seconds_inside_attack) / sum network_seconds_inside_attack:"
                         " the network's passes timed where the attack makes them, so load changes between runs"
                         " cancel",
        "median_attack_s": a, "median_network_replay_s": b, "overhead_vs_replay": (a - b) / b, "target": TARGET,
        "machine": machine_line(run_record(device)), "torch": torch.__version__,
        "python": platform.python_version(), "threads": torch.get_num_threads(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", default="resnet50")
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--n-iter", type=int, default=4)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json", default=str(Path(__file__).with_name("attack_overhead.json")))
    args = ap.parse_args()
    out = measure(args.arch, args.n, args.size, args.n_iter, args.reps, args.device)
    Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k not in ("calls", "replay_calls")}, indent=1))


if __name__ == "__main__":
    main()
