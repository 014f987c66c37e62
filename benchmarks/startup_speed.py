"""How fast the CLI answers: ``mixzoo --help``, ``mixzoo list``, ``mixzoo info NAME``, ``mixzoo plugins`` (entry-point
metadata and plugin modules, no hook called) and ``mixzoo plugins --check`` (every hook called, every table built).

Targets on a quiet 2-core machine, median of 5: ``mixzoo --help`` <= 0.5 s, ``mixzoo plugins`` <= 0.5 s,
``mixzoo list`` <= 2 s.

Each command runs as a fresh process (the installed ``mixzoo`` console script next to this interpreter), five times
after one untimed warm-up run, and three figures are recorded for each, with their medians:

* ``wall_s``: wall-clock seconds of the whole process (interpreter start, imports, the command, exit), what a user
  waits for. The most load-sensitive figure: on a machine shared with other jobs it grows with the load.
* ``cpu_s``: user + system CPU seconds the process used. Waiting for a core does not count, so it moves much less
  with the load; on a quiet machine ``wall_s`` is close to it.
* ``import_s``: the sum of the top-level cumulative times that ``python -X importtime`` reports for the same
  command (the time spent importing modules, interpreter start-up and the command itself excluded). Wall-clock
  time too, but of the imports only, so it shows what lazy imports save.

Every run starts in a temporary directory, so the installed package is what runs, never a copy that happens to
sit in the current directory. A separate run of each command records how many modules it imported, whether torch
was one of them, and which mixing-method modules (``mixzoo.methods.<name>``) it imported; one run of ``mixzoo plugins
--json`` records each plugin's import time (``import_s``, with the hint ``mixzoo plugins`` gives over 0.2 s) and
the names per kind it lists without calling a hook. The machine (CPU model,
vector flags, cores), ``uptime`` and the load average before and after go with the figures, and the run record of
:func:`mixzoo.core.machine.run_record` (versions, commit, machine); the file says "shared with other jobs" when the
1-minute load average exceeded 0.5.

    .venv/bin/python benchmarks/startup_speed.py              # writes benchmarks/startup_speed.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
OUT = HERE / "startup_speed.json"
COMMANDS: dict[str, list[str]] = {
    "mixzoo --help": ["--help"],
    "mixzoo list": ["list"],
    "mixzoo info digits-pgd": ["info", "digits-pgd"],
    "mixzoo plugins": ["plugins"],
    "mixzoo plugins --check": ["plugins", "--check"],
}
TARGETS_S = {"mixzoo --help": 0.5, "mixzoo plugins": 0.5, "mixzoo list": 2.0}
QUIET_LOAD = 0.5

# Runs the CLI in this process as the console script does, then writes what was imported to the file in argv[1].
PROBE = """
import json, sys
out, args = sys.argv[1], sys.argv[2:]
sys.argv = ["mixzoo", *args]
from mixzoo.cli import main
try:
    main()
except SystemExit:
    pass
finally:
    mods = sorted(sys.modules)
    with open(out, "w") as fh:
        json.dump({"modules": len(mods), "torch": "torch" in sys.modules,
                   "methods": [m for m in mods if m.startswith("mixzoo.methods.") and m != "mixzoo.methods.base"]}, fh)
"""


def machine() -> dict[str, Any]:
    """CPU model, its vector flags, cores, Python and platform."""
    model, flags = platform.processor() or "?", []
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = sorted(f for f in value.split() if f.startswith(("avx", "fma", "sse4", "amx")))
                break
    except OSError:
        pass
    return {"cpu": model, "vector_flags": flags, "cores": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform()}


def cli_script() -> Path:
    script = Path(sys.executable).parent / "mixzoo"
    if not script.exists():
        sys.exit(f"error: no mixzoo console script next to {sys.executable}; install mixzoo into this environment")
    return script


def timed_run(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, user + system CPU seconds) of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, cwd=tempfile.gettempdir())
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def import_seconds(args: list[str]) -> float:
    """Sum of the top-level cumulative import times ``-X importtime`` reports for one run of the command."""
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run([sys.executable, "-X", "importtime", "-c", PROBE, str(Path(tmp) / "p.json"), *args],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False, cwd=tmp)
    total_us = 0
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line.split("|")
        if not name[1:].startswith(" "):  # top level: the name follows the bar after exactly one space
            total_us += int(cumulative)
    return total_us / 1e6


def imported(args: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "probe.json"
        subprocess.run([sys.executable, "-c", PROBE, str(out), *args], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False, cwd=tmp)
        return json.loads(out.read_text())


def plugin_imports(script: Path) -> dict[str, Any]:
    """Per plugin, from one ``mixzoo plugins --json``: its import time, hints and how many names per kind it lists."""
    proc = subprocess.run([str(script), "plugins", "--json"], capture_output=True, text=True, check=True,
                          cwd=tempfile.gettempdir())
    return {p["name"]: {"import_s": None if p.get("import_s") is None else round(p["import_s"], 4),
                        "hints": p.get("hints", []), "provides": {k: len(v) for k, v in p["provides"].items()}}
            for p in json.loads(proc.stdout)}


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return "?"


def measure(repeats: int) -> dict[str, Any]:
    script = cli_script()
    uptime_before = uptime()
    load_before = os.getloadavg()
    results: dict[str, Any] = {}
    for label, args in COMMANDS.items():
        timed_run([str(script), *args])  # warm-up: file-system caches, compiled bytecode
        runs = [timed_run([str(script), *args]) for _ in range(repeats)]
        imports = [import_seconds(args) for _ in range(repeats)]
        walls, cpus = [w for w, _ in runs], [c for _, c in runs]
        row = {"wall_s_median": round(statistics.median(walls), 3), "wall_s": [round(w, 3) for w in walls],
               "cpu_s_median": round(statistics.median(cpus), 3), "cpu_s": [round(c, 3) for c in cpus],
               "import_s_median": round(statistics.median(imports), 3), "import_s": [round(i, 3) for i in imports],
               **{k: v for k, v in imported(args).items()}}
        if label in TARGETS_S:
            row["target_s"] = TARGETS_S[label]
            row["wall_median_within_target"] = row["wall_s_median"] <= TARGETS_S[label]
        results[label] = row
        print(f"{label:28s} wall {row['wall_s_median']:.3f} s  cpu {row['cpu_s_median']:.3f} s  imports "
              f"{row['import_s_median']:.3f} s  modules {row['modules']}  torch {row['torch']}", flush=True)
    load_after = os.getloadavg()
    uptime_after = uptime()
    shared = max(load_before[0], load_after[0]) > QUIET_LOAD
    from mixzoo.core.machine import run_record

    return {
        "run": run_record("cpu"),
        "machine": {**machine(), "load_average_before": [round(v, 2) for v in load_before],
                    "load_average_after": [round(v, 2) for v in load_after],
                    "uptime_before": uptime_before, "uptime_after": uptime_after,
                    "load": "shared with other jobs" if shared else "quiet"},
        "repeats": repeats,
        "figures": {
            "wall_s": "wall-clock seconds of the whole process (interpreter start, imports, command, exit); "
                      "load-sensitive",
            "cpu_s": "user + system CPU seconds of the process; waiting for a core does not count",
            "import_s": "sum of the top-level cumulative times of python -X importtime for the same command "
                        "(imports only; wall-clock)",
            "modules": "modules in sys.modules when the command ends",
            "torch": "whether the command imported torch",
            "methods": "mixing-method modules (mixzoo.methods.<name>) the command imported",
        },
        "targets": "on a quiet 2-core machine, median wall_s: mixzoo --help <= 0.5 s, mixzoo plugins <= 0.5 s, "
                   "mixzoo list <= 2 s; on a shared machine the wall times are upper bounds of the quiet ones",
        "commands": results,
        "plugin_imports": plugin_imports(script),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    result = measure(args.repeats)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"load average {result['machine']['load_average_before']} -> {result['machine']['load_average_after']}"
          f" ({result['machine']['load']}); written to {args.out}")


if __name__ == "__main__":
    main()
