"""Evaluations side by side: pyautoattack standard, mixzoo's ``adaptive`` and any others, on one classifier.

    .venv/bin/python benchmarks/eval_speed.py --dataset digits --n 250 --out benchmarks/eval_speed_digits_cpu
    .venv/bin/python benchmarks/eval_speed.py --dataset fmnist --n 1000 --device cuda \\
        --side fast=fast --side bf16=adaptive,precision=bf16 --out benchmarks/eval_speed_fmnist_gpu

In one process, on the same MixedNUTS classifier (``mixzoo.load_mixed``), the same first ``--n`` evaluation images
at the card's eps and the same device, it runs

* ``pyautoattack``: the installed pyautoattack as an outside user runs it, ``AutoAttack(model, version="standard",
  seed=SEED).run_standard_evaluation(x, y, batch_size=BATCH)`` on the exact classifier
  (:func:`autoattack_parity.run_pyautoattack`);
* ``adaptive``: mixzoo's default evaluation as ``mixzoo bench`` runs it (chunks of ``--batch-size`` images, every
  random draw per example; :func:`autoattack_parity.run_mixzoo`);
* each ``--side NAME=ATTACK[,key=value...]``: the mixzoo attack ``ATTACK`` with those options (values are read as
  int, float, true/false or text; ``a+b`` is a list, e.g. ``components=apgd-ce+square``). A side whose attack or
  option is unknown is reported as an error and the others still run.

Reports per side: robust accuracy, wall time and its ratio to pyautoattack's, per-component newly broken counts and
seconds, and for every pair of sides the examples one breaks and the other does not; plus the machine (CPU model
and vector flags or GPU name, torch / CUDA versions, threads, load average). Writes ``--out``.json and .md.

``--dataset digits`` builds a digits MixedNUTS card the way the tests build one (digits-std + digits-pgd, 120
calibration images, MMAA with 8 iterations and 2 targets) unless ``--card`` is given; ``--dataset fmnist`` uses
``benchmarks/results/cards/fmnist_mixednuts.toml`` unless ``--card`` is given.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from autoattack_parity import _broken, run_mixzoo, run_pyautoattack  # noqa: E402

FMNIST_CARD = Path(__file__).resolve().parent / "results" / "cards" / "fmnist_mixednuts.toml"
DIGITS_MIX = dict(n_calib=120, n_iter=8, n_target_classes=2, batch_size=60, progress=False)  # tests/conftest.py's
AA_STEP = re.compile(r"robust accuracy after ([A-Z-]+): [\d.]+% \(total time ([\d.]+) s\)")


def parse_side(text: str) -> tuple[str, str, dict]:
    """``NAME=ATTACK[,key=value...]`` -> (name, attack, options)."""
    name, sep, rest = text.partition("=")
    if not sep or not name or not rest:
        raise argparse.ArgumentTypeError(f"{text!r}: give a side as NAME=ATTACK[,key=value...]")
    attack, *pairs = rest.split(",")
    options = {}
    for item in pairs:
        key, sep, value = item.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"{item!r} in {text!r}: give options as key=value")
        options[key] = _value(value)
    return name, attack, options


def _value(text: str):
    if "+" in text:
        return [_value(v) for v in text.split("+")]
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def aa_components(log: list[str]) -> dict:
    """pyautoattack's per-component seconds from its log (cumulative times -> differences); its counts are robust
    accuracies, so newly broken is not split by component here."""
    out, last = {}, 0.0
    for line in log:
        m = AA_STEP.search(line)
        if m:
            total = float(m.group(2))
            out[m.group(1).lower()] = {"seconds": round(total - last, 1)}
            last = total
    return out


def machine(device: str) -> dict:
    from mixzoo.core.machine import cpu_capability, cpu_model, machine_summary

    info = {"summary": machine_summary(device), "cpu": cpu_model(), "cpu_capability": cpu_capability(),
            "cpu_count": os.cpu_count(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "torch_threads": torch.get_num_threads(),
            "load_average_1_5_15_min_at_start": [round(v, 2) for v in os.getloadavg()]}
    if torch.device(device).type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(torch.device(device))
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
        info["cpu_flags"] = sorted({f for f in flags.split(":", 1)[1].split() if f.startswith(("avx", "amx"))})
    except (OSError, StopIteration):
        pass
    return info


def load(args) -> tuple:
    import mixzoo
    from mixzoo.core.card import MixCard
    from mixzoo.methods.mixednuts.fitting import mix
    from mixzoo.zoo.data import load_dataset
    from mixzoo.zoo.pairs import card_dataset

    if args.card:
        card_path = Path(args.card)
    elif args.dataset == "fmnist":
        card_path = FMNIST_CARD
    else:
        card_path = Path(args.out + "_card.toml")
        if not card_path.exists():
            mix("digits-std", "digits-pgd", out=card_path, device=args.device, **DIGITS_MIX)
    card = MixCard.load(card_path)
    model = mixzoo.load_mixed(card, device=args.device)
    eps, norm = float(card.attack["eps"]), str(card.attack.get("norm", "Linf"))
    data = load_dataset(card_dataset(card, model.rbc), "evaluation", n=args.n)
    return card_path, model, data.images.to(args.device), data.labels.to(args.device), eps, norm


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", choices=("digits", "fmnist"), default="digits")
    ap.add_argument("--card", default=None, help="a mix card (default: see --dataset)")
    ap.add_argument("--n", type=int, default=250)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--side", action="append", type=parse_side, default=[],
                    help="NAME=ATTACK[,key=value...] (repeatable), e.g. fast=fast or bf16=adaptive,precision=bf16")
    ap.add_argument("--no-adaptive", action="store_true", help="leave out the default `adaptive` side")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=250, help="both sides' batch (mixzoo bench's default)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: leave torch's default)")
    ap.add_argument("--out", default="benchmarks/eval_speed")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    card_path, model, x, y, eps, norm = load(args)
    sides = ([] if args.no_adaptive else [("adaptive", "adaptive", {})]) + list(args.side)
    names = [s[0] for s in sides]
    if len(set(names)) != len(names) or "pyautoattack" in names:
        ap.error(f"side names must be unique and not 'pyautoattack': {names}")
    result = {"card": str(card_path), "dataset": args.dataset, "n": args.n, "eps": eps, "norm": norm,
              "seed": args.seed, "batch_size": args.batch_size, "device": args.device, "machine": machine(args.device),
              "sides": {}}

    print(f"[eval_speed] pyautoattack standard on {args.n} images ({args.device})", flush=True)
    cpu0 = time.process_time()
    aa = run_pyautoattack(model, x, y, eps, norm, args.seed, args.batch_size)
    aa["cpu_seconds"] = time.process_time() - cpu0
    result["sides"]["pyautoattack"] = side_row("pyautoattack standard (exact classifier)", aa,
                                               aa_components(aa["log"]))
    print(f"[eval_speed] pyautoattack: {result['sides']['pyautoattack']['seconds']} s", flush=True)
    broken = {"pyautoattack": _broken(aa["clean"], aa["robust"])}
    finish(result, broken, Path(args.out))
    for name, attack, options in sides:
        print(f"[eval_speed] {name}: {attack} {options or ''}", flush=True)
        try:
            cpu0 = time.process_time()
            mz = run_mixzoo(model, x, y, eps, norm, args.seed, args.batch_size, attack, options=options)
            mz["cpu_seconds"] = time.process_time() - cpu0
        except Exception as err:  # noqa: BLE001 - an unknown attack or option is this side's error, not the run's
            result["sides"][name] = {"attack": attack, "options": options, "error": f"{type(err).__name__}: {err}"}
            print(f"[eval_speed] {name}: error {result['sides'][name]['error']}", flush=True)
            continue
        from mixzoo.core.plugins import lookup

        version = getattr(lookup("attack", attack), "code_version", None)
        row = side_row(f"{attack}@{version}" if version else attack, mz, mz["components"])
        result["sides"][name] = {"attack": attack, "options": options, **row}
        broken[name] = _broken(mz["clean"], mz["robust"])
        print(f"[eval_speed] {name}: {row['seconds']} s, robust {row['robust']}", flush=True)
        finish(result, broken, Path(args.out))  # after every side: a run stopped by a time limit keeps what it did
    finish(result, broken, Path(args.out))
    print(json.dumps({k: result["only"][k] for k in result["only"] if k.endswith("not adaptive")}), flush=True)


def finish(result: dict, broken: dict[str, set[int]], out: Path) -> None:
    """Ratios to pyautoattack, the pairwise "only A" lists and the load, then the JSON and Markdown files."""
    aa_row = result["sides"]["pyautoattack"]
    for row in result["sides"].values():
        if "seconds" in row:
            row["ratio_to_pyautoattack"] = round(row["seconds"] / aa_row["seconds"], 3) if aa_row["seconds"] else None
            row["cpu_ratio_to_pyautoattack"] = (round(row["cpu_seconds"] / aa_row["cpu_seconds"], 3)
                                                if aa_row["cpu_seconds"] else None)
    result["only"] = {f"{a} not {b}": sorted(broken[a] - broken[b]) for a in broken for b in broken if a != b}
    result["machine"]["load_average_1_5_15_min_at_end"] = [round(v, 2) for v in os.getloadavg()]
    write(out, result)


def side_row(label: str, res: dict, components: dict) -> dict:
    clean, robust = res["clean"], res["robust"]
    return {"label": label, "seconds": round(res["seconds"], 1), "cpu_seconds": round(res["cpu_seconds"], 1),
            "clean": int(clean.sum()),
            "robust": int(robust.sum()), "robust_accuracy": round(float(robust.float().mean()), 4),
            "components": {k: {kk: round(vv, 1) if isinstance(vv, float) else vv for kk, vv in v.items()}
                           for k, v in components.items()}}


def write(out: Path, result: dict) -> None:
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    m = result["machine"]
    hw = m.get("gpu") or f"{m['cpu']} ({m['cpu_capability']}; flags {' '.join(m.get('cpu_flags', []))})"
    lines = [f"# Evaluations side by side: {Path(result['card']).name}, first {result['n']} evaluation images,"
             f" {result['norm']} eps {result['eps']:g}, seed {result['seed']}", "",
             "Script: `benchmarks/eval_speed.py` (same classifier, images and device for every side, one process).",
             f"Machine: {hw}; {m['cpu_count']} cores; torch {m['torch']}, CUDA {m['cuda']}; torch threads"
             f" {m['torch_threads']}; load average at start {m['load_average_1_5_15_min_at_start']}, at end"
             f" {m['load_average_1_5_15_min_at_end']} (a load above the core count means other jobs shared the"
             " machine: compare wall times within this run only).", "",
             "CPU seconds: this process's CPU time for the side (all threads; less sensitive to other jobs than wall"
             " time when the machine is shared; on a GPU the host's time only).", "",
             "| side | evaluation | robust accuracy | robust / clean | seconds | ratio to pyautoattack | CPU seconds |"
             " CPU ratio | components (newly broken, s) |", "|---|---|---|---|---|---|---|---|---|"]
    for name, r in result["sides"].items():
        if "error" in r:
            lines.append(f"| {name} | `{r['attack']}` {r['options'] or ''} | error: {r['error']} | | | | | | |")
            continue
        comps = ", ".join(f"{k} {v.get('newly_broken', '-')} ({v['seconds']} s)" for k, v in r["components"].items())
        lines.append(f"| {name} | `{r['label']}` {r.get('options') or ''} | {r['robust_accuracy']:.2%} |"
                     f" {r['robust']} / {r['clean']} | {r['seconds']} | {r.get('ratio_to_pyautoattack')} |"
                     f" {r['cpu_seconds']} | {r.get('cpu_ratio_to_pyautoattack')} | {comps} |")
    lines += ["", "Examples (indices among the images) broken by one side and not by another:", ""]
    lines += [f"* {k}: {v}" for k, v in result["only"].items()]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    from mixzoo.core.errors import run_script

    run_script(main)
