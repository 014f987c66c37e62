"""What ``mixzoo bench --dry-run`` of the demo costs, and how close its estimate comes to the run it plans.

Three measurements of the demo's bench command (``make demo``: ``mixzoo bench CARD --attack adaptive-apgd --n 200
--curve-n 100 --device cpu --save-adversarial``, the card the demo's ``mixzoo mix`` writes):

* ``dry_run``: wall-clock seconds of the whole ``--dry-run`` process (interpreter start, imports, loading the
  models and images, the probes, the plan), with an empty cache, for this checkout and, with ``--before DIR``, for
  another checkout of mixzoo (its source tree put first on ``PYTHONPATH``): the time the probes take before and
  after they were cut to a tenth and a fifth of the attacks' iteration counts.
* ``cut_vs_whole``: the demo's plan (in this process) with the probes cut and with them timing the whole counts,
  phase by phase: the cut must leave the estimate where it was (up to the timing noise), only faster.
* ``estimate_vs_run``: the plan of a small run (``--n 20 --budget quick``, no figures) phase by phase against what
  that run then took (each row's attack seconds, the matched baseline's search and row, the curve: the report's own
  figures), from an empty cache.
* ``cached``: the plan of the same small run once it has run: its rows estimated from the cache, and the seconds
  the dry run then takes.

The machine and the load average before and after go with the figures; the file says "loaded" when the 1-minute
load average exceeded 0.5 (other jobs shared the cores: every figure is then slower than on a quiet machine).

    .venv/bin/python benchmarks/plan_speed.py --card CARD [--before /path/to/older/checkout --before-commit SHA]
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
OUT = HERE / "plan_speed.json"
DEMO = ["--attack", "adaptive-apgd", "--n", "200", "--curve-n", "100", "--device", "cpu", "--save-adversarial"]
SMALL = ["--attack", "adaptive-apgd", "--n", "20", "--budget", "quick", "--curve-n", "100", "--device", "cpu"]
QUIET_LOAD = 0.5
CLI = "import sys; from mixzoo.cli import main; sys.argv = ['mixzoo', *sys.argv[1:]]; main()"


def dry_run(card: str, args: list[str], source: str | None = None) -> dict[str, Any]:
    """Seconds of one ``mixzoo bench CARD ARGS --dry-run`` process with an empty cache (``source``: a checkout whose
    ``mixzoo`` package is imported instead of the installed one) and the plan it printed."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if source is not None:
        env["PYTHONPATH"] = source
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-c", CLI, "bench", card, *args, "--cache-dir", f"{tmp}/cache", "--out",
               f"{tmp}/bench", "--dry-run"]
        t0 = time.perf_counter()
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True, cwd=tmp)
        seconds = time.perf_counter() - t0
    lines = done.stdout.splitlines()
    return {"seconds": round(seconds, 2), "estimate": next((x for x in lines if x.startswith("estimate:")), None),
            "plan": [x.strip() for x in lines if x.startswith("  ")]}


def small_run(card: str) -> dict[str, Any]:
    """The small run's plan, the run itself (its report's figures), then its plan again from the filled cache."""
    from mixzoo.core.settings import RunSettings
    from mixzoo.evaluation.bench import bench
    from mixzoo.evaluation.plan import plan_bench

    with tempfile.TemporaryDirectory() as tmp:
        s = RunSettings(attack="adaptive-apgd", n=20, budget="quick", device="cpu", cache_dir=f"{tmp}/cache",
                        progress=False)
        from mixzoo.evaluation.bench import CurveSettings

        curve = CurveSettings.for_budget("quick")  # --curve-n 100 is the quick budget's own
        t0 = time.perf_counter()
        plan = plan_bench(card, s, curve=curve)
        plan_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        report = bench(card, s, out=f"{tmp}/bench", plots=False, curve=curve)
        run_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        cached = plan_bench(card, s, curve=curve)
        cached_s = time.perf_counter() - t0
    comps = report.settings["components"]
    took = [m.seconds for m in report.models if m.kind in ("abc", "rbc")]
    took += [m.seconds for m in report.models if m.kind not in ("abc", "rbc", "linear")]
    took += [comps.get("baseline", {}).get("seconds"), comps.get("curve", {}).get("seconds")]
    names = plan.names()
    return {
        "command": "mixzoo bench CARD " + " ".join(SMALL) + " --no-plots",
        "estimate_vs_run": {
            "plan_seconds": round(plan_s, 2), "run_seconds": round(run_s, 2),
            "phases": [{"phase": name, "estimate_s": None if est is None else round(est, 1),
                        "took_s": None if real is None else round(real, 1)}
                       for name, est, real in zip(names, plan.estimates(), [*took, None], strict=False)],
            "estimate_total_s": round(plan.seconds or 0.0, 1),
            "took_total_s": round(sum(t for t in took if t is not None), 1)},
        "cached": {"plan_seconds": round(cached_s, 2), "plan": cached.lines()[1:-1]},
    }


def cut_vs_whole(card: str) -> dict[str, Any]:
    """The demo's plan with the probes cut (a tenth and a fifth of each iteration count, extrapolated) and with the
    probes timing the whole counts, phase by phase: what the cut changes in the estimate and in the probes' time."""
    import mixzoo.evaluation.plan as plan_module
    from mixzoo.core.settings import RunSettings
    from mixzoo.evaluation.bench import CurveSettings

    out: dict[str, Any] = {}
    cut = plan_module.FRACTIONS
    with tempfile.TemporaryDirectory() as tmp:
        s = RunSettings(attack="adaptive-apgd", n=200, device="cpu", cache_dir=f"{tmp}/cache", progress=False)
        curve = CurveSettings(n=100)
        try:
            for label, fractions in (("cut", cut), ("whole", (1.0, 1.0))):
                plan_module.FRACTIONS = fractions
                t0 = time.perf_counter()
                plan = plan_module.plan_bench(card, s, curve=curve)
                out[label] = {"fractions": list(fractions), "plan_seconds": round(time.perf_counter() - t0, 2),
                              "estimates_s": [None if e is None else round(e, 1) for e in plan.estimates()]}
        finally:
            plan_module.FRACTIONS = cut
    out["phases"] = plan.names()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--card", required=True, help="the demo's card (what `mixzoo mix` writes)")
    parser.add_argument("--before", help="another mixzoo checkout (its source tree) to time the dry run of")
    parser.add_argument("--before-commit", help="the commit that checkout is of (recorded with its figures)")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    args.card = str(Path(args.card).resolve())
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch

    from mixzoo.core.machine import run_record

    torch.set_num_threads(1)
    load_before = os.getloadavg()
    result: dict[str, Any] = {"run": run_record("cpu"), "card": args.card,
                              "dry_run": {"command": "mixzoo bench CARD " + " ".join(DEMO) + " --dry-run",
                                          "after": dry_run(args.card, DEMO)}}
    if args.before:
        result["dry_run"]["before"] = {"commit": args.before_commit, **dry_run(args.card, DEMO, args.before)}
    result["cut_vs_whole"] = cut_vs_whole(args.card)
    result["small"] = small_run(args.card)
    load_after = os.getloadavg()
    result["machine"] = {"cores": os.cpu_count(), "load_average_before": [round(x, 2) for x in load_before],
                         "load_average_after": [round(x, 2) for x in load_after],
                         "load": "loaded (shared with other jobs)" if max(load_before[0], load_after[0]) > QUIET_LOAD
                         else "quiet"}
    Path(args.out).write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(json.dumps({k: result[k] for k in ("dry_run", "cut_vs_whole", "small", "machine")}, indent=2, default=str))


if __name__ == "__main__":
    main()
