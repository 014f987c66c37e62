"""How much faster are the attacks in bfloat16, and do they find as much as in float32?

    .venv/bin/python benchmarks/precision_speed.py --card benchmarks/results/cards/digits_mixednuts.toml --n 250
    .venv/bin/python benchmarks/precision_speed.py --card benchmarks/results/cards/fmnist_mixednuts.toml --n 100
    .venv/bin/python benchmarks/precision_speed.py --card benchmarks/results/cards/fmnist_mixednuts.toml \
        --n 1000 --device cuda --chunk 500

Runs each ``--attacks`` evaluation (default ``adaptive`` and ``adaptive-apgd``, their default options) on the card's
mixed classifier and the first ``n`` evaluation images at the card's eps, once with ``precision="float32"`` and once
with ``precision="bf16"`` (:meth:`mixzoo.attacks.base.Attack.run`: bfloat16 autocast, every break confirmed
in float32 outside autocast), with per-example seeds as ``mixzoo bench`` draws them. The images go in chunks of
``--chunk``; each chunk is attacked in float32 and then in bf16 before the next, so that a machine whose load
changes during the run slows both precisions alike (per-example seeds: the outcome does not depend on the chunks).

Records, per attack: wall seconds of each precision and their ratio (the speed-up), robust accuracy of each and
the gap in points (bf16 minus float32; positive: bf16 found fewer breaks), the examples each breaks that the other
does not, the per-component counts (bf16: found in bf16 and confirmed in float32), and the machine (CPU model and
its bfloat16 instructions, cores, torch threads, load average before and after). Results are merged into
``--out``.json under the card, n and device, and ``--out``.md is rewritten from the whole JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


def machine(device: str) -> dict[str, Any]:
    """The hardware the figures come from."""
    from mixzoo.attacks.precision import native_bf16_cpu
    from mixzoo.core.machine import machine_summary

    flags = ""
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        pass
    out = {"summary": machine_summary(device), "cpu": platform.processor() or platform.machine(),
           "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
           "cpu_bf16_flags": sorted({f for f in flags.split() if f in ("avx512_bf16", "amx_bf16", "amx_tile")}),
           "native_bf16_cpu": native_bf16_cpu()}
    try:
        from mixzoo.core.machine import describe_machine

        out["cpu"] = describe_machine(device).get("cpu") or out["cpu"]
    except (ImportError, AttributeError):
        pass
    if device.startswith("cuda"):
        out["gpu"] = torch.cuda.get_device_name(torch.device(device))
        out["cuda_bf16"] = torch.cuda.is_bf16_supported()
    return out


def load() -> list[float]:
    return [round(v, 2) for v in os.getloadavg()]


def broken(res: Any) -> set[int]:
    return set(torch.nonzero(res["clean"] & ~res["robust"]).squeeze(1).tolist())


def run_attack(attack: str, model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor, eps: float,
               norm: str, seed: int, chunk: int, device: str,
               after_chunk: Callable[[dict[str, Any]], None] | None = None) -> dict[str, dict[str, Any]]:
    """Both precisions of ``attack``, chunk by chunk, float32 then bf16 on each chunk; ``after_chunk`` gets the
    summary of the chunks done so far."""
    from mixzoo.core.plugins import lookup

    cls = lookup("attack", attack)
    acc: dict[str, dict[str, Any]] = {p: {"seconds": 0.0, "clean": [], "robust": [], "components": {}}
                                      for p in ("float32", "bf16")}
    for start in range(0, len(labels), chunk):
        x, y = images[start:start + chunk].to(device), labels[start:start + chunk].to(device)
        index = torch.arange(start, start + len(y))
        for precision in ("float32", "bf16"):
            runner = cls(eps=eps, norm=norm, seed=seed, batch_size=chunk)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            res = runner.run(model, x, y, progress=False, index=index, precision=precision)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            a = acc[precision]
            a["seconds"] += time.perf_counter() - t0
            a["clean"].append(res.clean_correct.cpu())
            a["robust"].append(res.robust_correct.cpu())
            for c in res.components:
                d = a["components"].setdefault(c.name, {"newly_broken": 0, "seconds": 0.0})
                d["newly_broken"] += int(c.newly_broken)
                d["seconds"] += c.seconds
                if c.found_bf16 is not None:
                    d["found_bf16"] = d.get("found_bf16", 0) + int(c.found_bf16)
                    d["confirmed_float32"] = d.get("confirmed_float32", 0) + int(c.confirmed_float32)
                    d["rerun_float32"] = d.get("rerun_float32", 0) + int(c.rerun_float32 or 0)
            print(f"{attack} {precision} images {start}-{start + len(y)}: {time.perf_counter() - t0:.1f} s, "
                  f"load {load()}", flush=True)
        if after_chunk is not None and start + chunk < len(labels):
            after_chunk({**summarise(joined(acc)), "partial": f"the first {start + len(y)} of {len(labels)} images"})
    return joined(acc)


def joined(acc: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``acc`` with each precision's per-chunk outcomes concatenated."""
    return {p: {**a, "clean": torch.cat(a["clean"]), "robust": torch.cat(a["robust"])} for p, a in acc.items()}


def summarise(acc: dict[str, dict[str, Any]]) -> dict[str, Any]:
    f32, b16 = acc["float32"], acc["bf16"]
    n = len(f32["clean"])
    out: dict[str, Any] = {}
    for p, a in acc.items():
        out[p] = {"seconds": round(a["seconds"], 1), "clean_accuracy": float(a["clean"].float().mean()),
                  "robust_accuracy": float(a["robust"].float().mean()), "robust": int(a["robust"].sum()),
                  "components": {k: {**v, "seconds": round(v["seconds"], 1)} for k, v in a["components"].items()}}
    out["speedup"] = round(f32["seconds"] / b16["seconds"], 2)
    out["robust_gap_points"] = round(100 * (out["bf16"]["robust_accuracy"] - out["float32"]["robust_accuracy"]), 2)
    out["broken_only_float32"] = sorted(broken(f32) - broken(b16))
    out["broken_only_bf16"] = sorted(broken(b16) - broken(f32))
    out["n"] = n
    return out


def markdown(data: dict[str, Any]) -> str:
    lines = ["# Attacks in bfloat16 against float32", "",
             "Written by `benchmarks/precision_speed.py` from `benchmarks/precision_speed.json`. Each attack ran on "
             "the "
             "card's mixed classifier in float32 and in bf16 (bfloat16 autocast; every break confirmed in float32 "
             "outside autocast), chunk by chunk, float32 then bf16 on each chunk. Speed-up: float32 seconds / bf16 "
             "seconds. Gap: bf16 robust accuracy minus float32's, in points (target: at most +0.2). Last column: "
             "candidates bf16 saw as broken, those float32 confirmed, and the breaks of the float32 re-run on the "
             "examples whose candidate was dropped.", "",
             "| card | n | device | attack | float32 s | bf16 s | speed-up | robust % float32 | robust % bf16 | gap "
             "(points) | broken only in float32 / only in bf16 | bf16 breaks: found / confirmed / float32 re-run |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for run in data["runs"]:
        for attack, r in run["attacks"].items():
            comps = [c for c in r["bf16"]["components"].values() if "found_bf16" in c]  # Square runs in float32
            found = sum(c.get("found_bf16", 0) for c in comps)
            conf = sum(c.get("confirmed_float32", 0) for c in comps)
            # every bf16 break is either confirmed or found by the float32 re-run (Attack.run)
            rerun = sum(c.get("rerun_float32", c["newly_broken"] - c.get("confirmed_float32", 0)) for c in comps)
            note = f" ({r['partial']})" if r.get("partial") else ""
            lines.append(f"| {Path(run['card']).stem} | {r['n']} | {run['device']} | {attack}{note} | "
                         f"{r['float32']['seconds']:.0f} | {r['bf16']['seconds']:.0f} | {r['speedup']:.2f}x | "
                         f"{100 * r['float32']['robust_accuracy']:.1f} | {100 * r['bf16']['robust_accuracy']:.1f} | "
                         f"{r['robust_gap_points']:+.1f} | {len(r['broken_only_float32'])} / "
                         f"{len(r['broken_only_bf16'])} | {found} / {conf} / {rerun} |")
    lines += ["", "Machines:", ""]
    for run in data["runs"]:
        m = run["machine"]
        lines.append(f"- {Path(run['card']).stem}, n={run['n']}, {run['device']}: {m['summary']}; "
                     f"{m['cpus']} CPUs, bf16 CPU flags {', '.join(m['cpu_bf16_flags']) or 'none'}"
                     f"{', GPU ' + m['gpu'] if m.get('gpu') else ''}; load average {run['load_before']} before, "
                     f"{run['load_after']} after{'; shared with other jobs' if run.get('shared') else ''}; "
                     f"torch {m['torch']}, mixzoo commit {run.get('commit', '?')}.")
        lines += [f"  - card warning: {w}" for w in run.get("card_warnings", [])]
        lines += [f"  - {attack}: mixzoo commit {r['commit']}, load average {r['load_before']} before, "
                  f"{r['load_after']} after" for attack, r in run["attacks"].items() if "load_before" in r]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--card", required=True)
    ap.add_argument("--n", type=int, default=250)
    ap.add_argument("--attacks", default="adaptive,adaptive-apgd")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--chunk", type=int, default=50, help="images per chunk (each attacked in both precisions)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--shared", action="store_true", help="record that other jobs shared the machine")
    ap.add_argument("--out", default="benchmarks/precision_speed")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    from mixzoo.core.machine import run_record
    from mixzoo.evaluation.bench import card_evaluation

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ce = card_evaluation(args.card, n=args.n, device=args.device, progress=False)
    model = ce.mixed.eval()
    images, labels = ce.data.images, ce.data.labels
    run: dict[str, Any] = {"card": args.card, "n": len(labels), "device": args.device, "eps": ce.eps,
                           "norm": ce.norm, "seed": args.seed, "chunk": args.chunk, "machine": machine(args.device),
                           "load_before": load(), "shared": args.shared, "card_warnings": [str(w.message)
                                                                                           for w in caught],
                           "attacks": {}}
    record = run_record(args.device)
    run["commit"] = record.get("git_commit") or record.get("commit")
    for attack in args.attacks.split(","):
        def partial(summary: dict[str, Any], attack: str = attack) -> None:
            run["attacks"][attack] = summary
            run["load_after"] = load()
            write(run, Path(args.out))

        acc = run_attack(attack, model, images, labels, ce.eps, ce.norm, args.seed, args.chunk, args.device,
                         after_chunk=partial)
        run["attacks"][attack] = summarise(acc)
        print(json.dumps({attack: {k: v for k, v in run["attacks"][attack].items()
                                   if k in ("speedup", "robust_gap_points", "n")}}), flush=True)
        run["load_after"] = load()
        write(run, Path(args.out))  # after each attack, so a long run keeps what it has measured


def write(run: dict[str, Any], out: Path) -> None:
    """Merge ``run`` into ``out``.json (replacing the run of the same card, n and device) and rewrite ``out``.md."""
    path = out.with_suffix(".json")
    data = json.loads(path.read_text()) if path.exists() else {"runs": []}
    data["runs"] = [r for r in data["runs"] if (r["card"], r["n"], r["device"]) != (run["card"], run["n"],
                                                                                   run["device"])] + [run]
    path.write_text(json.dumps(data, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(data))
    print(f"written {path} and {out.with_suffix('.md')}", flush=True)


if __name__ == "__main__":
    main()
