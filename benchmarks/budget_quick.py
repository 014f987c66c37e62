"""What ``mixzoo bench --budget B --n 16`` costs with every component on, end to end.

Every component on: the ABC, RBC and card rows under the shared attack, the card's declared extra attacks, the
matched linear baseline (its alpha search and its row) and the trade-off curve, with the plots. Each run is a fresh
``mixzoo`` process with an empty cache directory (so nothing is read from an earlier run; the curve then recomputes
the card's calibration attack, which a cache warm from ``mixzoo mix`` would hold), timed by the wall clock; the
per-row attack seconds and each component's resolved options come from the run's ``report.json``.

The pair is a card (a file or a published name) or ``--abc`` / ``--rbc`` names (the bench then fits the default
method first, and that fit is in the time). The target: a CIFAR-size published pair (PreActResNet-18 + ResNet-18
at 32 px) in under two minutes at ``--budget quick`` on a 2-core CPU.

    .venv/bin/python benchmarks/budget_quick.py --card benchmarks/results/cards/digits_mixednuts.toml \\
        --label digits --budget quick --budget standard
    .venv/bin/python benchmarks/budget_quick.py --abc hf-hub:ORG/resnet18-32px --rbc cifar10/Linf/Wong2020Fast \\
        --data-dir DIR --label standin

Results are appended (by label and budget) to ``benchmarks/budget_quick.json`` with the machine
(:func:`mixzoo.core.machine.run_record`) and the load average before and after; a run on a machine shared with
other jobs is marked "loaded" (1-minute load average above the core count / 4 before or after).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
OUT = HERE / "budget_quick.json"
MIXZOO = Path(sys.executable).with_name("mixzoo")


def run_one(pair: list[str], budget: str, n: int, data_dir: str | None, extra: list[str]) -> dict[str, Any]:
    """One ``mixzoo bench`` process on an empty cache: wall seconds, exit status, the report's figures."""
    with tempfile.TemporaryDirectory(prefix="mixzoo-budget-") as tmp:
        out = Path(tmp) / "out"
        args = [str(MIXZOO), "bench", *pair, "--budget", budget, "--n", str(n), "--out", str(out), "--cache-dir",
                str(Path(tmp) / "cache"), *(["--data-dir", data_dir] if data_dir else []), *extra]
        load_before = os.getloadavg()[0]
        t0 = time.perf_counter()
        proc = subprocess.run(args, capture_output=True, text=True, cwd=tmp, env={**os.environ,
                                                                              "MIXZOO_CACHE": str(Path(tmp) / "c")})
        wall = time.perf_counter() - t0
        load_after = os.getloadavg()[0]
        record: dict[str, Any] = {"budget": budget, "n": n, "command": " ".join(["mixzoo", *args[1:]]),
                                  "exit_status": proc.returncode, "wall_s": round(wall, 1),
                                  "load_1min": [round(load_before, 2), round(load_after, 2)]}
        if proc.returncode != 0:
            record["error"] = (proc.stderr.strip().splitlines() or ["?"])[-1]
            return record
        report = json.loads((out / "report.json").read_text())
        st = report["settings"]
        record.update(
            bench_s=round(st["seconds"], 1),
            rows={m["name"]: {"attack_s": round(m["seconds"], 1), "clean": m["clean_accuracy"],
                              "robust": m["robust_accuracy"],
                              "components": {c["name"]: round(c["seconds"], 1) for c in m["components"]}}
                  for m in report["models"]},
            components=st.get("components"), attack=st["attack"], dataset=report["dataset"]["name"],
            run=report["run"])
    return record


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--card", help="a mix card file or a published card's name")
    ap.add_argument("--abc", help="the ABC's name (without --card: the bench fits the default method first)")
    ap.add_argument("--rbc", help="the RBC's name")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--label", required=True, help="how the results file names this pair")
    ap.add_argument("--budget", action="append", help="quick | standard | strong (repeatable; default quick)")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("extra", nargs="*", help="more `mixzoo bench` arguments, after --")
    args = ap.parse_args(argv)
    if not args.card and not (args.abc and args.rbc):
        ap.error("pass --card, or --abc and --rbc")
    card = str(Path(args.card).resolve()) if args.card and Path(args.card).exists() else args.card
    data_dir = str(Path(args.data_dir).resolve()) if args.data_dir else None  # the runs start in a temporary folder
    pair = ([card] if card else []) + (["--abc", args.abc] if args.abc else []) + (
        ["--rbc", args.rbc] if args.rbc else [])
    from mixzoo.core.machine import run_record

    cores = os.cpu_count() or 1
    results = json.loads(args.out.read_text()) if args.out.exists() else {"runs": []}
    for budget in args.budget or ["quick"]:
        record = run_one(pair, budget, args.n, data_dir, args.extra)
        record["label"] = args.label
        record["loaded"] = max(record["load_1min"]) > cores / 4
        record.setdefault("run", run_record("cpu"))
        state = "loaded" if record["loaded"] else "quiet"
        print(f"{args.label} --budget {budget} --n {args.n}: {record['wall_s']} s wall"
              f" ({state}; load {record['load_1min']}), exit {record['exit_status']}"
              + (f": {record['error']}" if "error" in record else ""))
        results["runs"] = [r for r in results["runs"] if (r["label"], r["budget"], r["n"]) != (
            args.label, budget, args.n)] + [record]
        args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
