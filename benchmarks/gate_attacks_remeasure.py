"""Re-measure the learned-gate cards with their declared ``gate-logit`` attack, on the examples the lineage bench
left robust.

The lineage bench (``benchmarks/results/every_method_fmnist_n1000/report/report.json``) holds, per card and per example,
the outcome of the shared ``adaptive`` attack and every extra attack the card's method declared then. An example
it counts broken stays broken; this script runs the attack the method also declares (``gate-logit``: its
attack plugin and options from ``extra_attacks``, as ``mixzoo bench`` runs it) on the examples still robust among
the first ``--n-images``, and records per card: robust accuracy before (the report's) and after (worst case over
both), what each component of the new attack broke, the RBC-margin screen's exclusions, and the margins of the
closest survivors. Every new break is then confirmed in a fresh process (``--confirm``): the point is moved strictly
inside the eps-ball (each coordinate of the perturbation clipped to eps - 1e-6) and in [0, 1], the card is rebuilt
from its file, and the point must be misclassified in float32 and in float64.

    nice -n 10 python benchmarks/gate_attacks_remeasure.py --n-images 500 \
        --out benchmarks/results/gate_attacks_fmnist_n500

Resumable: each card's outcome is written to OUT/CARD.json when it finishes, and a finished card is not attacked
again. Chunks of ``--chunk`` examples are attacked one after another (per-example randomness: the outcome of an
example does not depend on the chunk it is in).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

from mixzoo.core.errors import InputError, run_script

REPORT = Path("benchmarks/results/every_method_fmnist_n1000/report/report.json")
CARDS = {  # short name -> (card, the lineage report row's card_path suffix)
    "C": ("plugins/cards/fmnist-adaptive-smoothing-c.toml", "fmnist-adaptive-smoothing-c.toml"),
    "B": ("plugins/cards/fmnist-adaptive-smoothing-b.toml", "fmnist-adaptive-smoothing-b.toml"),
    "local-smoothing-adaptive": ("benchmarks/results/local_smoothing_fmnist/adaptive_full_split/card.toml",
                                 "local_smoothing_fmnist/adaptive_full_split/card.toml"),
}
EXTRA = "gate-logit"
# the stronger second pass (--strong): 200 iterations, 3 restarts, every APGD-T target
STRONG = {"n_iter": 200, "n_restarts": 3, "n_target_classes": 9, "refine_steps": 100,
          "components": ["gate-ce", "gate-t", "gate-refine"]}
# --closest K: the K survivors of the strong pass with the smallest margins, other random starts (seed 1), a larger
# mu and a longer refinement
CLOSEST = {**STRONG, "mus": [0.03, 0.1, 0.3, 1.0], "refine_steps": 400}
INSIDE = 1e-6  # the confirmed point's perturbation is clipped to eps - INSIDE per coordinate


def lineage_row(report: dict[str, Any], suffix: str) -> dict[str, Any]:
    rows = [m for m in report["models"] if str(m.get("card_path", "")).endswith(suffix)]
    if len(rows) != 1:
        raise InputError(f"{REPORT} has {len(rows)} rows for a card ending in {suffix!r}")
    return rows[0]


def attack_card(short: str, n_images: int, chunk: int, out: Path, mode: str = "declared",
                near: float = 0.0) -> dict[str, Any]:
    """Run the card's declared gate-logit attack on its lineage-robust examples among the first ``n_images``
    (``mode="declared"``); ``"strong"``: :data:`STRONG` on the survivors of the declared run that its screen did
    not exclude; ``"near"``: the declared gate components, without the screen, on the examples it excluded with an
    RBC margin below ``near`` (a check of the screen)."""
    strong = mode != "declared"
    from mixzoo.core.machine import run_record
    from mixzoo.core.plugins import lookup
    from mixzoo.evaluation.bench import card_evaluation

    card_path, suffix = CARDS[short]
    row = lineage_row(json.loads(REPORT.read_text()), suffix)
    robust_before = torch.tensor([c == "1" for c in row["robust_outcomes"][:n_images]])
    ce = card_evaluation(card_path, n=n_images)
    card = ce.card
    extra = next((e for e in card.mixing_method.extra_attacks(card) if e.name == EXTRA), None)
    if extra is None:
        raise InputError(f"{card_path}: its method declares no {EXTRA!r} extra attack")
    model = card.mixing_method.build(ce.abc, ce.rbc, card, gradient=extra.gradient)
    seed = (1 if mode == "closest" else 0) + extra.seed_offset
    todo = torch.nonzero(robust_before).squeeze(1)
    options = dict(extra.options)
    if strong:
        declared = json.loads((out / f"{short}.json").read_text())
        if mode == "strong":
            gone = set(declared["new_breaks"]) | {e["index"] for e in declared["excluded"]}
            todo = torch.tensor([i for i in todo.tolist() if i not in gone], dtype=torch.long)
            options = {**options, **STRONG}
        elif mode == "closest":
            survivors = json.loads((out / f"{short}.strong.json").read_text())["closest_survivors"]
            todo = torch.tensor(sorted(s["index"] for s in survivors[:int(near)]), dtype=torch.long)
            options = {**options, **CLOSEST}
        else:
            todo = torch.tensor(sorted(e["index"] for e in declared["excluded"] if e["rbc_margin"] < near),
                                dtype=torch.long)
            options = {**options, "components": ["gate-ce", "gate-t", "gate-refine"]}
        robust_before = torch.zeros(n_images, dtype=torch.bool)
        robust_before[todo] = True
    cls = lookup("attack", extra.attack)
    comps: dict[str, int] = {}
    broken_idx: list[int] = []
    broken_by: dict[str, str] = {}
    points: list[torch.Tensor] = []
    screen, best = torch.full((len(todo),), float("nan")), torch.full((len(todo),), float("inf"))
    warnings: list[str] = []
    t0 = time.perf_counter()
    for start in range(0, len(todo), chunk):
        idx = todo[start:start + chunk]
        attack = cls(eps=ce.eps, norm=ce.norm, seed=seed, **options)
        res = attack.run(model, ce.data.images[idx], ce.data.labels[idx], progress=False, index=idx)
        for c in res.components:
            comps[c.name] = comps.get(c.name, 0) + int(c.newly_broken)
        warnings += res.warnings
        screen[start:start + len(idx)] = attack.screen_margins()
        best[start:start + len(idx)] = attack.best_margins()
        hit = ~res.robust_correct & res.clean_correct
        broken_idx += idx[hit].tolist()
        points.append(res.adv_images[hit].cpu())
        broken_by.update({str(i): name for i, name, h in zip(idx.tolist(), attack.broken_by(), hit.tolist(),
                                                               strict=True) if h})
        print(f"{short}: {start + len(idx)}/{len(todo)} attacked, {len(broken_idx)} broken,"
              f" {time.perf_counter() - t0:.0f} s", flush=True)
    seconds = time.perf_counter() - t0
    survivors = [i for i in todo.tolist() if i not in set(broken_idx)]
    pos = {i: k for k, i in enumerate(todo.tolist())}
    attacked = sorted((float(best[pos[i]]), i) for i in survivors if best[pos[i]] != float("inf"))
    thr = None
    if hasattr(model, "bounds") and model.bounds()[0] > 0:
        from mixzoo.methods.adaptive.gate_attacks import rbc_margin_threshold

        thr = rbc_margin_threshold(model.bounds()[0])
    excluded = sorted((float(screen[pos[i]]), i) for i in survivors
                      if thr is not None and float(screen[pos[i]]) > thr)
    torch.save({"index": torch.tensor(broken_idx, dtype=torch.long),
                "images": torch.cat(points) if points else torch.empty(0)},
               out / f"{short}{'' if mode == 'declared' else '.' + mode}.adv.pt")
    n_after = int(robust_before.sum()) - len(broken_idx)
    return {
        "card": card_path, "method": card.method, "n_images": n_images, "eps": ce.eps, "norm": ce.norm,
        "extra_attack": {"name": extra.name, "attack": extra.attack, "options": options,
                         "seed": seed, "resolved_options": cls.check_options(dict(options))},
        "robust_before": int(robust_before.sum()), "robust_accuracy_before": int(robust_before.sum()) / n_images,
        "robust_after": n_after, "robust_accuracy_after": n_after / n_images,
        "attacked": len(todo), "new_breaks": broken_idx, "broken_by": broken_by, "components": comps,
        "rbc_margin_threshold": thr,
        "screen_excluded": len(excluded) if thr is not None else None,
        "closest_survivors": [{"index": i, "mixture_margin": m} for m, i in attacked[:10]],
        "excluded": [{"index": i, "rbc_margin": m} for m, i in excluded],
        "warnings": sorted(set(warnings)), "seconds": seconds, "machine": run_record("cpu"),
    }


def confirm(name: str, out: Path) -> dict[str, Any]:
    """In this (fresh) process: each saved break of result ``name`` (``CARD`` or ``CARD.strong``), moved strictly
    inside the ball, misclassified in float32 and float64 by the card's classifier rebuilt from its file."""
    from mixzoo.evaluation.bench import card_evaluation

    result = json.loads((out / f"{name}.json").read_text())
    saved = torch.load(out / f"{name}.adv.pt")
    if not len(saved["index"]):
        return {"n": 0, "float32": [], "float64": []}
    ce = card_evaluation(result["card"], n=result["n_images"])
    x, y = ce.data.images[saved["index"]], ce.data.labels[saved["index"]]
    eps = float(result["eps"])
    delta = (saved["images"].float() - x).clamp(-(eps - INSIDE), eps - INSIDE)
    adv = (x + delta).clamp(0.0, 1.0)
    assert float((adv - x).abs().max()) < eps
    checks: dict[str, Any] = {"n": len(y), "max_linf": float((adv - x).abs().flatten(1).max(1).values.max()),
                              "labels": y.tolist()}
    for dtype in (torch.float32, torch.float64):
        with torch.no_grad():
            pred = ce.mixed.to(dtype)(adv.to(dtype)).argmax(1)
        name = str(dtype).removeprefix("torch.")
        checks[name], checks[f"predicted_{name}"] = (pred != y).tolist(), pred.tolist()
    return checks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n-images", type=int, default=500)
    parser.add_argument("--cards", nargs="+", default=list(CARDS), choices=list(CARDS))
    parser.add_argument("--chunk", type=int, default=50)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/gate_attacks_fmnist_n500"))
    parser.add_argument("--strong", action="store_true",
                        help="after the declared run: STRONG on its survivors that the screen did not exclude")
    parser.add_argument("--near", type=float, default=0.0, metavar="MARGIN",
                        help="after the declared run: its gate components, unscreened, on the examples the screen"
                             " excluded with an RBC margin below MARGIN")
    parser.add_argument("--closest", type=int, default=0, metavar="K",
                        help="after the strong run: CLOSEST on its K survivors with the smallest mixture margins")
    parser.add_argument("--confirm", metavar="CARD", help=argparse.SUPPRESS)  # the fresh process's part
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.confirm:
        print(json.dumps(confirm(args.confirm, args.out)))
        return
    if not 1 <= args.n_images <= 1000:
        raise InputError(f"--n-images must be in 1..1000 (the lineage bench's images), got {args.n_images}")
    args.out.mkdir(parents=True, exist_ok=True)
    names = []
    for short in args.cards:
        modes = ["declared"] + (["strong"] if args.strong else []) + (["near"] if args.near > 0 else []) + (
            ["closest"] if args.closest > 0 and args.strong else [])
        for mode in modes:
            name = short if mode == "declared" else f"{short}.{mode}"
            if mode == "near" and json.loads((args.out / f"{short}.json").read_text())["screen_excluded"] is None:
                continue  # no screen, nothing excluded to check
            if mode == "closest" and not json.loads((args.out / f"{short}.strong.json").read_text())[
                    "closest_survivors"]:
                continue
            names.append(name)
            path = args.out / f"{name}.json"
            if path.exists():
                print(f"{name}: done ({path})")
                continue
            result = attack_card(short, args.n_images, args.chunk, args.out, mode=mode,
                                 near=args.closest if mode == "closest" else args.near)
            path.write_text(json.dumps(result, indent=1))
    summary = json.loads((args.out / "summary.json").read_text()) if (args.out / "summary.json").exists() else {}
    for name in names:
        result = json.loads((args.out / f"{name}.json").read_text())
        if "confirmation" not in result:
            proc = subprocess.run([sys.executable, __file__, "--confirm", name, "--out", str(args.out)],
                                  capture_output=True, text=True, check=True)
            result["confirmation"] = json.loads(proc.stdout.strip().splitlines()[-1])
            (args.out / f"{name}.json").write_text(json.dumps(result, indent=1))
        c = result["confirmation"]
        summary[name] = {k: result[k] for k in ("attacked", "robust_before", "robust_after", "components",
                                                "new_breaks", "screen_excluded", "seconds")}
        summary[name]["confirmed"] = c["n"] == len(result["new_breaks"]) and all(c.get("float32", [])) and all(
            c.get("float64", []))
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    (args.out / "summary.md").write_text(markdown(args.out, names))
    print(json.dumps(summary, indent=1))


def markdown(out: Path, names: list[str]) -> str:
    """The results as a short markdown page (one table row per run, then the closest survivors)."""
    from mixzoo.core.machine import machine_line

    lines = ["# Gate-logit attacks on the learned-gate cards (Fashion-MNIST, L-inf eps 0.1)", "",
             "Generated by `benchmarks/gate_attacks_remeasure.py`. Robust counts are over the first n evaluation"
             " images; 'before' is the lineage bench's worst case (shared `adaptive` attack and the card's other"
             " extra attacks), 'after' adds `gate-logit`. `.strong` rows: a second, stronger pass"
             " on what the first left and did not exclude; `.near` rows: the gate components without the screen on"
             " the examples the screen excluded closest to its threshold (a check of the screen); `.closest` rows: the"
             " strong pass's closest survivors attacked again (seed 1, mu up to 1, 400 refinement steps). Every new"
             " break"
             " was confirmed in a fresh process, strictly inside the ball, in float32 and float64.", "",
             "| run | n | attacked | robust before | robust after | new breaks by component | excluded by the"
             " RBC-margin screen | confirmed | seconds |", "|---|---|---|---|---|---|---|---|---|"]
    results = {name: json.loads((out / f"{name}.json").read_text()) for name in names}
    for name, r in results.items():
        n = r["n_images"]
        comps = ", ".join(f"{k} {v}" for k, v in r["components"].items()) or "none run"
        c = r.get("confirmation", {})
        ok = c.get("n") == len(r["new_breaks"]) and all(c.get("float32", [])) and all(c.get("float64", []))
        pct = ("", "") if "." in name else tuple(f" ({100 * r[k] / n:.1f} %)" for k in ("robust_before",
                                                                                         "robust_after"))
        lines.append(f"| {name} | {n} | {r['attacked']} | {r['robust_before']}{pct[0]} | {r['robust_after']}{pct[1]}"
                     f" | {comps} | {'-' if r['screen_excluded'] is None else r['screen_excluded']} |"
                     f" {'yes' if ok else 'NO'} ({c.get('n', 0)}) | {r['seconds']:.0f} |")
    lines += ["", "Worst case per card over the lineage bench and every pass above:", "",
              "| card | n | robust before | robust after | new breaks |", "|---|---|---|---|---|"]
    for name, r in results.items():
        if "." in name:
            continue
        new = [i for other, q in results.items() if other.split(".")[0] == name for i in q["new_breaks"]]
        n, before, after = r["n_images"], r["robust_before"], r["robust_before"] - len(set(new))
        lines.append(f"| {name} | {n} | {before} ({100 * before / n:.1f} %) | {after} ({100 * after / n:.1f} %) |"
                     f" {len(set(new))} |")
    lines += ["", "Closest survivors (the mixture's smallest probability margin at the points the gate attacks"
              " visited; examples the screen excluded are not attacked and not listed):", ""]
    for name, r in results.items():
        close = ", ".join(f"#{s['index']} {s['mixture_margin']:.4f}" for s in r["closest_survivors"][:5]) or "none"
        lines.append(f"- {name}: {close}")
        if r.get("excluded"):
            low = ", ".join(f"#{e['index']} {e['rbc_margin']:.4f}" for e in r["excluded"][:5])
            lines.append(f"  - excluded with the smallest RBC margins (threshold {r['rbc_margin_threshold']:.4f}):"
                         f" {low}")
        if r["new_breaks"]:
            shown = ", ".join(f"#{i} ({r['broken_by'][str(i)]})" for i in r["new_breaks"])
            lines.append(f"  - new breaks: {shown}")
    first = next(iter(results.values()), None)
    if first is not None:
        lines += ["", f"Machine: {machine_line(first['machine'])}, shared with other jobs."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    run_script(main)
