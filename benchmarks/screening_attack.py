"""The screening attack ``fast`` against pyautoattack's standard evaluation and ``adaptive``, card kind by card kind.

    .venv/bin/python benchmarks/screening_attack.py --digits --n 250            # every digits card kind
    .venv/bin/python benchmarks/screening_attack.py --card benchmarks/results/cards/fmnist_mixednuts.toml --n 250 \
        --recorded benchmarks/results/autoattack_parity/fmnist_n1000_cpu/chunks/chunk_000000_000250.json
    # add --device cuda on a GPU machine

For each classifier, on the first ``n`` evaluation images at the card's eps, one process: pyautoattack's standard
evaluation as a user runs it (``AutoAttack(model, version="standard", seed=0)`` on the exact gradient, all images
in one batch of ``--batch-size``), mixzoo's ``adaptive`` and ``fast`` (per-example draws, as ``mixzoo bench`` runs
them). ``fast`` runs first, after one untimed warm-up pass. Targets: ``fast`` at most 0.2x pyautoattack's wall time
and its robust accuracy within 0.5 points of ``adaptive``'s. Every example ``adaptive`` breaks and ``fast`` does
not is attributed to the ``adaptive`` components that break it when run alone on it (per-example draws make that
run the same as inside ``adaptive``). Digits kinds (built here, as the tests build them): the ABC ``digits-std``
and the RBC ``digits-pgd`` alone, the linear mixture (alpha 0.9), MixedNUTS (``mixzoo mix`` with the tests' quick
settings) and adaptive smoothing setting C (a quick fit). With ``--recorded`` (a chunk file of
``benchmarks/autoattack_parity.py`` on the same card and images) pyautoattack's and ``adaptive``'s outcomes and
times are read from it instead of run again: the time ratio then compares runs made at different times on the same
machine kind, which the report says. Writes ``--out``.json and ``--out``.md (default
``benchmarks/screening_attack``; a second run with another ``--section`` adds its rows).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from autoattack_parity import _broken, run_mixzoo, run_pyautoattack  # noqa: E402

TIME_TARGET, GAP_TARGET = 0.2, 0.5


def attribute(model, x, y, eps, norm, seed, examples: list[int], components: list[str]) -> dict[int, list[str]]:
    """Per example, the ``adaptive`` components that break it when each runs alone on it."""
    if not examples:
        return {}
    idx = torch.tensor(examples)
    found: dict[int, list[str]] = {i: [] for i in examples}
    for comp in components:
        res = run_mixzoo(model, x[idx], y[idx], eps, norm, seed, len(idx), "adaptive",
                         options={"components": [comp]}, index=idx)
        for i, ok in zip(examples, res["robust"].tolist(), strict=True):
            if not ok:
                found[i].append(comp)
    return found


def warm_up(model, x, y) -> None:
    """One untimed forward and backward pass (and of ``forward_pair`` where the model has it) before any side is
    timed, so that first-call costs (kernel selection, allocations, lazy set-up) fall on no side."""
    from mixzoo.attacks.apgd import pair

    for fwd in (model, getattr(model, "forward_pair", None)):
        if fwd is None:
            continue
        xg = x.clone().requires_grad_(True)
        _, loss_logits = pair(fwd(xg))
        torch.autograd.grad(torch.nn.functional.cross_entropy(loss_logits, y), xg, allow_unused=True)


def step_profile(model, x, y, eps, norm, args) -> dict:
    """``fast`` once more (same outcome) on a model wrapper that counts the forward passes and the rows they
    evaluate, against one full APGD run's rows (n_iter + 1 passes over every clean-correct example), and the time of
    a pass over the whole batch: where ``fast``'s time goes when the model is tiny."""
    from torch import nn

    class Counting(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner, self.calls, self.rows = inner, 0, 0

        def forward(self, t):
            self.calls, self.rows = self.calls + 1, self.rows + len(t)
            return self.inner(t)

    counted = Counting(model)
    res = run_mixzoo(counted, x, y, eps, norm, args.seed, args.batch_size, "fast",
                     options={"n_target_classes": args.n_target_classes})
    n_iter = 100
    t0 = time.perf_counter()
    for _ in range(20):
        xg = x.clone().requires_grad_(True)
        torch.autograd.grad(torch.nn.functional.cross_entropy(model(xg), y), xg)
    full_pass = (time.perf_counter() - t0) / 20
    return {"forward_calls": counted.calls, "rows_evaluated": counted.rows,
            "rows_one_full_run": (n_iter + 1) * int(res["clean"].sum()), "seconds": round(res["seconds"], 3),
            "seconds_per_forward_backward_of_the_whole_batch": round(full_pass, 4),
            "seconds_per_forward_call": round(res["seconds"] / max(counted.calls, 1), 5)}


def digits_models(tmp: Path) -> list[tuple[str, object]]:
    """(kind, classifier) for every digits card kind."""
    from mixzoo.core.card import MixCard
    from mixzoo.methods import fit
    from mixzoo.methods.mixednuts.fitting import mix
    from mixzoo.zoo.models import load_model
    from mixzoo.zoo.pairs import load_mixed

    abc, rbc = load_model("digits-std"), load_model("digits-pgd")
    mix("digits-std", "digits-pgd", out=tmp / "mixednuts.toml", cache_dir=tmp / "cache", n_calib=120, n_iter=8,
        n_target_classes=2, batch_size=60, progress=False)
    linear = MixCard("linear", {"alpha": 0.9}, abc={"name": "digits-std"}, rbc={"name": "digits-pgd"},
                     dataset="digits", attack={"eps": 0.2, "norm": "Linf"}).save(tmp / "linear.toml")
    fit("adaptive-smoothing", "digits-std", "digits-pgd", out=tmp / "adaptive_c.toml", eps=0.2, n_calib=50, seed=0,
        cache_dir=tmp / "cache", progress=False,
        options={"setting": "C", "epochs": 2, "n_train": 400, "n_val": 40, "batch_size": 40, "steps": [2, 3],
                 "lr": 1e-3, "eval_n_iter": 4, "eval_n_queries": 30})
    return [("abc (digits-std)", abc), ("rbc (digits-pgd)", rbc), ("linear alpha 0.9", load_mixed(linear)),
            ("mixednuts", load_mixed(tmp / "mixednuts.toml")),
            ("adaptive smoothing C", load_mixed(tmp / "adaptive_c.toml"))]


def measure(kind, model, x, y, eps, norm, args, recorded: dict | None = None) -> dict:
    from mixzoo.attacks.suites import ADAPTIVE_COMPONENTS
    from mixzoo.core.plugins import lookup

    warm_up(model, x[: args.batch_size], y[: args.batch_size])
    fast = run_mixzoo(model, x, y, eps, norm, args.seed, args.batch_size, "fast",
                      options={"n_target_classes": args.n_target_classes})
    if recorded is None:
        aa = run_pyautoattack(model, x, y, eps, norm, args.seed, args.batch_size)
        ad = run_mixzoo(model, x, y, eps, norm, args.seed, args.batch_size, "adaptive")
        source = "measured in this run"
    else:
        to_t = {k: torch.tensor(v) if k in ("clean", "robust") else v for k, v in recorded["pyautoattack"].items()}
        version = lookup("attack", "adaptive").code_version
        rec_ad = recorded["mixzoo"][f"adaptive@{version}" if version else "adaptive"]
        ad = {k: torch.tensor(v) if k in ("clean", "robust") else v for k, v in rec_ad.items()}
        aa = to_t
        if len(aa["clean"]) != len(y):
            raise SystemExit(f"--n {len(y)} differs from the recorded chunk's {len(aa['clean'])} images: the"
                             " recorded wall times are for the whole chunk")
        if not torch.equal(ad["clean"][: len(y)], fast["clean"]):
            raise SystemExit("the recorded chunk's clean predictions differ from this card's: not the same images")
        ad["clean"], ad["robust"] = ad["clean"][: len(y)], ad["robust"][: len(y)]
        source = f"pyautoattack and adaptive read from {args.recorded} (an earlier run)"
    calibration = None
    if recorded is not None and args.calibrate:
        # the recorded times come from another run, maybe another CPU: time adaptive's apgd-ce here (the same
        # component, images and draws as in the record) and scale pyautoattack's recorded time by the two
        here = run_mixzoo(model, x, y, eps, norm, args.seed, args.batch_size, "adaptive",
                          options={"components": ["apgd-ce"]})
        there = rec_ad["components"]["apgd-ce"]["seconds"]
        factor = here["seconds"] / there
        calibration = {"adaptive_apgd_ce_seconds_here": round(here["seconds"], 1),
                       "adaptive_apgd_ce_seconds_recorded": round(there, 1),
                       "speed_factor_here_over_recorded": round(factor, 3),
                       "pyautoattack_seconds_scaled_to_here_estimate": round(aa["seconds"] * factor, 1),
                       "time_ratio_fast_to_scaled_pyautoattack_estimate":
                       round(fast["seconds"] / (aa["seconds"] * factor), 3)}
    fast_b, ad_b, aa_b = (_broken(r["clean"], r["robust"]) for r in (fast, ad, aa))
    only_adaptive = sorted(ad_b - fast_b)
    comps = list(ADAPTIVE_COMPONENTS)
    n = len(y)
    row = {
        "kind": kind, "n": n, "source": source,
        "pyautoattack": {"seconds": round(aa["seconds"], 1), "robust": int(aa["robust"].sum())},
        "adaptive": {"seconds": round(ad["seconds"], 1), "robust": int(ad["robust"].sum()),
                     "components": ad.get("components")},
        "fast": {"seconds": round(fast["seconds"], 1), "robust": int(fast["robust"].sum()),
                 "components": fast["components"]},
        "clean": int(fast["clean"].sum()),
        "time_ratio_fast_to_pyautoattack": round(fast["seconds"] / aa["seconds"], 3),
        "recorded_time_calibration": calibration,
        "gap_points_fast_minus_adaptive": round(100 * (int(fast["robust"].sum()) - int(ad["robust"].sum())) / n, 2),
        "only_adaptive": only_adaptive, "only_fast": sorted(fast_b - ad_b),
        "only_pyautoattack_vs_fast": sorted(aa_b - fast_b),
        "only_adaptive_broken_by": {str(k): v for k, v in attribute(model, x, y, eps, norm, args.seed, only_adaptive,
                                                                     comps).items()},
    }
    row["fast_by_n_target_classes"] = {}
    for k in args.k_sweep:
        other = fast if k == args.n_target_classes else run_mixzoo(model, x, y, eps, norm, args.seed, args.batch_size,
                                                                   "fast", options={"n_target_classes": k})
        row["fast_by_n_target_classes"][k] = {"robust": int(other["robust"].sum()),
                                              "seconds": round(other["seconds"], 1),
                                              "only_adaptive": len(ad_b - _broken(other["clean"], other["robust"]))}
    if args.profile_steps:
        row["fast_step_profile"] = step_profile(model, x, y, eps, norm, args)
    row["time_target_met"] = row["time_ratio_fast_to_pyautoattack"] <= TIME_TARGET
    row["gap_target_met"] = row["gap_points_fast_minus_adaptive"] <= GAP_TARGET
    return row


def write(out: Path, section: str, rows: list[dict], args) -> None:
    from mixzoo.core.machine import describe_machine, machine_summary

    path = out.with_suffix(".json")
    result = json.loads(path.read_text()) if path.exists() else {"sections": {}}
    result["sections"][section] = {
        "rows": rows, "n_target_classes": args.n_target_classes, "seed": args.seed, "batch_size": args.batch_size,
        "torch_threads": torch.get_num_threads(), "machine": machine_summary(args.device),
        "machine_detail": describe_machine(args.device),
        "load_average_1_5_15_min": [round(v, 1) for v in os.getloadavg()],
        "command": "python benchmarks/screening_attack.py " + " ".join(args.argv), "commit": args.commit}
    write_files(out, result)


def merge(out: Path, parts: list[str]) -> None:
    """One report from the .json files of runs made in separate processes (their sections, rows appended)."""
    path = out.with_suffix(".json")
    result = json.loads(path.read_text()) if path.exists() else {"sections": {}}
    for part in parts:
        for name, sec in json.loads(Path(part).read_text())["sections"].items():
            have = result["sections"].setdefault(name, {**sec, "rows": [], "command": []})
            have["rows"] += sec["rows"]
            have["command"] = [*([have["command"]] if isinstance(have["command"], str) else have["command"]),
                               sec["command"]]
            have["load_average_1_5_15_min"] = sec["load_average_1_5_15_min"]
            for row in sec["rows"]:
                row.setdefault("commit", sec.get("commit"))
    write_files(out, result)


def write_files(out: Path, result: dict) -> None:
    """``out``.json and ``out``.md from the collected sections."""
    out.with_suffix(".json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    lines = ["# Screening attack `fast` against pyautoattack standard and `adaptive`", "",
             "Written by `benchmarks/screening_attack.py` (raw numbers: `benchmarks/screening_attack.json`). Targets:"
             f" `fast` at most {TIME_TARGET}x pyautoattack's standard wall time, robust accuracy at most"
             f" {GAP_TARGET} points above `adaptive`'s on the same images.", ""]
    for name, sec in result["sections"].items():
        lines += [f"## {name}", "", f"Machine: {sec['machine']}; torch threads {sec['torch_threads']}; load average"
                  f" at the end {sec['load_average_1_5_15_min']} (2 cores shared with other jobs: wall times are"
                  f" comparable within a row only). `fast` with n_target_classes={sec['n_target_classes']}, seed"
                  f" {sec['seed']}, batches of {sec['batch_size']}. Command(s), one process each: "
                  + "; ".join(f"`{c}`" for c in ([sec["command"]] if isinstance(sec["command"], str)
                                                  else sec["command"])) + ".", "",
                  "| classifier (commit) | n | clean | robust: pyautoattack / adaptive / fast | gap (points) | seconds:"
                  " pyautoattack / adaptive / fast | fast / pyautoattack | targets | adaptive-only breaks"
                  " (adaptive components that break each alone) | fast robust by n_target_classes |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for r in sec["rows"]:
            met = ("time " + ("met" if r["time_target_met"] else "**not met**") + ", gap "
                   + ("met" if r["gap_target_met"] else "**not met**"))
            sweep = ", ".join(f"k={k}: {v['robust']} ({v['seconds']} s)"
                              for k, v in r.get("fast_by_n_target_classes", {}).items())
            gap = ", ".join(f"{k}: {'+'.join(v) or 'none alone'}" for k, v in r["only_adaptive_broken_by"].items())
            commit = f" (`{r['commit']}`)" if r.get("commit") else ""
            lines.append(f"| {r['kind']}{commit} | {r['n']} | {r['clean']} | {r['pyautoattack']['robust']} /"
                         f" {r['adaptive']['robust']} / {r['fast']['robust']} |"
                         f" {r['gap_points_fast_minus_adaptive']:+.2f} | {r['pyautoattack']['seconds']} /"
                         f" {r['adaptive']['seconds']} / {r['fast']['seconds']} |"
                         f" {r['time_ratio_fast_to_pyautoattack']} | {met} | {gap or 'none'} | {sweep} |")
        for r in sec["rows"]:
            cal = r.get("recorded_time_calibration")
            if cal:
                lines += ["", f"{r['kind']}: the recorded times come from another run. adaptive's apgd-ce took"
                          f" {cal['adaptive_apgd_ce_seconds_here']} s here and"
                          f" {cal['adaptive_apgd_ce_seconds_recorded']} s in the record (factor"
                          f" {cal['speed_factor_here_over_recorded']}), so pyautoattack would"
                          f" take about {cal['pyautoattack_seconds_scaled_to_here_estimate']} s here and"
                          f" fast / pyautoattack is about {cal['time_ratio_fast_to_scaled_pyautoattack_estimate']}"
                          " (an estimate)."]
        sources = {r["source"] for r in sec["rows"]}
        lines += ["", "Source of the pyautoattack and adaptive columns: " + "; ".join(sorted(sources)) + ".", ""]
    out.with_suffix(".md").write_text("\n".join(lines))


def main() -> None:
    import sys

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--digits", action="store_true", help="every digits card kind, built here")
    src.add_argument("--card", help="a mix card (TOML) to attack")
    src.add_argument("--merge", nargs="+", help="write --out from the .json files of separate runs")
    ap.add_argument("--kinds", default=None, help="--digits: comma-separated row numbers to run (0-4: abc, rbc,"
                                                  " linear, mixednuts, adaptive smoothing C)")
    ap.add_argument("--n", type=int, default=250)
    ap.add_argument("--recorded", help="a chunk file of benchmarks/autoattack_parity.py with pyautoattack's and"
                                       " adaptive's outcomes on these images (--card only)")
    ap.add_argument("--n-target-classes", type=int, default=3)
    ap.add_argument("--k-sweep", default="1,3,5,9", type=lambda t: [int(k) for k in t.split(",") if k],
                    help="n_target_classes values to run fast with besides (robust, seconds, adaptive-only breaks)")
    ap.add_argument("--calibrate", action="store_true",
                    help="with --recorded: time adaptive's apgd-ce here to scale the recorded pyautoattack time")
    ap.add_argument("--profile-steps", action="store_true",
                    help="also count fast's forward passes and rows (fast_step_profile in the row)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=250)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--section", default=None, help="the report's section name (default: from the source)")
    ap.add_argument("--out", default="benchmarks/screening_attack")
    args = ap.parse_args()
    args.argv = sys.argv[1:]
    import subprocess

    args.commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                 cwd=Path(__file__).parent).stdout.strip() or None
    torch.set_num_threads(args.threads)

    from mixzoo.core.card import MixCard
    from mixzoo.zoo.data import load_dataset
    from mixzoo.zoo.pairs import card_dataset, load_mixed

    out, rows = Path(args.out), []
    if args.merge:
        merge(out, args.merge)
    elif args.digits:
        section = args.section or f"digits, first {args.n} evaluation images, Linf eps 0.2"
        data = load_dataset("digits", "evaluation", n=args.n)
        x, y = data.images.to(args.device), data.labels.to(args.device)
        with tempfile.TemporaryDirectory() as tmp:
            chosen = None if args.kinds is None else {int(k) for k in args.kinds.split(",")}
            for number, (kind, model) in enumerate(digits_models(Path(tmp))):
                if chosen is not None and number not in chosen:
                    continue
                model = model.to(args.device).eval()
                rows.append(measure(kind, model, x, y, 0.2, "Linf", args))
                print(json.dumps(rows[-1]), flush=True)
                write(out, section, rows, args)
    else:
        card = MixCard.load(args.card)
        model = load_mixed(card, device=args.device)
        eps, norm = float(card.attack["eps"]), str(card.attack.get("norm", "Linf"))
        section = args.section or f"{Path(args.card).name}, first {args.n} evaluation images, {norm} eps {eps:g}"
        data = load_dataset(card_dataset(card, model.rbc), "evaluation", n=args.n)
        x, y = data.images.to(args.device), data.labels.to(args.device)
        recorded = json.loads(Path(args.recorded).read_text()) if args.recorded else None
        rows.append(measure(card.method, model, x, y, eps, norm, args, recorded))
        print(json.dumps(rows[-1]), flush=True)
        write(out, section, rows, args)


if __name__ == "__main__":
    from mixzoo.core.errors import run_script

    run_script(main)
