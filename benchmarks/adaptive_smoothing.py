"""Adaptive smoothing (001 Sec. 4-5) on the built-in Fashion-MNIST pair: training time and the mixed forward's cost.

    .venv/bin/python benchmarks/adaptive_smoothing.py forward [--n 500] [--width 32]
    .venv/bin/python benchmarks/adaptive_smoothing.py train --setting A --epochs 1 --n-train 5000 --out DIR

``forward``: seconds per forward pass of the ABC + RBC alone and of the adaptively smoothed classifier (both base
models with their taps hooked, plus the mixing network) on ``--n`` evaluation images, median of ``--repeats``
runs, one thread; the ratio is the issue's cost target (<= 1.3x). ``train``: ``mixzoo.methods.fit`` with the given
options (train split only), wall time and the per-epoch validation record, written as JSON next to the card.
Results are appended to ``benchmarks/adaptive_smoothing.json``; ``benchmarks/adaptive_smoothing.md`` summarises
them with the machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch

RESULTS = Path(__file__).with_name("adaptive_smoothing.json")


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpu = f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""
    return f"{os.cpu_count()}-core {cpu}{gpu}, torch {torch.__version__}, {torch.get_num_threads()} thread(s)"


def forward_cost(n: int, repeats: int, width: int, blocks: int) -> dict:
    from mixzoo.methods.adaptive.mixing import AdaptiveClassifier
    from mixzoo.methods.adaptive.network import MixingNetwork
    from mixzoo.methods.adaptive.taps import model_taps, tap_shapes
    from mixzoo.zoo.data import load_dataset
    from mixzoo.zoo.models import load_model

    abc, rbc = load_model("fmnist-std"), load_model("fmnist-pgd")
    x = load_dataset("fashion-mnist", "evaluation", n=n).images
    tg, th = model_taps(abc), model_taps(rbc)
    sg, sh = tap_shapes(abc, tg, (1, 28, 28)), tap_shapes(rbc, th, (1, 28, 28))
    torch.manual_seed(0)  # the cost does not depend on the weights
    net = MixingNetwork([sg["early"][0], sh["early"][0]], [sg["middle"][0], sh["middle"][0]], width=width,
                        blocks=blocks).eval()
    mixed = AdaptiveClassifier(abc, rbc, net).eval()

    def base() -> None:
        abc(x)
        rbc(x)

    def timed(fn) -> float:
        with torch.no_grad():
            fn()  # warm-up
            runs = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                fn()
                runs.append(time.perf_counter() - t0)
        return statistics.median(runs)

    t_base, t_mixed = timed(base), timed(lambda: mixed(x))
    params = sum(p.numel() for p in net.parameters())
    return {"kind": "forward", "n": n, "repeats": repeats, "width": width, "blocks": blocks,
            "mixing_params": params, "base_seconds": t_base, "mixed_seconds": t_mixed, "ratio": t_mixed / t_base}


def train_run(args: argparse.Namespace) -> dict:
    from mixzoo.methods import fit
    from mixzoo.zoo.pairs import check_device

    check_device(args.device)  # a bad --device is a one-line error before the output folder exists
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    options = {"setting": args.setting, "epochs": args.epochs, "n_train": args.n_train, "n_val": args.n_val,
               "steps": [args.steps_lo, args.steps_hi], "width": args.width, "blocks": args.blocks,
               "batch_size": args.batch_size, "lr": args.lr, "ema": args.ema,
               "command": "benchmarks/adaptive_smoothing.py train " + " ".join(
                   f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()
                   if k not in ("what", "out", "n", "repeats", "no_progress", "threads"))}
    t0 = time.perf_counter()
    res = fit("adaptive-smoothing", "fmnist-std", "fmnist-pgd", options=options, out=out / "card.toml",
              eps=0.1, seed=args.seed, progress=not args.no_progress, device=args.device)
    seconds = time.perf_counter() - t0
    return {"kind": "train", "setting": args.setting, "options": options, "seconds": seconds,
            "resumed_epochs": res.summary.get("resumed_epochs"), "history": res.card.params.get("history"),
            "card": str(out / "card.toml")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["forward", "train"])
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--width", type=int, default=32)
    ap.add_argument("--blocks", type=int, default=2)
    ap.add_argument("--setting", default="A")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--n-train", type=int, default=5000)
    ap.add_argument("--n-val", type=int, default=200)
    ap.add_argument("--steps-lo", type=int, default=5)
    ap.add_argument("--steps-hi", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--ema", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="benchmarks/results/adaptive_smoothing")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    ap.add_argument("--device", default="cpu", help="train on this torch device (e.g. cuda)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    result = forward_cost(args.n, args.repeats, args.width, args.blocks) if args.what == "forward" \
        else train_run(args)
    result.update(date=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), machine=machine())
    print(json.dumps(result, indent=2))
    rows = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
    RESULTS.write_text(json.dumps([*rows, result], indent=2) + "\n")


if __name__ == "__main__":
    from mixzoo.core.errors import run_script

    run_script(main)
