"""The plans' estimates against the real time of the work they estimate, for the commands a new user runs first:
the README quick start (mix, bench --n 200), ``make demo``'s mix and bench at the Makefile's sizes, small quick
benches, a quick bench on the CIFAR-size stand-in pair (tests/published_standins.py), sanity and certify with
App. C.3's estimated radii.

Each case runs one ``mixzoo`` command twice in a fresh process, with ``--dry-run`` (its plan's seconds are the
*estimate*) and for real, both with the case's cache directory (a fresh empty one; make demo's bench the one its mix
filled, as in one checkout). Both processes record the plan (``mixzoo.core.plan.make_plan``'s result,
``Plan.to_dict``) and the real one the seconds from its plan being made to its exit (*real*: the work the plan
estimates; interpreter start, imports and the plan's own probes are not in it, the dry run's are
``dry_run_wall_s``). ``ratio`` is estimate / real; the target is 0.7-1.4. ``eta``: every overall progress line's
ETA shown after :data:`ETA_FROM_S` (printed every :data:`ETA_INTERVAL_S`) against the time that really remained
(target: at most 2x).

The machine and the 1-minute load averages (per case and overall) go with the figures; "loaded" when one exceeded 1
(other jobs shared the cores). Run from a checkout: ``python benchmarks/estimates.py [--only NAME ...]``; it prints a
table.
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
line = progress.Phases.line
def shown(self):
    if "t" in seen:  # each overall progress line's time since the plan and its ETA
        seen.setdefault("etas", []).append((time.perf_counter() - seen["t"], self.eta()))
    return line(self)
progress.Phases.line = shown
progress.PLAIN_INTERVAL = float(os.environ.get("ESTIMATES_ETA_INTERVAL", progress.PLAIN_INTERVAL))
plan_module.make_plan = make_plan
atexit.register(write)
from mixzoo.cli import main
sys.argv = ["mixzoo", *sys.argv[1:]]
main()
"""


ETA_FROM_S = 60.0  # the ETAs shown after this many seconds are held to the remaining time
ETA_INTERVAL_S = 5.0  # the overall progress line printed this often (the CLI's default is 30 s): more ETAs checked


def run(args: list[str], cwd: Path, cache: str | None, env: dict[str, str] | None = None) -> dict[str, Any]:
    """``mixzoo ARGS`` in ``cwd`` with the cache directory ``cache`` (``None``: the command takes none): its wall
    seconds, plan, work seconds, each phase's real seconds and the ETAs its progress line showed."""
    cache_args = ["--cache-dir", cache] if cache else []
    record = cwd / f"record-{len(list(cwd.glob('record-*')))}.json"
    env = {**(env or os.environ), "ESTIMATES_OUT": str(record), "ESTIMATES_ETA_INTERVAL": str(ETA_INTERVAL_S)}
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CLI, *args, *cache_args], cwd=cwd, env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode:
        raise SystemExit(f"mixzoo {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    seen = json.loads(record.read_text())
    marks = [*seen.get("marks", []), seen["work_s"]]
    return {"wall_s": round(wall, 2), "plan": seen["plan"], "work_s": round(seen["work_s"], 2),
            "before_first_phase_s": round(marks[0], 2),
            "phases_s": [round(b - a, 2) for a, b in zip(marks, marks[1:], strict=False)],
            "etas": [(t, e) for t, e in seen.get("etas", []) if e is not None]}


def eta_check(etas: list[tuple[float, float]], work_s: float) -> dict[str, Any]:
    """The ETAs shown after :data:`ETA_FROM_S` against the time that really remained: each ratio, the largest."""
    after = [(t, e, e / (work_s - t)) for t, e in etas if t >= ETA_FROM_S and work_s - t > 0]
    worst = max((r for _, _, r in after), default=None)
    return {"shown_after_first_minute": len(after), "max_ratio": None if worst is None else round(worst, 2),
            "within_2x": worst is None or worst <= 2.0,
            "shown": [{"at_s": round(t, 1), "eta_s": round(e, 1), "remaining_s": round(work_s - t, 1),
                       "ratio": round(r, 2)} for t, e, r in after]}


def case(name: str, args: list[str], cwd: Path, cache: str | None = "", env: dict[str, str] | None = None
         ) -> dict[str, Any]:
    """One command: its dry run's estimate against its real run's work, both with the cache directory ``cache``
    (``""``: a fresh empty one; ``None``: none, the command takes no ``--cache-dir``)."""
    cache = tempfile.mkdtemp(prefix="cache-", dir=cwd) if cache == "" else cache
    load = os.getloadavg()
    dry, real = run([*args, "--dry-run"], cwd, cache, env), run(args, cwd, cache, env)
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
    out["eta"] = eta_check(real["etas"], real["work_s"])
    out["load_average"] = [round(x, 2) for x in (*load, *os.getloadavg())][::3]  # 1-minute: before, after
    if not out["within_target"] and ratio is not None:  # by how much, and the phases that make the gap (measured)
        bound = TARGET[1] if ratio > TARGET[1] else TARGET[0]
        gaps = sorted(out["phases"], key=lambda p: -abs((p["estimate_s"] or 0.0) - p["real_s"]))
        out["miss"] = {"factor_past_target": round(ratio / bound, 2), "largest_gaps": [
            {"phase": p["name"], "estimate_s": p["estimate_s"], "real_s": p["real_s"]} for p in gaps[:2]]}
    print(f"{name}: estimate {out['estimate_s']} s, real {out['real_s']} s, ratio {out['ratio']}", flush=True)
    return out


def setup(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
    """``mixzoo ARGS`` for a card the cases use (not timed)."""
    done = subprocess.run([sys.executable, "-c", CLI, *args], cwd=cwd, capture_output=True, text=True,
                          env={**(env or os.environ), "ESTIMATES_OUT": str(cwd / "setup.json")})
    if done.returncode:
        raise SystemExit(f"mixzoo {' '.join(args)} failed:\n{done.stderr[-3000:]}")


def cifar_standins(work: Path) -> tuple[list[str], dict[str, str]]:
    """The CIFAR-size stand-in pair (tests/published_standins.py: a PreActResNet-18 RBC, a timm ResNet-18 ABC, 16
    CIFAR-10 images) mixed into ``cifar.toml`` as the published path mixes it; the bench's data arguments and the
    offline environment."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    import published_standins as standins

    root = work / "standins"
    env = standins.build(root)
    data = ["--data-dir", str(root / "cifar")]
    setup(["mix", "--abc", standins.HUB_NAME, "--rbc", standins.RB_NAME, *data, "--n-calib", "8", "--eps", "0.001",
           "-O", "n_iter=2", "-O", "n_restarts=1", "-O", "n_target_classes=1", "--out", "cifar.toml"], work, env)
    return data, env


def cases(args: argparse.Namespace, work: Path) -> dict[str, tuple[list[str], str | None, dict[str, str] | None]]:
    """Each case's command, cache directory (``""``: a fresh one) and environment; the cards they use set up."""
    pair = ["--abc", "digits-std", "--rbc", "digits-pgd"]
    setup(["mix", *pair, "--beta", "0.95", "--out", "card.toml"], work)
    setup(["mix", *pair, "--method", "linear", "-O", "alpha=0.95", "--out", "lin.toml"], work)
    demo_cache = str(work / "demo-cache")  # make demo's bench finds what its mix cached, as in one checkout
    out = {
        "mix (README quick start; mix --dry-run vs mix)": ([*["mix", *pair], "--beta", "0.95", "--out", "mixed.toml"],
                                                           "", None),
        f"README quick start bench (--n {args.n_quickstart})": (
            ["bench", "card.toml", "--n", str(args.n_quickstart), "--attack", "adaptive-apgd", "--out", "qs"], "",
            None),
        "make demo mix (--n-calib 300, Fashion-MNIST)": (["mix", "--n-calib", "300", "--out", "demo.toml"], demo_cache,
                                                         None),
        "make demo bench (--n 60 --curve-n 50 --save-adversarial)": (
            ["bench", "demo.toml", "--attack", "adaptive-apgd", "--n", "60", "--curve-n", "50", "--save-adversarial",
             "--out", "demo-bench"], demo_cache, None),
        "bench --budget quick --n 20 (with the curve)": (["bench", "card.toml", "--budget", "quick", "--n", "20",
                                                          "--out", "b20"], "", None),
        "bench --n 40 --budget quick --no-curve": (["bench", "card.toml", "--n", "40", "--budget", "quick",
                                                    "--no-curve", "--out", "b40"], "", None),
        "CIFAR-size stand-in pair: bench --budget quick --n 16": (
            ["bench", "cifar.toml", "--budget", "quick", "--n", "16", "--eps", "0.0314", "--out", "cifar-bench"], "",
            None),
        "sanity --n 20 --budget quick": (["sanity", "card.toml", "--n", "20", "--budget", "quick"], "", None),
        "certify (linear card, with estimated radii)": (
            ["certify", "lin.toml", "--norm", "linf", "--n", "1000", "--estimate", "0.05,0.1", "--out", "cert"], None,
            None),  # certify caches nothing: it takes no --cache-dir
    }
    out = {k: v for k, v in out.items() if not args.only or any(o in k for o in args.only)}
    if any(k.startswith("CIFAR") for k in out):
        data, env = cifar_standins(work)
        name = next(k for k in out if k.startswith("CIFAR"))
        out[name] = ([*out[name][0], *data], "", env)
    if any(k.startswith("make demo bench") for k in out) and not any(k.startswith("make demo mix") for k in out):
        setup(["mix", "--n-calib", "300", "--out", "demo.toml", "--cache-dir", demo_cache], work)
    return out


def table(results: dict[str, Any]) -> str:
    """The cases as a text table: estimate, real, ratio, the largest ETA ratio after the first minute."""
    rows = [f"{'case':60} {'estimate s':>10} {'real s':>8} {'ratio':>6} {'ETA max':>8}"]
    for name, c in results.items():
        eta = c["eta"]["max_ratio"]
        rows.append(f"{name[:60]:60} {c['estimate_s']:>10} {c['real_s']:>8} {c['ratio']!s:>6} "
                    f"{'-' if eta is None else eta:>8}")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-quickstart", type=int, default=200, help="the README quick start's bench --n")
    parser.add_argument("--only", nargs="*", help="run only the cases whose names contain one of these")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    from mixzoo.core.machine import run_record

    work = Path(tempfile.mkdtemp(prefix="estimates-"))
    load_before = os.getloadavg()
    uptime_before = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    results = {name: case(name, argv, work, cache, env) for name, (argv, cache, env) in cases(args, work).items()}
    load_after = os.getloadavg()
    loaded = max(load_before[0], load_after[0], *(c["load_average"][0] for c in results.values())) > 1
    result = {"run": run_record("cpu"), "target": list(TARGET), "eta_target": "at most 2x the remaining time, for "
              f"every ETA shown after {ETA_FROM_S:g} s (progress line every {ETA_INTERVAL_S:g} s)", "cases": results,
              "machine": {"cores": os.cpu_count(), "uptime_before": uptime_before,
                          "uptime_after": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
                          "load_average_before": [round(x, 2) for x in load_before],
                          "load_average_after": [round(x, 2) for x in load_after],
                          "load": "loaded (shared with other jobs)" if loaded else "quiet"}}
    Path(args.out).write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(table(results))
    print(f"machine: {os.cpu_count()} cores, {result['machine']['load']}; {uptime_before} / "
          f"{result['machine']['uptime_after']}")


if __name__ == "__main__":
    main()
