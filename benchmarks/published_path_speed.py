"""How fast the published-model path answers, offline, on the stand-ins of tests/published_standins.py.

Targets (issue text, quiet 2-core CPU): ``mixzoo info NAME`` under 1 s for any name; an ABC/RBC mismatch refused
before any weights load, under 2 s; the whole path (info, fetch-list, two MixedNUTS mixes, bench, a linear mix,
sanity, export) in minutes.

Every command runs as a fresh process of the installed ``mixzoo`` script with downloads off
(``HF_HUB_OFFLINE=1``, ``MIXZOO_OFFLINE=1``), and its wall-clock seconds are recorded (``info``: the median of 5,
after one untimed run; the mismatch: the median of 3, and the seconds inside ``mixzoo.methods.fit`` from the call
to the refusal, imports done, also the median of 3). The mismatch is a 1,000-class 224-px hub ABC (only its
``config.json`` is on disk) against the CIFAR RBC ``cifar10/Linf/Wong2020Fast`` (no checkpoint on disk): loading
either network would fail on a missing file, so a refusal naming the class counts proves no weights were read.

The machine record (:func:`mixzoo.core.machine.run_record`) and the 1-minute load average before and after go with
the figures; ``loaded`` is true when the load average exceeded 0.5, i.e. the machine was shared and wall-clock
figures are inflated.

    .venv/bin/python benchmarks/published_path_speed.py     # writes benchmarks/published_path_speed.json
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
OUT = HERE / "published_path_speed.json"
MIXZOO = str(Path(sys.executable).with_name("mixzoo"))
QUIET_LOAD = 0.5
INFO_NAMES = ["hf-hub:org/r18-c10", "cifar10/Linf/Wong2020Fast", "cifar10/Linf/Peng2023Robust",
              "imagenet/Linf/Liu2023Comprehensive_Swin-L", "convnextv2-l", "peng2023-rawrn-70-16", "fmnist-pgd"]
MISMATCH = ["mix", "--abc", "hf-hub:org/in1k", "--rbc", "cifar10/Linf/Wong2020Fast", "--out", "never.toml"]


def wall(env: dict[str, str], args: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    proc = subprocess.run([MIXZOO, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=900)
    return time.perf_counter() - t0, proc


IN_PROCESS = """
import json, sys, time
from mixzoo.methods import fit
from mixzoo.core.errors import InputError
import mixzoo.zoo.pairs, mixzoo.zoo.data  # imports done before the clock starts
times = []
for _ in range(3):
    t0 = time.perf_counter()
    try:
        fit(abc="hf-hub:org/in1k", rbc="cifar10/Linf/Wong2020Fast")
    except InputError as exc:
        times.append(time.perf_counter() - t0)
        message = str(exc)
print(json.dumps({"seconds": times, "message": message}))
"""


def main() -> None:
    from hub_cache import put_timm_model
    from published_standins import build, steps

    from mixzoo.core.machine import run_record

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        env = build(root)
        empty_rb = root / "no-checkpoints"
        put_timm_model(root / "hf", "org/in1k", num_classes=1000, size=224, files=("config.json",))
        info: dict[str, dict[str, object]] = {}
        for name in INFO_NAMES:
            wall(env, ["info", name], root)
            runs = [wall(env, ["info", name], root) for _ in range(5)]
            assert all(p.returncode == 0 for _, p in runs), runs[0][1].stderr
            info[name] = {"median_s": round(statistics.median(t for t, _ in runs), 3),
                          "runs_s": [round(t, 3) for t, _ in runs]}
        mismatch_env = {**env, "MIXZOO_ROBUSTBENCH_DIR": str(empty_rb)}
        runs = [wall(mismatch_env, MISMATCH, root) for _ in range(3)]
        refusal = runs[0][1].stderr.strip().splitlines()[-1]
        assert all(p.returncode != 0 for _, p in runs) and "1000 classes" in refusal, refusal
        inside = subprocess.run([sys.executable, "-c", IN_PROCESS], env=mismatch_env, capture_output=True,
                                text=True, timeout=600)
        inside_out = json.loads(inside.stdout.strip().splitlines()[-1])
        path: list[dict[str, object]] = []
        for label, args in steps(root):
            seconds, proc = wall(env, args, root)
            assert proc.returncode == 0, f"{label}: {proc.stderr[-1500:]}"
            path.append({"step": label, "command": "mixzoo " + " ".join(a.replace(tmp, "$ROOT") for a in args),
                         "wall_s": round(seconds, 2)})
    load_after = os.getloadavg()
    record = {
        "what": "published-model path offline on stand-ins (tests/published_standins.py)",
        "info_wall_s": info,
        "mismatch_refusal": {"command": "mixzoo " + " ".join(MISMATCH), "message": refusal,
                             "process_wall_s": round(statistics.median(t for t, _ in runs), 3),
                             "process_runs_s": [round(t, 3) for t, _ in runs],
                             "in_fit_s": round(statistics.median(inside_out["seconds"]), 4),
                             "in_fit_runs_s": [round(t, 4) for t in inside_out["seconds"]]},
        "path": path, "path_total_wall_s": round(sum(float(p["wall_s"]) for p in path), 1),
        "load_average_before": [round(v, 2) for v in load_before],
        "load_average_after": [round(v, 2) for v in load_after],
        "loaded": max(load_before[0], load_after[0]) > QUIET_LOAD,
        "run": run_record(),
    }
    OUT.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps({k: record[k] for k in ("info_wall_s", "mismatch_refusal", "path_total_wall_s", "loaded")},
                     indent=2))


if __name__ == "__main__":
    main()
