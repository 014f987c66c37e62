"""The plans' estimates against the real time of the work they estimate, for the commands a new user runs first.

Each case runs one ``mixzoo`` command twice in a fresh process, each time with its own empty ``--cache-dir``:
with ``--dry-run`` (its plan's seconds are the *estimate*) and for real. Both processes record the plan
(``mixzoo.core.plan.make_plan``'s result, ``Plan.to_dict``) and the real one the seconds from its plan being made
to its exit (*real*: the work the plan estimates; interpreter start, imports and the plan's own probes are not in
it, and are recorded apart as ``dry_run_wall_s``). ``ratio`` is estimate / real; the target is 0.7-1.4.

The machine and the 1-minute load average before and after go with the figures; "loaded" when it exceeded 1
(other jobs shared the cores). Run from a checkout: ``python benchmarks/estimates.py [--n-quickstart 200]``.
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

OUT = Path(__file__).with_suffix(".json")
TARGET = (0.7, 1.4)
# the CLI with the plan and the work's seconds written to $ESTIMATES_OUT
CLI = """
import atexit, json, os, sys, time
import mixzoo.core.plan as plan_module
made = plan_module.make_plan
seen = {}
def make_plan(*a, **k):
    plan = made(*a, **k)
    seen.update(plan=plan.to_dict(), t=time.perf_counter())
    return plan
def write():
    if seen:
        seen["work_s"] = time.perf_counter() - seen.pop("t")
        open(os.environ["ESTIMATES_OUT"], "w").write(json.dumps(seen))
import mixzoo.core.progress as progress
advance = progress.Phases.advance
def advanced(self, name=None):
    seen.setdefault("marks", []).append(time.perf_counter() - seen["t"])
    advance(self, name)
progress.Phases.advance = advanced
plan_module.make_plan = make_plan
atexit.register(write)
from mixzoo.cli import main
sys.argv = ["mixzoo", *sys.argv[1:]]
main()
"""


def run(args: list[str], cwd: Path, cached: bool = True) -> dict[str, Any]:
    """``mixzoo ARGS`` in ``cwd`` with a fresh empty cache (``cached``: the command has one): its wall seconds,
    plan, work seconds and each phase's real seconds."""
    cache = ["--cache-dir", tempfile.mkdtemp(prefix="cache-", dir=cwd)] if cached else []
    record = cwd / f"record-{len(list(cwd.glob('record-*')))}.json"
    env = {**os.environ, "ESTIMATES_OUT": str(record)}
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CLI, *args, *cache], cwd=cwd, env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode:
        raise SystemExit(f"mixzoo {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    seen = json.loads(record.read_text())
    marks = [*seen.get("marks", []), seen["work_s"]]
    return {"wall_s": round(wall, 2), "plan": seen["plan"], "work_s": round(seen["work_s"], 2),
            "before_first_phase_s": round(marks[0], 2),
            "phases_s": [round(b - a, 2) for a, b in zip(marks, marks[1:], strict=False)]}


def case(name: str, args: list[str], cwd: Path) -> dict[str, Any]:
    """One command: its dry run's estimate against its real run's work."""
    cached = args[0] != "certify"  # certify caches nothing: it takes no --cache-dir
    dry, real = run([*args, "--dry-run"], cwd, cached), run(args, cwd, cached)
    est = dry["plan"]["seconds"] or 0.0
    ratio = est / real["work_s"] if real["work_s"] > 0 else None
    out = {"command": "mixzoo " + " ".join(args), "estimate_s": round(est, 2), "real_s": real["work_s"],
           "ratio": None if ratio is None else round(ratio, 2),
           "within_target": ratio is not None and TARGET[0] <= ratio <= TARGET[1],
           "run_plan_estimate_s": round(real["plan"]["seconds"] or 0.0, 2), "dry_run_wall_s": dry["wall_s"],
           "real_wall_s": real["wall_s"],
           "before_first_phase_s": real["before_first_phase_s"],
           "phases": [{"name": p["name"], "estimate_s": None if p["seconds"] is None else round(p["seconds"], 2),
                       "real_s": t} for p, t in zip(dry["plan"]["phases"], real["phases_s"], strict=False)]}
    timed = [(p["estimate_s"], p["real_s"]) for p in out["phases"] if p["estimate_s"] is not None]
    real_timed = sum(t for _, t in timed)
    out["ratio_estimated_phases"] = round(sum(e for e, _ in timed) / real_timed, 2) if real_timed > 0 else None
    out["not_estimated_s"] = round(sum(p["real_s"] for p in out["phases"] if p["estimate_s"] is None), 2)
    if not out["within_target"] and ratio is not None:  # by how much, and the phases that make the gap (measured)
        bound = TARGET[1] if ratio > TARGET[1] else TARGET[0]
        gaps = sorted(out["phases"], key=lambda p: -abs((p["estimate_s"] or 0.0) - p["real_s"]))
        out["miss"] = {"factor_past_target": round(ratio / bound, 2), "largest_gaps": [
            {"phase": p["name"], "estimate_s": p["estimate_s"], "real_s": p["real_s"]} for p in gaps[:2]]}
    print(f"{name}: estimate {out['estimate_s']} s, real {out['real_s']} s, ratio {out['ratio']}", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-quickstart", type=int, default=200, help="the README quick start's bench --n")
    parser.add_argument("--only", nargs="*", help="run only these cases")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    from mixzoo.core.machine import run_record

    work = Path(tempfile.mkdtemp(prefix="estimates-"))
    pair = ["--abc", "digits-std", "--rbc", "digits-pgd"]
    subprocess.run([sys.executable, "-c", CLI, "mix", *pair, "--beta", "0.95", "--out", "card.toml"], cwd=work,
                   check=True, capture_output=True, env={**os.environ, "ESTIMATES_OUT": str(work / "setup.json")})
    subprocess.run([sys.executable, "-c", CLI, "mix", *pair, "--method", "linear", "-O", "alpha=0.95", "--out",
                    "lin.toml"], cwd=work, check=True, capture_output=True,
                   env={**os.environ, "ESTIMATES_OUT": str(work / "setup-lin.json")})
    cases = {
        "mix (README quick start; mix --dry-run vs mix)": [*["mix", *pair], "--beta", "0.95", "--out", "mixed.toml"],
        f"README quick start bench (--n {args.n_quickstart})": ["bench", "card.toml", "--n", str(args.n_quickstart),
                                                                "--attack", "adaptive-apgd", "--out", "qs"],
        "bench --budget quick --n 20 (with the curve)": ["bench", "card.toml", "--budget", "quick", "--n", "20",
                                                         "--out", "b20"],
        "bench --n 40 --budget quick --no-curve": ["bench", "card.toml", "--n", "40", "--budget", "quick",
                                                   "--no-curve", "--out", "b40"],
        "sanity --n 20 --budget quick": ["sanity", "card.toml", "--n", "20", "--budget", "quick"],
        "certify (linear card)": ["certify", "lin.toml", "--norm", "linf", "--n", "1000", "--out", "cert"],
    }
    load_before = os.getloadavg()
    uptime_before = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    results = {name: case(name, argv, work) for name, argv in cases.items()
               if not args.only or any(o in name for o in args.only)}
    load_after = os.getloadavg()
    loaded = max(load_before[0], load_after[0]) > 1
    result = {"run": run_record("cpu"), "target": list(TARGET), "cases": results,
              "machine": {"cores": os.cpu_count(), "uptime_before": uptime_before,
                          "uptime_after": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
                          "load_average_before": [round(x, 2) for x in load_before],
                          "load_average_after": [round(x, 2) for x in load_after],
                          "load": "loaded (shared with other jobs)" if loaded else "quiet"}}
    Path(args.out).write_text(json.dumps(result, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
