"""001 Fig. 6-7 on the built-in Fashion-MNIST zoo: certified accuracy of randomized-smoothing RBCs alone and of
mixtures with the accurate ABC, Lipschitz (Thm 3.5) and Thm A.2 bounds, and the Pareto frontier over (alpha, sigma).

    .venv/bin/python benchmarks/certify_fmnist.py [--n 200] [--samples 10000] [--out benchmarks/results/certify_fmnist]

For each noise-trained base (fmnist-rs025, fmnist-rs050, fmnist-rs100) one Monte Carlo certification on the first
``--n`` evaluation images serves every alpha of the grid (the bounds do not depend on alpha). As in 001 App. A.2,
a mixture's alpha is chosen so that its clean accuracy equals a lower-sigma RS model's; here that alpha is matched
on the first ``--calib-n`` images of the calibration split (never the evaluation images), with ``--calib-samples``
Monte Carlo samples. Also: the provable Lipschitz bound of the adversarially trained RBC fmnist-pgd (how loose a
product of layer norms is) and Monte Carlo throughput (noisy images per second) on this machine.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from mixzoo.certify import SmoothingSettings, certify, mixture_clean_accuracy, pareto_frontier, smoothed_estimate
from mixzoo.certify.run import abc_probabilities
from mixzoo.core.cache import atomic_write_text
from mixzoo.core.figures import figure_module, save_png
from mixzoo.core.machine import machine_line, run_record
from mixzoo.zoo.data import load_dataset
from mixzoo.zoo.models import load_model

SIGMAS = {0.25: "fmnist-rs025", 0.5: "fmnist-rs050", 1.0: "fmnist-rs100"}
ALPHAS = [round(1.0 - 0.02 * k, 2) for k in range(25)]  # 1.00 ... 0.52 (0.5 certifies nothing)


def matched_alpha(abc: str, rbc: str, sigma: float, target: float, n: int, samples: int, seed: int) -> dict:
    """The alpha of the grid whose mixture clean accuracy on the calibration split is closest to ``target``."""
    data = load_dataset("fashion-mnist", "calibration", n=n)
    est = smoothed_estimate(load_model(rbc), data.images, SmoothingSettings(sigma, samples, selection_samples=1,
                            confidence=0.999, kind="soft"), seed=seed + 17, progress=False)
    g = abc_probabilities(load_model(abc), data.images, 0.0, 1000)
    alphas = torch.tensor(ALPHAS, dtype=torch.float64)
    acc = mixture_clean_accuracy(g, est.mean, data.labels, alphas)
    k = int((acc - target).abs().argmin())
    return {"alpha": ALPHAS[k], "calibration_clean": float(acc[k]), "target": target,
            "grid": dict(zip(ALPHAS, acc.tolist(), strict=True))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--samples", type=int, default=10_000)
    ap.add_argument("--calib-n", type=int, default=500)
    ap.add_argument("--calib-samples", type=int, default=1000)
    ap.add_argument("--abc", default="fmnist-std")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="benchmarks/results/certify_fmnist")
    args = ap.parse_args()
    out = Path(args.out)
    radii = [round(0.05 * k, 2) for k in range(81)]  # 0 ... 4 (l2)
    results, seconds = {}, {}
    for sigma, name in SIGMAS.items():
        t0 = time.perf_counter()
        results[sigma] = certify(rbc=name, abc=args.abc, alphas=ALPHAS, radii=radii, n=args.n,
                                 smoothing=SmoothingSettings(samples=args.samples),
                                 seed=args.seed, out=out / name)
        seconds[sigma] = time.perf_counter() - t0
        print(f"{name}: {seconds[sigma]:.0f} s")
    throughput = {s: args.n * (args.samples + 100) / seconds[s] for s in SIGMAS}

    def curve(sigma: float, alpha: float, bound: str):
        return next(c for c in results[sigma].curves if c.alpha == alpha and c.bound == bound)

    # 001 App. A.2: the sigma = 1 mixture matched to the clean accuracy of the sigma = 0.5 and 0.25 RS models alone
    panels = []
    for base_sigma in (0.5, 0.25):
        target = curve(base_sigma, 1.0, "smoothing").clean_accuracy
        match = matched_alpha(args.abc, SIGMAS[1.0], 1.0, target, args.calib_n, args.calib_samples, args.seed)
        frontier = {b: pareto_frontier([c for s in SIGMAS for c in results[s].curves if c.bound == b],
                                       target - 0.005) for b in ("smoothing-lipschitz", "smoothing")}
        panels.append({"baseline_sigma": base_sigma, "baseline_clean": target, "mixture_sigma": 1.0, **match,
                       "frontier": frontier})
    lip = certify(rbc="fmnist-pgd", abc=args.abc, alphas=[1.0], norm="linf", n=args.n, out=out / "fmnist-pgd-lipschitz")

    plt = figure_module()
    for bound, fname, title in (("smoothing-lipschitz", "fig6_lipschitz.png", "Thm 3.5 (Lipschitz)"),
                                ("smoothing", "fig7_theorem_a2.png", "Thm A.2")):
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        for ax, panel in zip(axes, panels, strict=True):
            b = curve(panel["baseline_sigma"], 1.0, bound)
            m = curve(1.0, panel["alpha"], bound)
            r = curve(1.0, 1.0, bound)
            ax.step(radii, [100 * a for a in b.accuracy], where="post", label=f"RS sigma {panel['baseline_sigma']}")
            ax.step(radii, [100 * a for a in r.accuracy], where="post", label="RS sigma 1.0", alpha=0.6)
            ax.step(radii, [100 * a for a in m.accuracy], where="post",
                    label=f"mixture: RS sigma 1.0, alpha {panel['alpha']}")
            ax.step(radii, [100 * a for a in panel["frontier"][bound]], "k:", where="post",
                    label="Pareto frontier (alpha, sigma)")
            for c in (b, r, m):
                ax.plot([0], [100 * c.clean_accuracy], "o", ms=4)
            ax.set_title(f"{title}: clean accuracy matched to sigma {panel['baseline_sigma']}", fontsize=9)
            ax.set_xlabel("l2 radius")
            ax.set_ylabel("accuracy (%)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        save_png(fig, out / fname)
        plt.close(fig)

    record = run_record("cpu")
    summary = {"settings": vars(args), "run": record, "seconds": seconds, "noisy_images_per_second": throughput,
               "panels": panels, "radii": radii,
               "rs_alone": {s: {b: curve(s, 1.0, b).accuracy for b in ("smoothing", "smoothing-lipschitz")}
                            | {"clean": curve(s, 1.0, "smoothing").clean_accuracy} for s in SIGMAS},
               "mixtures": {p["alpha"]: {b: curve(1.0, p["alpha"], b).accuracy
                                         for b in ("smoothing", "smoothing-lipschitz")}
                            | {"clean": curve(1.0, p["alpha"], "smoothing").clean_accuracy} for p in panels},
               "fmnist_pgd_lipschitz": {"settings": lip.settings["lipschitz"], "notes": lip.notes,
                                        "max_certified_radius": lip.curves[0].radii[-1]}}
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=1) + "\n")
    print(json.dumps({k: summary[k] for k in ("seconds", "noisy_images_per_second")}, indent=1))
    print(machine_line(record))


if __name__ == "__main__":
    main()
