"""Train the built-in zoo on this machine's CPU and record timings and measured accuracies.

    .venv/bin/python benchmarks/train_zoo.py [NAME ...] [--out benchmarks/zoo_training.json]

Writes ``plugins/weights/NAME.safetensors`` (+ ``NAME.sha256``) for each recipe, prints the ``[models.NAME]``
registry table to paste into the zoo section of ``mixzoo/registry.toml``, and merges the results into ``--out``
(``benchmarks/zoo_training.md`` summarises them). Same recipe, same machine -> same bytes.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
from pathlib import Path

import torch

from mixzoo.training.train import RECIPES, default_weights_dir, registry_entry, train_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", default=list(RECIPES))
    ap.add_argument("--out", default=str(Path(__file__).with_name("zoo_training.json")))
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--device", default="cpu", help="cpu (the shipped weights) or cuda (exploration)")
    ap.add_argument("--out-dir", default=None, help="weights directory (default plugins/weights)")
    ap.add_argument("--registry-out", default=None, help="also append the registry tables to this file")
    args = ap.parse_args()
    out = Path(args.out)
    results = json.loads(out.read_text()) if out.exists() else {}
    date = datetime.date.today().isoformat()
    machine = f"{os.cpu_count()}-core CPU" if args.device == "cpu" else torch.cuda.get_device_name()
    for name in args.names:
        command = f".venv/bin/python benchmarks/train_zoo.py {name}"
        if args.device != "cpu":
            command += f" --device {args.device}"
        # an explicit directory: this script is how the shipped weights are (re)made, so it replaces them on purpose
        res = train_model(name, args.out_dir or default_weights_dir(), progress=not args.no_progress,
                          device=args.device)
        entry = registry_entry(res, command, date, machine, file=str(res.path) if args.out_dir else None)
        print(res.summary(), flush=True)
        print(entry, flush=True)
        if args.registry_out:
            with open(args.registry_out, "a") as fh:
                fh.write(entry + "\n")
        results[name] = {"command": command, "date": date, "machine": machine, "torch": torch.__version__,
                         "python": sys.version.split()[0], "platform": platform.platform(), "device": args.device,
                         "threads": torch.get_num_threads(), "train_seconds": round(res.seconds, 1),
                         "sha256": res.sha256, "metrics": res.metrics, "metrics_eval500": res.metrics_eval500,
                         "recipe": res.recipe.to_dict()}
        out.write_text(json.dumps(results, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
