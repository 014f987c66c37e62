"""001 Fig. 6/7 on Fashion-MNIST with both RBC families: a 1-Lipschitz RBC (deterministic certificates) and
Gaussian randomized smoothing (Monte Carlo certificates), alone and mixed with the accurate ABC fmnist-std.

    .venv/bin/python benchmarks/certify_lipschitz_fmnist.py --stage rs    # Monte Carlo, slow: run first
    .venv/bin/python benchmarks/certify_lipschitz_fmnist.py --stage lip   # deterministic, seconds; then the figure

``--stage rs``: for fmnist-rs025 and fmnist-rs050, one Monte Carlo pass on the first ``--n-rs`` evaluation images
(``--samples`` noisy copies per image, 100 more choose the class) gives both soft (001 App. A, Hoeffding) and hard
(Cohen et al., Clopper-Pearson) estimates from the same noise: the soft/hard comparison is paired. Saved to
``OUT/rs_NAME.pt``. ``--stage lip``: the Lipschitz RBCs (fmnist-lip050, fmnist-lip075, fmnist-lip100) on the first
``--n-lip`` images through ``mixzoo.certify.certify`` (timed end to end, loading included), every alpha of the grid,
each compared image by image with the RS models alone (hard, on the same images: McNemar counts), then the figure
``OUT/certify_lipschitz_fmnist.png`` and ``OUT/summary.json`` (also copied next to this script).

Panels: (a) deterministic curves (Lipschitz RBC alone and mixed at the alpha whose clean accuracy matches the
target); (b) Monte Carlo curves (RS alone and mixed at the matching alpha, Thm A.2, the default smoothing kind);
(c) the clean / certified frontier over alpha at r = 0.25 and 0.5; (d) soft vs hard smoothing on the same images.
The mixtures' alpha: the largest alpha of the grid (the most robust mixture) whose clean accuracy on the same
images reaches ``--target`` (default 90 %, above every RBC alone), so every mixture is compared at equal clean
accuracy.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import time
from pathlib import Path

import torch

from mixzoo.certify import certified_accuracy, certify, mixture_clean_accuracy, smoothing_radius
from mixzoo.certify.run import abc_probabilities
from mixzoo.certify.smoothing import SmoothingSettings, smoothed_estimates
from mixzoo.core.cache import atomic_write_text
from mixzoo.core.figures import figure_module, save_png
from mixzoo.core.machine import machine_line, run_record
from mixzoo.core.registry import list_models
from mixzoo.zoo.data import load_dataset
from mixzoo.zoo.models import load_model

RS = {"fmnist-rs050": 0.5, "fmnist-rs025": 0.25}
LIPS = ("fmnist-lip050", "fmnist-lip075", "fmnist-lip100")
ABC = "fmnist-std"
ALPHAS = [round(1.0 - 0.02 * k, 2) for k in range(25)]  # 1.00 ... 0.52 (0.5 certifies nothing)
GRID = [round(0.05 * k, 2) for k in range(41)]  # l2 radii 0 ... 2
HERE = Path(__file__).resolve().parent


def list_names() -> set[str]:
    return {spec.name for spec in list_models()}


def rs_stage(out: Path, n: int, samples: int, seed: int, names: list[str], device: str = "cpu",
             batch_size: int = 1000) -> None:
    """Monte Carlo on the first ``n`` images; a saved pass on fewer images is extended (each image draws its own
    noise stream, seeded by its index, so the result equals one pass on all ``n``)."""
    data = load_dataset("fashion-mnist", "evaluation", n=n)
    fields = ("top", "mean", "p_top_lower", "p_other_upper", "abstain")
    for name in names:
        sigma, path = RS[name], out / f"rs_{name}.pt"
        old = torch.load(path) if path.exists() else None
        start = len(old["labels"]) if old is not None and old["samples"] == samples else 0
        if start >= n:
            continue
        t0 = time.perf_counter()
        est = smoothed_estimates(load_model(name, device=device).eval(), data.images[start:].to(device),
                                 SmoothingSettings(sigma, samples, selection_samples=100, confidence=0.999),
                                 seed=seed, first_index=start, batch_size=batch_size, progress=False)
        seconds = time.perf_counter() - t0 + (old["seconds"] if start else 0.0)
        new = {k: {f: getattr(e, f).cpu() for f in fields} for k, e in est.items()}
        if start:
            new = {k: {f: torch.cat([old["est"][k][f], v[f]]) for f in fields} for k, v in new.items()}
        torch.save({"labels": data.labels, "sigma": sigma, "samples": samples, "seconds": seconds,
                    "machine": machine_line(run_record(device)) + f"; load {os.getloadavg()[0]:.1f}", "est": new},
                   path)
        print(f"{name}: {n} images x {samples} samples, soft + hard in {seconds:.0f} s", flush=True)


def rs_curves(path: Path, abc_probs: torch.Tensor, alphas: torch.Tensor, grid: torch.Tensor) -> dict:
    """Thm A.2 radii for every alpha and kind from a saved Monte Carlo pass: accuracies (A, R) and clean (A,)."""
    saved = torch.load(path)
    labels, sigma, out = saved["labels"], saved["sigma"], {}
    for kind, e in saved["est"].items():
        correct = (e["top"] == labels) & ~e["abstain"]
        r = smoothing_radius(e["p_top_lower"], e["p_other_upper"], sigma, alphas)
        r[:, e["abstain"]] = -math.inf
        out[kind] = {"certified": certified_accuracy(r, correct, grid),
                     "clean": mixture_clean_accuracy(abc_probs[:len(labels)], e["mean"], labels, alphas)}
    return {"sigma": sigma, "n": len(labels), "samples": saved["samples"], "seconds": saved["seconds"],
            "machine": saved["machine"], "kinds": out}


def rs_certified(path: Path, kind: str, radii: tuple[float, ...]) -> dict[float, torch.Tensor]:
    """Per image of a saved Monte Carlo pass: correct and certified (alone, Thm A.2 at alpha 1) at each radius."""
    saved = torch.load(path)
    e = saved["est"][kind]
    r = smoothing_radius(e["p_top_lower"], e["p_other_upper"], saved["sigma"], [1.0])[0]
    ok = (e["top"] == saved["labels"]) & ~e["abstain"]
    return {rad: ok & (r >= rad) for rad in radii}


def paired(a: torch.Tensor, b: torch.Tensor) -> dict:
    """Images certified by ``a`` only and by ``b`` only, and the exact two-sided McNemar (sign test) p-value of the
    difference: the paired comparison of two certificates on the same images."""
    only_a, only_b = int((a & ~b).sum()), int((b & ~a).sum())
    n, k = only_a + only_b, min(only_a, only_b)
    p = min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n) if n else 1.0
    return {"only_first": only_a, "only_second": only_b, "mcnemar_p": round(p, 4)}


def matched(clean: torch.Tensor, alphas: torch.Tensor, target: float) -> int:
    """Index of the largest alpha (the most robust mixture) whose clean accuracy reaches ``target``; the smallest
    alpha of the grid if none does."""
    ok = (clean >= target - 1e-12).nonzero().flatten()
    return int(ok[alphas[ok].argmax()]) if ok.numel() else int(alphas.argmin())


def lip_stage(out: Path, n_lip: int, target: float, default_kind: str, device: str = "cpu") -> dict:
    alphas = torch.tensor(ALPHAS, dtype=torch.float64)
    grid = torch.tensor(GRID, dtype=torch.float64)
    data = load_dataset("fashion-mnist", "evaluation", n=n_lip)
    abc_probs = abc_probabilities(load_model(ABC, device=device).eval(), data.images.to(device), 0.0).cpu()
    rs = {name: rs_curves(out / f"rs_{name}.pt", abc_probs, alphas, grid) for name in RS
          if (out / f"rs_{name}.pt").exists()}
    at = {0.25: GRID.index(0.25), 0.5: GRID.index(0.5)}
    summary: dict = {"machine_line": None, "target_clean": target, "alphas": ALPHAS, "radii": GRID,
                     "default_smoothing": default_kind, "lipschitz": {}, "rs": {}}
    for name in [m for m in LIPS if m in list_names()]:
        t0 = time.perf_counter()
        res = certify(rbc=name, abc=ABC, alphas=ALPHAS, n=n_lip, radii=GRID, progress=False, device=device)
        seconds = time.perf_counter() - t0
        summary["machine_line"] = machine_line(res.run) + f"; load {os.getloadavg()[0]:.1f} (shared)"
        curves = sorted(res.curves, key=lambda c: -c.alpha)
        cert = torch.tensor([c.accuracy for c in curves], dtype=torch.float64)
        clean = torch.tensor([c.clean_accuracy for c in curves], dtype=torch.float64)
        k = matched(clean, alphas, target)
        entry = {"n": n_lip, "certify_seconds_end_to_end": round(seconds, 2),
                 "constant": res.settings["lipschitz"]["constant"],
                 "layer_norm_product": res.settings["lipschitz"]["layer_norm_product"],
                 "clean": clean.tolist(), "certified": cert.tolist(), "matched_alpha": ALPHAS[k],
                 "at": {str(r): {"alone": float(cert[0, i]), "mixture": float(cert[k, i])} for r, i in at.items()}}
        alone = next(c for c in curves if c.alpha == 1.0)
        lip_ok = torch.tensor([r is not None for r in alone.radius])  # correct and certified > 0 ...
        lip_r = torch.tensor([r if r is not None else -1.0 for r in alone.radius], dtype=torch.float64)
        entry["paired_vs_rs_hard"] = {  # ... and at least each radius, against each RS model on the same images
            rs_name: {str(rad): paired(lip_ok & (lip_r >= rad), ok) for rad, ok in
                      rs_certified(out / f"rs_{rs_name}.pt", "hard", tuple(at)).items()}
            for rs_name, c in rs.items() if c["n"] == n_lip}
        entry["on_rs_images"] = {}
        for n_rs in sorted({c["n"] for c in rs.values()}):  # the same model on each Monte Carlo image set
            sub = sorted(certify(rbc=name, abc=ABC, alphas=ALPHAS, n=n_rs, radii=GRID, progress=False,
                                 device=device).curves,
                         key=lambda c: -c.alpha)
            ks = matched(torch.tensor([c.clean_accuracy for c in sub], dtype=torch.float64), alphas, target)
            entry["on_rs_images"][str(n_rs)] = {
                "clean": sub[0].clean_accuracy, "matched_alpha": ALPHAS[ks],
                "at": {str(r): {"alone": sub[0].accuracy[i], "mixture": sub[ks].accuracy[i]} for r, i in at.items()}}
        summary["lipschitz"][name] = entry
    for name, c in rs.items():
        kinds = {}
        for kind, v in c["kinds"].items():
            k = matched(v["clean"], alphas, target)
            kinds[kind] = {"clean": v["clean"].tolist(), "certified": v["certified"].tolist(),
                           "matched_alpha": ALPHAS[k],
                           "at": {str(r): {"alone": float(v["certified"][0, i]), "mixture": float(v["certified"][k, i])}
                                  for r, i in at.items()}}
        summary["rs"][name] = {"sigma": c["sigma"], "n": c["n"], "samples": c["samples"],
                               "monte_carlo_seconds_soft_and_hard": round(c["seconds"], 1),
                               "machine": c["machine"], "kinds": kinds}
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=1) + "\n")  # before the figure
    shutil.copyfile(out / "summary.json", HERE / "certify_lipschitz_fmnist.json")
    figure(summary, out / "certify_lipschitz_fmnist.png")
    shutil.copyfile(out / "certify_lipschitz_fmnist.png", HERE / "certify_lipschitz_fmnist.png")
    return summary


def figure(s: dict, path: Path) -> None:
    plt = figure_module()
    fig, ax = plt.subplots(1, 4, figsize=(22, 5))
    grid, alphas, kind = s["radii"], s["alphas"], s["default_smoothing"]
    for (name, lip), color in zip(s["lipschitz"].items(), ("b", "c", "m"), strict=False):
        k = alphas.index(lip["matched_alpha"])
        ax[0].plot(grid, lip["certified"][0], f"{color}-", label=f"{name} alone (clean {100 * lip['clean'][0]:.1f}%)")
        ax[0].plot(grid, lip["certified"][k], f"{color}--",
                   label=f"+ {ABC}, alpha {alphas[k]:g} (clean {100 * lip['clean'][k]:.1f}%)")
        ax[0].set_title(f"(a) deterministic (Lipschitz logits), {lip['n']} images")
        for rad, mark in ((0.25, "o"), (0.5, "s")):
            i = grid.index(rad)
            ax[2].plot([100 * c for c in lip["clean"]], [100 * row[i] for row in lip["certified"]],
                       f"{color}{mark}-", ms=3, label=f"{name}, r={rad:g}")
    colors = {"fmnist-rs025": "g", "fmnist-rs050": "r"}
    for name, r in s["rs"].items():
        v = r["kinds"][kind]
        k2 = alphas.index(v["matched_alpha"])
        ax[1].plot(grid, v["certified"][0], f"{colors[name]}-", label=f"RS sigma {r['sigma']:g} alone"
                   f" (clean {100 * v['clean'][0]:.1f}%, {r['n']} images)")
        ax[1].plot(grid, v["certified"][k2], f"{colors[name]}--", label=f"+ {ABC}, alpha {alphas[k2]:g}"
                   f" (clean {100 * v['clean'][k2]:.1f}%)")
        ax[1].set_title(f"(b) Monte Carlo (RS, {kind} votes, Thm A.2)")
        for rad, mark in ((0.25, "o"), (0.5, "s")):
            i = grid.index(rad)
            ax[2].plot([100 * c for c in v["clean"]], [100 * row[i] for row in v["certified"]],
                       f"{colors[name]}{mark}:", ms=3, label=f"RS sigma {r['sigma']:g}, r={rad:g}")
        for kd, style in (("hard", "-"), ("soft", ":")):
            ax[3].plot(grid, r["kinds"][kd]["certified"][0], f"{colors[name]}{style}",
                       label=f"RS sigma {r['sigma']:g}, {kd}")
    ax[2].set_title("(c) clean vs certified accuracy over alpha (each on its images)")
    ax[2].set_xlabel("clean accuracy (%)")
    ax[2].set_ylabel("certified accuracy (%)")
    ax[3].set_title("(d) RS alone: soft vs hard smoothing, same noise")
    for a in (ax[0], ax[1], ax[3]):
        a.set_xlabel("l2 radius")
        a.set_ylabel("certified accuracy")
        a.set_ylim(0, 1)
    for a in ax:
        a.grid(alpha=0.3)
        a.legend(fontsize=7)
    fig.suptitle(f"Fashion-MNIST, ABC {ABC}, mixtures at clean accuracy >= {100 * s['target_clean']:g}%;"
                 f" {s['machine_line']}", fontsize=9)
    fig.tight_layout()
    save_png(fig, path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stage", choices=("rs", "lip", "all"), default="all")
    ap.add_argument("--n-lip", type=int, default=1000)
    ap.add_argument("--n-rs", type=int, default=100)
    ap.add_argument("--samples", type=int, default=10_000)
    ap.add_argument("--rs-models", nargs="+", default=list(RS), choices=list(RS))
    ap.add_argument("--target", type=float, default=0.90, help="clean accuracy every mixture must reach")
    ap.add_argument("--smoothing", choices=("soft", "hard"), default="hard")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(HERE / "results" / "certify_lipschitz_fmnist"))
    ap.add_argument("--device", default="cpu", help="cpu or cuda (Monte Carlo noise is drawn on this device)")
    ap.add_argument("--batch-size", type=int, default=1000, help="noisy images per forward pass (Monte Carlo)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    if args.stage in ("rs", "all"):
        rs_stage(out, args.n_rs, args.samples, args.seed, args.rs_models, args.device, args.batch_size)
    if args.stage in ("lip", "all"):
        s = lip_stage(out, args.n_lip, args.target, args.smoothing, args.device)
        print(json.dumps({"lipschitz": {k: {f: v[f] for f in ("at", "on_rs_images", "certify_seconds_end_to_end",
                                                                  "matched_alpha") if f in v}
                                        for k, v in s["lipschitz"].items()},
                          "rs": {k: {kd: [v["at"], v["matched_alpha"]] for kd, v in r["kinds"].items()}
                                 for k, r in s["rs"].items()}}, indent=1))


if __name__ == "__main__":
    main()
