"""Wall and CPU time of the README's quick start, quiet and beside six busy processes.

The quick start (``mixzoo mix --abc digits-std --rbc digits-pgd --beta 0.95 --out card.toml``, then ``mixzoo bench
card.toml --n 200 --attack adaptive-apgd --out bench/``) runs in fresh processes with an empty cache (``MIXZOO_CACHE``
a new temporary directory, ``OMP_NUM_THREADS`` and ``MIXZOO_THREADS`` unset: mixzoo chooses its threads), first on
the machine as it is ("quiet"), then beside six processes that spin on the CPU (``python -c 'while 1: pass'``,
"busy"). For each command the JSON records the wall time and the CPU time of the process and its children
(``os.wait4``'s user + system), the threads mixzoo chose (from the report's run record) and the load average.

Targets: under one minute of wall time quiet on a 2-core CPU; beside the six busy processes at most 1.5 x the quiet
CPU time (an oversubscribed torch spins: the same work then costs many times the CPU).

    .venv/bin/python benchmarks/quickstart_speed.py                       # -> benchmarks/quickstart_speed.json
    .venv/bin/python benchmarks/quickstart_speed.py --note loaded         # the machine had other jobs as well
    .venv/bin/python benchmarks/quickstart_speed.py --modes quiet         # only the quiet run
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = Path(__file__).with_suffix(".json")
COMMANDS = (["mix", "--abc", "digits-std", "--rbc", "digits-pgd", "--beta", "0.95", "--out", "card.toml"],
            ["bench", "card.toml", "--n", "200", "--attack", "adaptive-apgd", "--out", "bench/"])
BUSY = 6
QUIET_WALL_LIMIT_S = 60.0
BUSY_CPU_RATIO_LIMIT = 1.5


def machine() -> dict:
    from mixzoo.core.machine import describe_machine
    from mixzoo.core.threads import available_cpus

    cpus, why = available_cpus()
    return {**describe_machine(), "cpus_available": cpus, "cpus_limited_by": why,
            "python": platform.python_version()}


def timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> dict:
    """Run ``cmd``; its wall time and the CPU time of it and its children (``RUSAGE_CHILDREN`` before and after:
    the busy processes are reaped only after the quick start, so they are not counted)."""
    load = os.getloadavg()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    return {"command": " ".join(["mixzoo", *cmd[1:]]), "exit_status": done.returncode, "wall_s": round(wall, 2),
            "cpu_s": round(user + system, 2), "user_s": round(user, 2), "sys_s": round(system, 2),
            "load_average_before": [round(x, 2) for x in load],
            "stdout": done.stdout[-3000:], "stderr_tail": done.stderr[-2000:] if done.returncode else ""}


def quick_start(mixzoo: str) -> dict:
    """Both commands in a new directory with an empty cache; their times and the threads mixzoo chose."""
    with tempfile.TemporaryDirectory(prefix="mixzoo-quickstart-") as tmp:
        work = Path(tmp)
        env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MIXZOO_THREADS")}
        env["MIXZOO_CACHE"] = str(work / "cache")
        steps = [timed([mixzoo, *cmd], work, env) for cmd in COMMANDS]
        report = work / "bench" / "report.json"
        record = json.loads(report.read_text()).get("run", {}).get("machine", {}) if report.exists() else {}
    return {"steps": steps, "wall_s": round(sum(s["wall_s"] for s in steps), 2),
            "cpu_s": round(sum(s["cpu_s"] for s in steps), 2),
            "torch_threads": record.get("torch_threads"), "torch_threads_reason": record.get("torch_threads_reason")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default="quiet,busy", help="quiet, busy or both (comma-separated)")
    parser.add_argument("--note", default="", help="what else ran on the machine (e.g. 'loaded')")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    mixzoo = str(Path(sys.executable).with_name("mixzoo"))
    result: dict = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "note": args.note,
                    "machine": machine(), "busy_processes": BUSY, "targets": {
                        "quiet_wall_s": QUIET_WALL_LIMIT_S, "busy_cpu_over_quiet_cpu": BUSY_CPU_RATIO_LIMIT}}
    for mode in [m.strip() for m in args.modes.split(",") if m.strip()]:
        spinners = []
        if mode == "busy":
            spinners = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(BUSY)]
            time.sleep(1.0)
        try:
            result[mode] = quick_start(mixzoo)
        finally:
            for p in spinners:
                p.kill()
                p.wait()
        print(f"{mode}: wall {result[mode]['wall_s']} s, CPU {result[mode]['cpu_s']} s, "
              f"{result[mode]['torch_threads']} torch threads ({result[mode]['torch_threads_reason']})")
    if "quiet" in result and "busy" in result:
        ratio = result["busy"]["cpu_s"] / max(result["quiet"]["cpu_s"], 1e-9)
        result["busy_cpu_over_quiet_cpu"] = round(ratio, 2)
        print(f"busy CPU / quiet CPU = {ratio:.2f} (target <= {BUSY_CPU_RATIO_LIMIT})")
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {args.out}")
    failed = [s for mode in ("quiet", "busy") if mode in result for s in result[mode]["steps"] if s["exit_status"]]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
