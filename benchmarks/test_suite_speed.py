"""Wall time of the two test targets: ``make test-fast`` (no slow, subprocess or GPU tests) and ``make test`` (all).

Each target's pytest command is run as the Makefile runs it (same marker expression), with ``--durations=0`` added
so every test's setup, call and teardown time is recorded. The JSON holds, per target: the wall time, pytest's own
summary line, the number of tests, the sum of the per-test times (wall time minus that sum is start-up and
collection), the 15 slowest entries and every test that took half a second or more; and the machine: CPU model,
its AVX flags, core count, the load average before and after each run (a load above the core count means other
jobs shared the machine and the times are inflated), torch and Python versions.

    .venv/bin/python benchmarks/test_suite_speed.py                  # both targets -> benchmarks/test_suite_speed.json
    .venv/bin/python benchmarks/test_suite_speed.py --targets fast   # only the fast target
    .venv/bin/python benchmarks/test_suite_speed.py --note "shared with other jobs"

Targets on a quiet 2-core CPU: fast <= 120 s, full <= 480 s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from mixzoo.core.errors import run_script

ROOT = Path(__file__).resolve().parents[1]
OUT = Path(__file__).with_suffix(".json")
FAST_MARKERS = "not slow and not subprocess and not gpu"  # the Makefile's FAST_MARKERS
TARGETS = {"fast": ["-m", FAST_MARKERS], "full": []}
LIMITS_S = {"fast": 120, "full": 480}
DURATION = re.compile(r"^(\d+\.\d+)s (setup|call|teardown)\s+(\S+)")


def cpu() -> dict:
    """CPU model, the AVX flags it reports, core count and the torch build."""
    model, flags = platform.processor() or "unknown", []
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and model in ("unknown", platform.processor()):
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    flags = sorted(w for w in line.split(":", 1)[1].split() if w.startswith("avx"))
    except OSError:
        pass
    import torch

    return {"cpu": model, "avx_flags": flags, "cores": os.cpu_count(), "torch": torch.__version__,
            "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(), "python": platform.python_version(),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")}


def run_target(name: str, python: str) -> dict:
    """Run one target's pytest command; return its wall time, summary and per-test durations."""
    cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=0", *TARGETS[name]]
    load_before = os.getloadavg()
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    lines = done.stdout.splitlines()
    entries = [(float(m[1]), m[2], m[3]) for m in map(DURATION.match, lines) if m]
    per_test: dict[str, float] = {}
    for seconds, _, node in entries:
        per_test[node] = per_test.get(node, 0.0) + seconds
    summary = next((line.strip("= ") for line in reversed(lines) if " in " in line and "passed" in line), "")
    failed = [line.split()[1] for line in lines if line.startswith(("FAILED ", "ERROR "))]
    return {"command": " ".join(cmd[1:]), "exit_status": done.returncode, "wall_s": round(wall, 1),
            "summary": summary, "failed": failed, "tests_timed": len(per_test),
            "sum_of_test_times_s": round(sum(per_test.values()), 1),
            "limit_quiet_s": LIMITS_S[name], "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
            "slowest_15": [{"s": s, "when": w, "test": n} for s, w, n in sorted(entries, reverse=True)[:15]],
            "tests_over_half_a_second": {n: round(s, 2) for n, s in sorted(per_test.items(), key=lambda kv: -kv[1])
                                         if s >= 0.5}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="fast,full", help="comma-separated: fast, full")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--python", default=sys.executable, help="the interpreter whose pytest runs the tests")
    parser.add_argument("--note", default="", help="recorded as is, e.g. 'shared with other jobs'")
    args = parser.parse_args()
    names = [t.strip() for t in args.targets.split(",") if t.strip()]
    unknown = [t for t in names if t not in TARGETS]
    if unknown:
        from mixzoo.core.errors import InputError

        raise InputError(f"unknown target {unknown[0]!r}; use fast, full or both (--targets fast,full)")
    record = {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "machine": cpu(), "note": args.note,
              "targets": {}}
    for name in names:
        result = run_target(name, args.python)
        record["targets"][name] = result
        print(f"{name}: {result['wall_s']} s wall ({result['summary']}), load {result['load_average_after'][0]}",
              flush=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    run_script(main)
