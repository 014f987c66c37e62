"""Distributed evaluation: one process with T threads against ``torchrun`` with R processes of T / R threads, on the
same bench.

Runs ``mixzoo bench CARD --attack ATTACK --n-images N --no-curve --no-baseline --no-plots``
twice from empty caches: once as a
single process (``--threads`` intra-op threads), once under ``torchrun --nproc-per-node R`` (``--threads / R``
threads each, or one GPU each with ``--device cuda``). Records both wall times, checks that the two reports agree
example by example (they must: every random draw comes from the example's index), and prints one JSON line with the
machine (``mixzoo.core.machine.machine_summary``). Target: 2 ranks x 1 thread no slower than 1 rank x
2 threads on the 2-core CPU.

    python benchmarks/distributed_speed.py --n 200 --ranks 2 --threads 2            # CPU
    python benchmarks/distributed_speed.py --n 1000 --ranks 8 --device cuda         # one node, 8 GPUs
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(cmd: list[str], threads: int) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def outcomes(out: Path) -> dict[str, str]:
    return {m["kind"]: m["robust_outcomes"] for m in json.loads((out / "report.json").read_text())["models"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--card", default=str(ROOT / "benchmarks/results/cards/fmnist_mixednuts.toml"))
    ap.add_argument("--attack", default="adaptive-apgd")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=50)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2, help="threads of the single process (split over the ranks)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("-O", "--attack-option", action="append", default=[], help="KEY=VALUE, passed to the bench")
    args = ap.parse_args()

    from mixzoo.core.machine import machine_summary

    # --no-plots: the figures are drawn by rank 0 alone (MixedNUTS's needs MMAA on the calibration set): not the
    # bench's sharded work
    bench = ["bench", args.card, "--attack", args.attack, "--n-images", str(args.n), "--no-curve", "--no-baseline",
             "--no-plots",
             "--batch-size", str(args.batch_size), "--device", args.device,
             *[f"-O{o}" for o in args.attack_option]]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        one = run([sys.executable, "-m", "mixzoo.cli", *bench, "--out", str(root / "one"), "--cache-dir",
                   str(root / "c1")], args.threads)
        per_rank = max(args.threads // args.ranks, 1)
        many = run([sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={args.ranks}",
                    "--master-addr=127.0.0.1", f"--master-port={free_port()}", "-m", "mixzoo.cli", *bench,
                    "--out", str(root / "many"), "--cache-dir", str(root / "c2")], per_rank)
        same = outcomes(root / "one") == outcomes(root / "many")
    import torch

    row = {"attack": args.attack, "options": args.attack_option, "n": args.n, "batch_size": args.batch_size,
           "device": args.device,
           "one_process": {"threads": args.threads, "seconds": round(one, 1)},
           "torchrun": {"ranks": args.ranks, "threads_per_rank": per_rank, "seconds": round(many, 1)},
           "speedup": round(one / many, 3), "same_outcomes": same,
           "machine": machine_summary(torch.device(args.device if args.device != "cuda" else "cuda:0")),
           "load_average": os.getloadavg()}
    print(json.dumps(row))


if __name__ == "__main__":
    main()
