"""APGD-T's targets run one after another or stacked into one batch: wall time and outcome on one device.

    .venv/bin/python benchmarks/apgd_stack_speed.py --dataset digits --n 100 --out benchmarks/apgd_stack_speed_cpu
    .venv/bin/python benchmarks/apgd_stack_speed.py --dataset fmnist --n 250 --device cuda --out ..._gpu

Runs :func:`mixzoo.attacks.apgd.apgd_t` (9 targets, ``--n-iter`` iterations, early stop, per-example draws)
on the card's transfer gradient (``forward_pair``) for the first ``--n`` evaluation images, ``--repeats`` times
each way, and writes the medians, the examples broken each way (they must agree) and the machine: the measurement
behind the ``stack`` default of the ``adaptive`` attack's APGD-T (:func:`mixzoo.attacks.apgd.apgd_t`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eval_speed import load, machine  # noqa: E402

from mixzoo.attacks.apgd import ApgdSettings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", choices=("digits", "fmnist"), default="digits")
    ap.add_argument("--card", default=None)
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--n-iter", type=int, default=100)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--out", default="benchmarks/apgd_stack_speed")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    from mixzoo.attacks.apgd import apgd_t

    card_path, model, x, y, eps, norm = load(args)
    with torch.no_grad():
        keep = model(x).argmax(dim=1) == y
    x, y = x[keep], y[keep]
    index = torch.nonzero(keep).squeeze(1).cpu()
    times, broken, cpu = {"sequential": [], "stacked": []}, {}, {"sequential": [], "stacked": []}
    for _ in range(args.repeats):
        for way in times:
            if x.device.type == "cuda":
                torch.cuda.synchronize()
            t0, c0 = time.perf_counter(), time.process_time()
            rec = apgd_t(model.forward_pair, x, y,
                         ApgdSettings(eps=eps, norm=norm, early_stop=True, n_iter=args.n_iter), index=index,
                         stack=way == "stacked")
            broken[way] = index[rec.misclassified.cpu()].tolist()
            times[way].append(time.perf_counter() - t0)
            cpu[way].append(time.process_time() - c0)
    result = {"card": str(card_path), "n": args.n, "clean_correct": len(y), "eps": eps, "device": args.device,
              "machine": machine(args.device),
              "seconds_median": {k: round(statistics.median(v), 2) for k, v in times.items()},
              "seconds_all": {k: [round(t, 2) for t in v] for k, v in times.items()}, "n_iter": args.n_iter,
              "cpu_seconds_all": {k: [round(t, 2) for t in v] for k, v in cpu.items()},
              "broken": broken, "same_outcome": broken["sequential"] == broken["stacked"]}
    Path(args.out).with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("seconds_median", "cpu_seconds_all", "same_outcome")}))


if __name__ == "__main__":
    from mixzoo.core.errors import run_script

    run_script(main)
