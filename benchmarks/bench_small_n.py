"""Does a small `--n` cost a small share? `mixzoo bench` of the Fashion-MNIST card at --n 20 and at --n 200.

Both runs are ``mixzoo bench benchmarks/results/cards/fmnist_mixednuts.toml --n N --attack ATTACK`` in fresh
processes with an empty cache; the JSON records wall and CPU time (the process and its children), each phase's
seconds from the report (rows, matched baseline, curve) and the plan's estimate. Target: the --n 20 run takes at
most a fifth of the --n 200 run (fixed costs such as the figures' calibration data must not dominate small runs).

    .venv/bin/python benchmarks/bench_small_n.py                        # -> benchmarks/bench_small_n.json
    .venv/bin/python benchmarks/bench_small_n.py --attack adaptive --note loaded
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from quickstart_speed import machine, timed  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = Path(__file__).with_suffix(".json")
CARD = "benchmarks/results/cards/fmnist_mixednuts.toml"
RATIO_LIMIT = 0.2


def phases(report: dict) -> dict:
    """Seconds per row and per extra phase, from a report.json."""
    s = report["settings"]
    extra = {k: round(v["seconds"], 1) for k, v in s.get("components", {}).items()
             if isinstance(v, dict) and v.get("seconds") is not None}
    return {"total_s": round(s["seconds"], 1), "rows_s": {m["label"]: round(m["seconds"], 1) for m in report["models"]},
            **extra}


def one(mixzoo: str, n: int, attack: str) -> dict:
    """The bench at ``--n n`` timed in a fresh process with an empty cache, and the estimate its ``--dry-run``
    plan printed (a separate process, not timed)."""
    args = ["bench", str(ROOT / CARD), "--n", str(n), "--attack", attack]
    with tempfile.TemporaryDirectory(prefix="mixzoo-small-n-") as tmp:
        env = {**os.environ, "MIXZOO_CACHE": str(Path(tmp) / "cache")}
        dry = subprocess.run([mixzoo, *args, "--dry-run"], cwd=ROOT, env=env, capture_output=True, text=True)
        estimate = re.search(r"estimate: ~(\S+)", dry.stdout)
        step = timed([mixzoo, *args, "--out", str(Path(tmp) / "bench")], ROOT, env)
        report = Path(tmp) / "bench" / "report.json"
        return {**step, "plan_estimate": estimate.group(1) if estimate else None,
                "phases": phases(json.loads(report.read_text())) if report.exists() else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attack", default="adaptive-apgd")
    parser.add_argument("--sizes", default="20,200")
    parser.add_argument("--note", default="", help="what else ran on the machine (e.g. 'loaded')")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    mixzoo = str(Path(sys.executable).with_name("mixzoo"))
    small, large = (int(x) for x in args.sizes.split(","))
    runs = {str(n): one(mixzoo, n, args.attack) for n in (small, large)}
    ratio = {k: round(runs[str(small)][k] / max(runs[str(large)][k], 1e-9), 3) for k in ("wall_s", "cpu_s")}
    result = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "note": args.note, "machine": machine(),
              "card": CARD, "attack": args.attack, "runs": runs, "small_over_large": ratio,
              "target": f"<= {RATIO_LIMIT}", "met": max(ratio.values()) <= RATIO_LIMIT}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"--n {small} / --n {large}: wall {ratio['wall_s']}, CPU {ratio['cpu_s']} (target <= {RATIO_LIMIT})")
    return 0 if result["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
