"""What `make demo` costs: each of its commands (``mix``, ``bench``, ``verify``) timed as the Makefile runs them.

The commands are the Makefile's own: ``make -n demo`` prints them (with the variables given here, e.g. ``FULL=1``)
and this script runs each in a fresh process under ``/usr/bin/time -v``, with a fresh cache directory (so nothing
is reused from an earlier run; the environment, the data and the built-in weights are installed). For each command
it records

* ``wall_s``: wall-clock seconds, what a user waits for; on a machine shared with other jobs it grows with the load;
* ``cpu_s``: user + system CPU seconds (``user_s``, ``sys_s``), which move much less with the load;
* ``max_rss_mib``: the peak resident memory;

with the load average (``os.getloadavg``) before and after, the torch threads the run used, and the run record of
:func:`mixzoo.core.machine.run_record` (versions, commit, machine). ``quiet_wall_s`` estimates the wall time on a
quiet machine of ``cores`` cores as ``cpu_s / threads`` when the run used a thread per core (``MIXZOO_THREADS``) and
every command ran to its end, else it is ``null`` (one thread's CPU time is its wall time only when nothing else
runs; a command stopped early, ``complete: false``, gives a lower bound). On a loaded machine threads wait for each
other, so the CPU time of a run with a thread per core exceeds a quiet run's and the estimate is high. The file says
"loaded" when the 1-minute load average before a command exceeded 0.5.

    python benchmarks/demo_speed.py                      # writes benchmarks/demo_speed.json, report in the OUT dir
    python benchmarks/demo_speed.py --make FULL=1 --json benchmarks/demo_speed_full.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def demo_commands(make_vars: list[str], bin_dir: str, out: str) -> list[list[str]]:
    """The `mixzoo` command lines `make demo` runs (``make -n``; the install and data steps left out)."""
    text = subprocess.run(["make", "-s", "-n", "-C", str(ROOT), "demo", f"BIN={bin_dir}", "STAMP=", f"OUT={out}",
                           *make_vars], capture_output=True, text=True, check=True).stdout
    lines = text.replace("\\\n", " ").splitlines()
    return [shlex.split(line)[0:] for line in lines if re.match(rf"\s*{re.escape(bin_dir)}/mixzoo ", line)]


def timed(cmd: list[str], env: dict[str, str]) -> dict:
    """One command under /usr/bin/time -v: wall, user, sys seconds and peak memory; its exit status."""
    load = os.getloadavg()
    with tempfile.NamedTemporaryFile("r", suffix=".time") as stats:
        t0 = time.perf_counter()
        proc = subprocess.run(["/usr/bin/time", "-v", "-o", stats.name, *cmd], env=env, cwd=ROOT,
                              capture_output=True, text=True)
        wall = time.perf_counter() - t0
        fields = dict(line.strip().rsplit(": ", 1) for line in stats.read().splitlines() if ": " in line)
    user, system = float(fields["User time (seconds)"]), float(fields["System time (seconds)"])
    return {"command": shlex.join([Path(cmd[0]).name, *cmd[1:]]), "returncode": proc.returncode,
            "wall_s": round(wall, 1), "user_s": user, "sys_s": system, "cpu_s": round(user + system, 1),
            "max_rss_mib": round(int(fields["Maximum resident set size (kbytes)"]) / 1024),
            "load_before": [round(x, 2) for x in load], "load_after": [round(x, 2) for x in os.getloadavg()],
            "loaded": load[0] > 0.5, "output_tail": (proc.stdout + proc.stderr)[-1500:]}


def summary(record: dict) -> dict:
    """``record`` with its totals derived from its commands: wall and CPU seconds, whether every command ran to
    its end (a command stopped early leaves ``quiet_wall_s`` null: its CPU time is a lower bound), the quiet-machine
    estimate and whether any command ran on a loaded machine."""
    commands = record["commands"]
    cpu = sum(r["cpu_s"] for r in commands)
    complete = len(commands) == 3 and all(r["returncode"] == 0 for r in commands)
    both = record["threads"] >= record["cores"]
    return {**record, "wall_s": round(sum(r["wall_s"] for r in commands), 1), "cpu_s": round(cpu, 1),
            "complete": complete,
            "quiet_wall_s": round(cpu / record["threads"], 1) if complete and both else None,
            "loaded": any(r["loaded"] for r in commands)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--make", nargs="*", default=[], help="make variables, e.g. FULL=1 or N=200")
    parser.add_argument("--out", default="benchmarks/results/demo_fmnist", help="the demo's OUT directory")
    parser.add_argument("--json", default="benchmarks/demo_speed.json")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="MIXZOO_THREADS for the run")
    parser.add_argument("--summarise", action="store_true", help="only derive the totals of --json again")
    args = parser.parse_args()
    if args.summarise:
        record = summary(json.loads(Path(args.json).read_text()))
        Path(args.json).write_text(json.dumps(record, indent=2) + "\n")
        return
    from mixzoo.core.machine import run_record

    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "MIXZOO_THREADS": str(args.threads)}
    results = []
    with tempfile.TemporaryDirectory() as cache:
        env["MIXZOO_CACHE"] = cache
        for cmd in demo_commands(args.make, bin_dir, args.out):
            results.append(timed(cmd, env))
            print(json.dumps({k: v for k, v in results[-1].items() if k != "output_tail"}), flush=True)
            if results[-1]["returncode"]:
                print(results[-1]["output_tail"], file=sys.stderr)
                break
    record = summary({"what": "make demo " + " ".join(args.make) + ": mix, bench, verify on the built-in"
                      " Fashion-MNIST pair", "make_vars": args.make, "out": args.out, "threads": args.threads,
                      "cores": os.cpu_count() or 1, "commands": results, "run": run_record("cpu")})
    Path(args.json).write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {args.json}: wall {record['wall_s']} s, CPU {record['cpu_s']} s,"
          f" quiet wall ~{record['quiet_wall_s']} s")


if __name__ == "__main__":
    main()
