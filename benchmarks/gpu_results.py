"""Unpack a run of benchmarks/gpu_checks.sh and print its figures, ready to record.

    python benchmarks/gpu_results.py PATH/results.tgz [--dest benchmarks/results/gpu_YYYYMMDD] [--force]

Unpacks ``results.tgz`` into ``--dest`` (default ``benchmarks/results/gpu_<UTC date of the run>``; refuses to
overwrite without ``--force``) and prints: the machine (env.txt), each step's exit status and seconds with the GPU
utilisation and memory nvidia-smi sampled during it (mean / max, from smi.csv and steps.tsv), the NCCL comparison,
the scale-out figures and the labelled ESTIMATE, the export differences, the certified accuracies at l2 radius 0.25
and 0.5 (randomized smoothing hard and soft, Lipschitz; alone and mixed at the matched alpha) and the head of the
evaluation-speed report.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import tarfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def load(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def steps(root: Path) -> list[dict[str, Any]]:
    rows = []
    for line in (root / "steps.tsv").read_text().splitlines() if (root / "steps.tsv").exists() else []:
        name, start, end, rc = line.split("\t")
        rows.append({"name": name, "start": float(start), "end": float(end), "rc": rc})
    return rows


def smi_samples(root: Path) -> list[tuple[float, float, float]]:
    """(unix time, utilisation %, memory MiB) from smi.csv (nvidia-smi timestamps read as UTC)."""
    out = []
    path = root / "smi.csv"
    for line in path.read_text().splitlines() if path.exists() else []:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3:
            continue
        try:
            t = dt.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=dt.UTC)
            out.append((t.timestamp(), float(parts[1]), float(parts[2])))
        except ValueError:
            continue
    return out


def utilisation(samples: list[tuple[float, float, float]], start: float, end: float) -> str:
    inside = [(u, m) for t, u, m in samples if start <= t <= end]
    if not inside:
        return "no nvidia-smi samples"
    util = [u for u, _ in inside]
    return (f"GPU util mean {statistics.mean(util):.0f}% max {max(util):.0f}%, memory used max"
            f" {max(m for _, m in inside) / 1024:.1f} GiB ({len(inside)} samples)")


def print_scale(root: Path) -> None:
    for pair in ("fmnist", "imagenet"):
        m = load(root / "scale" / f"{pair}.json")
        if not m:
            print(f"  {pair}: no result (see scale/{pair}.log)")
            continue
        print(f"  {pair} {m.get('archs') or ''}: {m['n']} images, batch {m['batch_size']}, eps {m['eps']:g},"
              f" {m.get('gpu') or m['device']}")
        for name, ph in m["phases"].items():
            line = f"    {name}: {ph['seconds']:.1f} s, {ph['images_per_s']:.2f} images/s"
            if "peak_memory_gib" in ph:
                line += f", peak {ph['peak_memory_gib']:.1f} GiB"
            if "scaled_to_defaults" in ph and name != "forward":
                sc = ph["scaled_to_defaults"]
                line += f"; scaled to default iterations: {sc['images_per_s']:.3g} images/s [{sc['label']}]"
            if name == "attack":
                line += f"; clean {ph['clean_correct']}, robust {ph['robust']}"
            print(line)
        if "attack" in m["phases"]:
            print("      " + ", ".join(f"{c['name']} {c['seconds']:.1f}s/{c['newly_broken']}"
                                      for c in m["phases"]["attack"]["components"]))
    e = load(root / "scale" / "estimate.json")
    if e:
        print(f"  {e['label']}: {e['images']} ImageNet images, batch {e['batch_size']}: "
              + "; ".join(f"{r['gpus']} GPU(s) {r['total_hours']:.1f} h (evaluation {r['evaluation_hours']:.1f} h"
                          f" + MMAA {r['calibration_mmaa_hours'] or 0:.1f} h)" for r in e["rows"]))
        print(f"    basis: {e['basis']}")


def print_certify(root: Path) -> None:
    s = load(root / "certify" / "summary.json")
    if not s:
        print("  no certify/summary.json (see certify_rs.log, certify_lip.log)")
        return
    print(f"  {s.get('machine_line')}")
    for name, r in s.get("rs", {}).items():
        for kind, v in r["kinds"].items():
            at = v["at"]
            print(f"  {name} {kind:4s} n={r['n']} ({r['samples']} samples, {r['monte_carlo_seconds_soft_and_hard']} s):"
                  f" r=0.25 alone {100 * at['0.25']['alone']:.1f}% / mixed {100 * at['0.25']['mixture']:.1f}%,"
                  f" r=0.5 alone {100 * at['0.5']['alone']:.1f}% / mixed {100 * at['0.5']['mixture']:.1f}%"
                  f" (alpha {v['matched_alpha']}, clean alone {100 * v['clean'][0]:.1f}%)")
    for name, v in s.get("lipschitz", {}).items():
        at = v["at"]
        print(f"  {name} n={v['n']} ({v['certify_seconds_end_to_end']} s):"
              f" r=0.25 alone {100 * at['0.25']['alone']:.1f}% / mixed {100 * at['0.25']['mixture']:.1f}%,"
              f" r=0.5 alone {100 * at['0.5']['alone']:.1f}% / mixed {100 * at['0.5']['mixture']:.1f}%"
              f" (alpha {v['matched_alpha']}, clean alone {100 * v['clean'][0]:.1f}%)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tgz")
    ap.add_argument("--dest", default=None)
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args()
    tgz = Path(args.tgz)
    with tarfile.open(tgz) as tar:
        st = next((m for m in tar.getmembers() if m.name.endswith("steps.tsv")), None)
        when = dt.datetime.fromtimestamp(st.mtime if st else tgz.stat().st_mtime, dt.UTC)
        dest = Path(args.dest) if args.dest else HERE / "results" / f"gpu_{when:%Y%m%d}"
        if dest.exists() and any(dest.iterdir()) and not args.force:
            sys.exit(f"{dest} exists and is not empty; pass --force or another --dest")
        dest.mkdir(parents=True, exist_ok=True)
        tar.extractall(dest, filter="data")
    summary = tgz.with_name("summary.txt")
    if summary.exists():
        (dest / "summary.txt").write_text(summary.read_text())
    print(f"unpacked into {dest}")
    env = dest / "env.txt"
    lines = env.read_text().splitlines() if env.exists() else []
    print("== machine\n" + "\n".join(x for x in lines
                                     if not x.startswith(("import", " ", "|", "+")) and "warn" not in x.lower()))
    print("\n".join(x for x in lines if x.startswith("import") and "FAILED" in x))
    samples = smi_samples(dest)
    print("== steps")
    for s in steps(dest):
        print(f"  {s['name']:18s} rc={s['rc']:>4s} {s['end'] - s['start']:6.0f} s"
              f"  {utilisation(samples, s['start'], s['end'])}")
    print("== 1. NCCL vs one process")
    cmp = load(dest / "nccl" / "compare.json")
    for name, r in (cmp or {}).items():
        if r.get("compared"):
            print(f"  {name}: all equal {r['all_equal']}; " + ", ".join(
                f"{k}: {'equal' if v['equal'] else 'DIFFER at ' + str(v['differing_examples'][:20])}"
                f" ({v['robust_single']} vs {v['robust_torchrun']})" for k, v in r["models"].items()))
        else:
            print(f"  {name}: not compared ({r.get('why')}); log: {' | '.join(r.get('log_tail', [])[-3:])}")
    probe = dest / "nccl" / "probe2.log"
    if probe.exists():
        lines = [x for x in probe.read_text().splitlines() if "rank" in x or "rror" in x]
        print("  two ranks on one GPU, NCCL alone (probe2): " + " | ".join(lines[-4:]))
    print("== 2. scale-out")
    print_scale(dest)
    print("== 4. export on the device")
    ex = load(dest / "export" / "gpu_export.json")
    for r in (ex or {}).get("rows", []):
        what = r.get("what") or r.get("format")
        print(f"  {what}: " + (r["error"] if "error" in r else
                               f"max abs diff {r['max_abs_diff']:.3g}, scaled {r['max_scaled_diff']:.3g},"
                               f" same predictions {r['same_predictions']}/{r['n']}"))
    print("== 5. certification")
    print_certify(dest)
    lip = sorted((dest / "lip").glob("*/report.json"))
    if lip:
        print("== 6. bench rows, Lipschitz RBC (LIP_RBC) and fmnist-pgd")
        for path in lip:
            for m in load(path)["models"]:
                print(f"  {path.parent.name}: {m['name']} ({m['kind']}, alpha {m.get('alpha')}): clean"
                      f" {100 * m['clean_accuracy']:.1f}%, robust {100 * m['robust_accuracy']:.1f}% ({m['attack']},"
                      f" {m['norm']} {m['epsilon']}, n={m['n']}, {m['seconds']:.0f} s)")
    print("== 3. evaluation speed")
    md = dest / "eval" / "eval_speed.md"
    print(md.read_text()[:3000] if md.exists() else "  no eval/eval_speed.md (see eval/run.log)")


if __name__ == "__main__":
    main()
