"""Speed of the main job on the built-in Fashion-MNIST pair, against its targets, on this machine.

Times ``mixzoo mix`` (a fresh process, as a user runs it) on the default pair with 1,000 calibration images and an
empty cache (target: under 3 minutes), then again with another beta from the cache (target: under 5 seconds).
A bench run is expensive, so its time is read from a ``report.json`` that ``mixzoo bench`` wrote (per-model
seconds; target for ``--attack adaptive --n 1000``: under 15 minutes), or measured here with ``--bench-n``.

    .venv/bin/python benchmarks/pipeline_speed.py [--bench-report mixzoo-out/bench/report.json] [--bench-n N]

Writes benchmarks/pipeline_speed.md and .json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from mixzoo.evaluation.bench import bench

OUT = Path(__file__).with_suffix(".md")
NOTES_MARKER = "<!-- hand-written notes below: kept when this script rewrites the file -->"


def kept_notes(path: Path) -> str:
    """The hand-written part of an existing report (from NOTES_MARKER on), so a re-run does not erase it."""
    text = path.read_text() if path.exists() else ""
    return text[text.index(NOTES_MARKER):] if NOTES_MARKER in text else NOTES_MARKER + "\n"


def time_mix(cache: Path, beta: float) -> dict:
    """``mixzoo mix`` as a user runs it: a fresh process (interpreter start and imports included)."""
    mixzoo = Path(sys.executable).with_name("mixzoo")
    cmd = [str(mixzoo), "mix", "--beta", str(beta), "--n-calib", "1000", "--cache-dir", str(cache), "--out",
           str(cache / f"card-{beta}.toml"), "--json"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    res = json.loads(proc.stdout)
    return {"beta": beta, "wall": wall, "command": " ".join(["mixzoo", *cmd[1:]]),
            "stages": {k: round(v, 2) for k, v in res["seconds"].items()}, "cache_hits": res["cache_hits"],
            "card": {k: res[k] for k in ("s", "p", "c", "alpha", "objective")}}


def bench_summary(report: dict, source: str) -> dict:
    rows = [{"kind": m["kind"], "name": m["name"], "n": m["n"], "seconds": round(m["seconds"], 1)}
            for m in report["models"]]
    total = sum(m["seconds"] for m in report["models"])
    n = report["models"][0]["n"]
    return {"source": source, "attack": report["models"][0]["attack"], "n": n, "rows": rows,
            "model_seconds": total, "per_1000_images": total * 1000 / n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench-report", type=Path, help="a report.json written by `mixzoo bench`")
    ap.add_argument("--bench-n", type=int, help="also run `bench` (adaptive) on this many images and time it")
    args = ap.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        cold = time_mix(Path(tmp), 0.985)
        warm = time_mix(Path(tmp), 0.97)
        bench_info = None
        if args.bench_n:
            t0 = time.perf_counter()
            rep = bench(attack="adaptive", n=args.bench_n, cache_dir=tmp, progress=False, plots=False, curve=None)
            bench_info = bench_summary(rep.to_dict(), f"measured here, n={args.bench_n}")
            bench_info["wall"] = time.perf_counter() - t0
    if bench_info is None and args.bench_report:
        bench_info = bench_summary(json.loads(args.bench_report.read_text()), str(args.bench_report))
    load_after = os.getloadavg()
    results = {"machine": f"{os.cpu_count()} CPU cores ({platform.machine()}), no GPU, torch {torch.__version__}",
               "load_average": [load_before[0], load_after[0]], "mix_cold": cold, "mix_warm": warm,
               "bench": bench_info}
    OUT.with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n")
    lines = [
        "# Main-job speed on the built-in Fashion-MNIST pair (fmnist-std + fmnist-pgd)",
        "",
        f"Machine: {results['machine']}; load average {load_before[0]:.1f} before, {load_after[0]:.1f} after"
        " (2 cores; other processes may share them).",
        "",
        "| step | target | measured (wall) | met |",
        "|---|---|---|---|",
        f"| `mix`, 1,000 calibration images, empty cache | < 180 s | {cold['wall']:.1f} s"
        f" | {'yes' if cold['wall'] < 180 else 'NO'} |",
        f"| `mix` again with beta 0.97 (cached MMAA) | < 5 s | {warm['wall']:.2f} s | "
        f"{'yes' if warm['wall'] < 5 else 'NO'} |",
    ]
    if bench_info:
        est = bench_info["per_1000_images"]
        lines.append(f"| `bench --attack {bench_info['attack']}` (4 models; scaled to 1,000 images from"
                     f" n={bench_info['n']}) | < 900 s | {est:.0f} s | {'yes' if est < 900 else 'NO'} |")
    lines += ["", f"Stages of the cold `mix` (s): {cold['stages']}", "",
              f"Card: {cold['card']}", ""]
    if bench_info:
        lines += [f"Bench timings from {bench_info['source']} (attack seconds per model; the linear baseline's"
                  " alpha matching and the trade-off curve come on top):", "",
                  "| kind | model | n | seconds |", "|---|---|---|---|"]
        lines += [f"| {r['kind']} | {r['name']} | {r['n']} | {r['seconds']} |" for r in bench_info["rows"]]
        lines.append("")
    OUT.write_text("\n".join(lines) + "\n" + kept_notes(OUT))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
