"""Locally biased smoothing on the built-in Fashion-MNIST pair: 001 Fig. 1 / 8 and 003 Fig. 5 analogues,
and speed.

    .venv/bin/python benchmarks/local_smoothing.py [--n 100] [--n-iter 20] \
        [--out benchmarks/results/local_smoothing_fmnist/options_n100]

(a) ``local-smoothing`` (003 Eq. 5 / 001 Eq. 3.3), ABC fmnist-std, RBC fmnist-pgd: clean accuracy and accuracy under
    APGD-CE at eps 0.1 L-inf against the smoothed classifier itself, as alpha sweeps, one curve per R_i option
    (one, grad_g, grad_max, ratio) and per logits / probabilities. The alphas are ``c / median R`` for a fixed grid
    of ``c`` (R's scale differs by option by orders of magnitude), measured on the first images. Both base models are
    piecewise linear (ReLU, max-pool, eval-mode BN), so the input Jacobian is piecewise constant and the
    second-order path through R_i has zero gradient almost everywhere: the attack uses ``gradient="fixed-R"``, whose
    gradient equals the exact one here (checked on the first batch and recorded) at a fraction of the cost.
(b) ``knn-smoothing`` (003 Eq. 2), K in {1, 5, 20, 100} over the 55,000 train images: clean and attacked accuracy
    per alpha. Attacks: APGD-CE on g (transfer from g, as 003 Fig. 5) and APGD-CE on the soft K-NN surrogate of each
    K (transfer from h); an example counts as robust only if the smoothed classifier is right on both points (worst
    case). Square (each query a K-NN search over 55,000 images plus a Jacobian) is left to ``mixzoo bench``.
(c) speed on this CPU: the base models' forward, each R_i's forward (Jacobians), the accelerated variant (003
    App. A.1) and K-NN queries per second.
(d) ``--parts gradstats`` (optional): 003 Fig. 2-3 and App. A.4, the per-class l1 norms of the input gradients of
    g's and h's logits on the clean images and on PGD-10 points aimed at g and at h (eps 0.1): box plots per class,
    the 2c x 2c correlation matrix, ``gradient_norms_{clean,attack_g,attack_h}.png`` / ``.json``
    (:mod:`mixzoo.methods.local_smoothing.gradient_stats`).

Writes ``local_smoothing.json`` and ``local_smoothing_r.png`` / ``local_smoothing_knn.png`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from mixzoo.core.cache import atomic_write_text
from mixzoo.core.figures import figure_module, save_png
from mixzoo.core.machine import run_record
from mixzoo.core.plugins import lookup
from mixzoo.methods.local_smoothing.gradients import class_gradients, dual_norm
from mixzoo.methods.local_smoothing.knn import KNNOracle
from mixzoo.methods.local_smoothing.smoothing import KNNSmoothingClassifier, LocalSmoothingClassifier, smooth
from mixzoo.zoo.data import load_dataset
from mixzoo.zoo.models import load_model

EPS, NORM = 0.1, "Linf"
R_OPTIONS = ("one", "grad_g", "grad_max", "ratio")
SPACES = ("logits", "probabilities")
SCALES = [0.0, 0.3, 1.0, 3.0, 10.0, 1e4]  # alpha * median R
KS = (1, 5, 20, 100)
KNN_ALPHAS = [0.0, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 1.0, 10.0]


def apgd(model, images, labels, n_iter: int, seed: int = 0):
    attack = lookup("attack", "apgd")(EPS, NORM, seed, n_iter=n_iter, components=["apgd-ce"], batch_size=500)
    return attack.run(model, images, labels, progress=False)


def batched(fn, x, bs: int = 100):
    return torch.cat([fn(x[i:i + bs]) for i in range(0, len(x), bs)])


def r_curves(g, h, data, n_iter: int, r_options=R_OPTIONS, spaces=SPACES, scales=SCALES,
             gradient: str = "fixed-R") -> dict:
    out = {}
    x, y = data.images, data.labels
    for space in spaces:
        for r in r_options:
            probe = LocalSmoothingClassifier(g, h, alpha=1.0, r=r, space=space)
            _, _, rr = probe.parts(x[:100])
            med = float(rr.median())
            check = None
            if r != "one":  # exact vs fixed-R gradient on the first 20 images (piecewise-linear nets: equal)
                grads = []
                for mode in ("exact", "fixed-R"):
                    xa = x[:20].clone().requires_grad_(True)
                    m = LocalSmoothingClassifier(g, h, alpha=1.0 / med, r=r, space=space, gradient=mode)
                    (gr,) = torch.autograd.grad(torch.nn.functional.nll_loss(m(xa), y[:20]), xa)
                    grads.append(gr)
                check = float((grads[0] - grads[1]).abs().max() / grads[0].abs().max().clamp_min(1e-30))
            points = []
            for c in scales:
                alpha = c / med
                t0 = time.perf_counter()
                model = LocalSmoothingClassifier(g, h, alpha=alpha, r=r, space=space, gradient=gradient)
                res = apgd(model, x, y, n_iter)
                points.append({"scale": c, "alpha": alpha, "clean": float(res.clean_correct.float().mean()),
                               "attacked": float(res.robust_correct.float().mean()),
                               "seconds": time.perf_counter() - t0})
                print(f"  {space:13s} {r:8s} alpha={alpha:.4g}: clean {points[-1]['clean']:.3f}"
                      f" attacked {points[-1]['attacked']:.3f} ({points[-1]['seconds']:.0f} s)", flush=True)
            key = f"{r}/{space}" + ("" if gradient == "fixed-R" else f"/{gradient}")
            out[key] = {"r": r, "space": space, "gradient": gradient, "median_R": med,
                        "exact_vs_fixed_R_rel_diff": check, "points": points}
    return out


def knn_curves(g, data, train, n_iter: int) -> dict:
    x, y = data.images, data.labels
    oracle = KNNOracle(train.images, train.labels, max(KS), train.num_classes)
    t0 = time.perf_counter()
    res_g = apgd(g, x, y, n_iter)  # transfer from g: one attack serves every K and alpha
    secs = {"attack_g": time.perf_counter() - t0}
    points_sets = {"clean": x, "from_g": res_g.adv_images}
    out: dict = {"K": {}, "alphas": KNN_ALPHAS, "seconds": secs}
    for k in KS:
        ok = KNNOracle(train.images, train.labels, k, train.num_classes)
        t0 = time.perf_counter()
        soft_model = _SoftKNN(ok)
        res_h = apgd(soft_model, x, y, n_iter)
        secs[f"attack_h_K{k}"] = time.perf_counter() - t0
        points_sets[f"from_h_K{k}"] = res_h.adv_images
    correct = {}
    for name, pts in points_sets.items():
        gv, jac = class_gradients(g, pts)
        r = dual_norm(jac, NORM).T
        _, idx = oracle.neighbours(pts, max(KS))
        for k in KS:
            if name.startswith("from_h") and name != f"from_h_K{k}":
                continue
            votes = torch.nn.functional.one_hot(oracle.train_labels[idx[:, :k]], train.num_classes).float().mean(1)
            h = 2 * votes - 1
            correct[(name, k)] = torch.stack([smooth(gv, h, r, a).argmax(1) == y for a in KNN_ALPHAS])
            if name == "clean":
                out["K"].setdefault(str(k), {})["knn_alone_clean"] = float((h.argmax(1) == y).float().mean())
    for k in KS:
        clean = correct[("clean", k)]
        worst = clean & correct[("from_g", k)] & correct[(f"from_h_K{k}", k)]
        out["K"][str(k)].update({
            "clean": clean.float().mean(1).tolist(), "attacked": worst.float().mean(1).tolist(),
            "attacked_from_g": (clean & correct[("from_g", k)]).float().mean(1).tolist(),
            "attacked_from_h": (clean & correct[(f"from_h_K{k}", k)]).float().mean(1).tolist()})
        print(f"  K={k}: clean {out['K'][str(k)]['clean']} attacked {out['K'][str(k)]['attacked']}", flush=True)
    return out


def knn_white_box(g, data, train, n_iter: int, n_queries: int, k: int = 5,
                  alphas: tuple[float, ...] = (0.03, 0.1, 1.0)) -> dict:
    """White-box and gradient-free attacks on the K-NN smoothed classifier itself at a few alphas (K = 5): APGD-CE
    through g and ||grad g_i|| with the vote held constant (its true gradient almost everywhere; R held fixed, which
    for these piecewise-linear nets is the exact gradient), then Square on what is left."""
    oracle = KNNOracle(train.images, train.labels, k, train.num_classes)
    out = {"K": k, "n_queries": n_queries, "points": []}
    for alpha in alphas:
        t0 = time.perf_counter()
        model = KNNSmoothingClassifier(g, oracle, alpha=alpha, gradient="fixed-R")
        res = apgd(model, data.images, data.labels, n_iter)
        sq = lookup("attack", "autoattack")(EPS, NORM, 0, components=["square"], n_queries=n_queries, batch_size=500)
        keep = res.robust_correct.nonzero().squeeze(1)
        robust = res.robust_correct.clone()
        if len(keep):
            robust[keep] = sq.run(model, data.images[keep], data.labels[keep], progress=False).robust_correct
        out["points"].append({"alpha": alpha, "clean": float(res.clean_correct.float().mean()),
                              "apgd": float(res.robust_correct.float().mean()),
                              "apgd_then_square": float(robust.float().mean()),
                              "robust_outcomes": "".join("1" if v else "0" for v in robust.tolist()),
                              "seconds": time.perf_counter() - t0})
        print(f"  white-box K={k} alpha={alpha}: {out['points'][-1]}", flush=True)
    return out


class _SoftKNN(torch.nn.Module):
    """The soft K-NN surrogate as a classifier (log-probabilities), for the transfer attack from h."""

    def __init__(self, oracle: KNNOracle):
        super().__init__()
        self.oracle = oracle

    def forward(self, x):
        return torch.log_softmax(self.oracle.soft(x), dim=-1)


def timed(fn, reps: int = 3) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps


def speed(g, h, train, batch: int = 100) -> dict:
    x = load_dataset("fashion-mnist", "evaluation", n=batch).images
    out = {"batch": batch}
    with torch.no_grad():
        out["g_forward_s"] = timed(lambda: g(x))
        out["g_plus_h_forward_s"] = timed(lambda: (g(x), h(x)))
        for r, acc in (("one", False), ("grad_g", False), ("grad_max", False), ("ratio", False), ("grad_g", True),
                       ("ratio", True)):
            m = LocalSmoothingClassifier(g, h, alpha=1.0, r=r, accelerated=acc)
            out[f"local_{r}{'_accelerated' if acc else ''}_s"] = timed(lambda m=m: m(x))
        oracle = KNNOracle(train.images, train.labels, 5, train.num_classes)
        out["knn_train_images"] = len(train)
        out["knn_query_s"] = timed(lambda: oracle(x))
        out["knn_queries_per_s"] = batch / out["knn_query_s"]
        knn = KNNSmoothingClassifier(g, oracle, alpha=1.0)
        out["knn_smoothing_s"] = timed(lambda: knn(x))
    return out


def gradient_statistics(g, h, data, out: Path, steps: int = 10, bs: int = 250) -> dict:
    """(d): 003 Fig. 2-3 on the clean images, Fig. 10 (App. A.4) on PGD points aimed at g (alpha_t = 0) and at h."""
    from mixzoo.methods.local_smoothing.crossover import attack_at_alpha
    from mixzoo.methods.local_smoothing.gradient_stats import gradient_figure_and_record, gradient_norms

    clf = LocalSmoothingClassifier(g, h, alpha=0.0, r="one")
    x, y = data.images, data.labels
    noise = torch.rand(x.shape, generator=torch.Generator().manual_seed(0))
    sets = {"clean": x}
    for name, a in (("attack_g", 0.0), ("attack_h", float("inf"))):
        sets[name] = torch.cat([attack_at_alpha(clf, x[i:i + bs], y[i:i + bs],
                                                torch.full((len(x[i:i + bs]),), a, dtype=torch.float64),
                                                eps=torch.full((len(x[i:i + bs]),), EPS), steps=steps,
                                                noise=noise[i:i + bs], norm=NORM) for i in range(0, len(x), bs)])
    records = {}
    for name, xs in sets.items():
        t0 = time.perf_counter()
        gn, hn = gradient_norms(g, h, xs, norm=NORM)
        with torch.no_grad():
            acc = {"g": float((g(xs).argmax(1) == y).float().mean()), "h": float((h(xs).argmax(1) == y).float().mean())}
        rec = gradient_figure_and_record(
            gn, hn, out / f"gradient_norms_{name}", title=f"fmnist-std (g) / fmnist-pgd (h), {len(xs)} evaluation"
            f" images, {name.replace('_', ' ')}: per-class ||grad_x logit_i||_1 (003 Fig. 2-3)",
            extra={"data": name, "accuracy": acc, "pgd_steps": steps if name != "clean" else 0, "eps": EPS,
                   "seconds": time.perf_counter() - t0})
        records[name] = {k: rec[k] for k in ("n", "share_g_larger", "mean_corr_g_g", "mean_corr_h_h",
                                             "mean_corr_g_h", "ratio_cv", "accuracy")}
        records[name]["median_g"] = [q[3] for q in rec["g"]["quantiles"]]
        records[name]["median_h"] = [q[3] for q in rec["h"]["quantiles"]]
        print(name, json.dumps({k: v for k, v in records[name].items() if not isinstance(v, list)}), flush=True)
    return records


def figures(result: dict, out: Path) -> list[str]:
    plt = figure_module()
    fig, ax = plt.subplots(figsize=(6.5, 5))
    styles = {"logits": "--", "probabilities": "-"}
    for key, cur in result["r_curves"].items():
        if cur.get("exact_vs_fixed_R_rel_diff") and cur["exact_vs_fixed_R_rel_diff"] > 1e-3 and \
                cur.get("gradient", "fixed-R") == "fixed-R":
            continue  # fixed-R was not the exact gradient here: only the exact-gradient attack is drawn
        ax.plot([p["clean"] * 100 for p in cur["points"]], [p["attacked"] * 100 for p in cur["points"]],
                styles[cur["space"]], marker="o", ms=3, label=key)
    ax.set_xlabel("clean accuracy (%)")
    ax.set_ylabel(f"APGD-CE accuracy at eps {EPS} L-inf (%)")
    ax.set_title("local smoothing on fmnist-std + fmnist-pgd: R_i options (001 Fig. 1)")
    ax.legend(fontsize=7)
    save_png(fig, out / "local_smoothing_r.png")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    xs = [max(a, 3e-4) for a in result["knn"]["alphas"]]
    for k, cur in result["knn"]["K"].items():
        axes[0].plot(xs, [v * 100 for v in cur["clean"]], marker="o", ms=3, label=f"K={k}")
        axes[1].plot(xs, [v * 100 for v in cur["attacked"]], marker="o", ms=3, label=f"K={k}")
    white = result.get("knn_white")
    if white:
        axes[1].plot([p["alpha"] for p in white["points"]], [p["apgd_then_square"] * 100 for p in white["points"]],
                     "kx", ms=8, label=f"K={white['K']}: white-box APGD-CE, then Square (separate run)")
        axes[1].legend(fontsize=7)
    for ax, what in zip(axes, ("clean", "attacked (worst of transfer from g and from soft K-NN)"), strict=True):
        ax.set_xscale("log")
        ax.set_xlabel("alpha (alpha = 0 drawn at the left end)")
        ax.set_title(what, fontsize=9)
    axes[0].set_ylabel("accuracy (%)")
    axes[0].legend(fontsize=8)
    fig.suptitle("K-NN smoothing on Fashion-MNIST, eps 0.1 L-inf (003 Fig. 5)")
    save_png(fig, out / "local_smoothing_knn.png")
    return ["local_smoothing_r.png", "local_smoothing_knn.png"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--n-iter", type=int, default=20)
    ap.add_argument("--parts", default="speed,knn,r", help="comma-separated: speed, knn, knn-white, r, gradstats;"
                                                         " or merge")
    ap.add_argument("--merge", default="knn.json,knn_white.json,r.json", help="the files --parts merge joins")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--r-options", default=",".join(R_OPTIONS))
    ap.add_argument("--spaces", default=",".join(SPACES))
    ap.add_argument("--scales", default=",".join(str(v) for v in SCALES), help="alpha * median R values")
    ap.add_argument("--gradient", default="fixed-R", help="the attack's gradient: fixed-R (exact for logits of"
                                                         " piecewise-linear nets) or exact (double backprop)")
    ap.add_argument("--n-queries", type=int, default=100, help="Square's queries in the knn-white part")
    ap.add_argument("--out", default="benchmarks/results/local_smoothing_fmnist/options_n100")
    ap.add_argument("--json-name", default="local_smoothing.json", help="separate files let parts run in parallel")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.parts == "merge":  # parts run in parallel into separate files: one JSON and the figures
        merged: dict = {}
        for name in args.merge.split(","):
            part = json.loads((out / name).read_text())
            merged.setdefault("runs", {})[name] = part.pop("run", None)
            curves = {**merged.get("r_curves", {}), **part.pop("r_curves", {})}
            merged.update(part)
            if curves:
                merged["r_curves"] = curves
        atomic_write_text(out / "local_smoothing.json", json.dumps(merged, indent=1, default=str))
        print("figures:", figures(merged, out))
        return
    g, h = load_model("fmnist-std"), load_model("fmnist-pgd")
    data = load_dataset("fashion-mnist", "evaluation", n=args.n)
    train = load_dataset("fashion-mnist", "train")
    path = out / args.json_name
    result = json.loads(path.read_text()) if path.exists() else {}
    result.update({"n": args.n, "n_iter": args.n_iter, "eps": EPS, "norm": NORM, "attack": "apgd-ce",
                   "data": {"evaluation": data.fingerprint, "train": train.fingerprint, "train_n": len(train)}})
    parts = args.parts.split(",")
    if "speed" in parts:
        print("speed", flush=True)
        result["speed"] = speed(g, h, train)
        print(json.dumps(result["speed"], indent=1), flush=True)
    if "knn" in parts:
        print("K-NN smoothing", flush=True)
        result["knn"] = knn_curves(g, data, train, args.n_iter)
    if "knn-white" in parts:
        print("K-NN smoothing, white-box and Square", flush=True)
        result["knn_white"] = knn_white_box(g, data, train, args.n_iter, args.n_queries)
    if "gradstats" in parts:
        print("gradient-norm statistics (003 Fig. 2-3)", flush=True)
        result["gradient_norms"] = gradient_statistics(g, h, data, out)
    if "r" in parts:
        print("R_i options", flush=True)
        result["r_curves"] = r_curves(
            g, h, data, args.n_iter, r_options=tuple(args.r_options.split(",")), spaces=tuple(args.spaces.split(",")),
            scales=[float(v) for v in args.scales.split(",")], gradient=args.gradient)
    result["run"] = run_record("cpu")
    atomic_write_text(path, json.dumps(result, indent=1, default=str))
    if "knn" in result and "r_curves" in result:
        print("figures:", figures(result, out))


if __name__ == "__main__":
    main()
