"""MixedNUTS's own figures and report sections (Bai et al. 2024a, Fig. 6, 8, 9), written by the bench through the
method.

* ``tradeoff.png`` (Fig. 8): clean vs robust accuracy of MixedNUTS over beta against the linear mixture over alpha.
* ``margins.png`` (Fig. 6 / Table 6): RBC confidence-margin histograms before and after M(s*, p*, c*), clean vs
  attacked (MMAA), correct vs incorrect, on the calibration images.
* ``objective.png`` (Fig. 9): the Algorithm 1 objective as s-c heat maps, one per p.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mixzoo.core.cache import Cache
from mixzoo.core.figures import figure_module as _figure
from mixzoo.core.figures import save_png as _save_png

DEFAULT_BETAS = (0.9, 0.95, 0.97, 0.98, 0.985, 0.99, 0.995)
DEFAULT_LINEAR_ALPHAS = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.98, 1.0)


def calibration_data_for(card: Any, rbc: nn.Module, *, cache: Cache, data_dir: str | None, device: str,
                         progress: bool, at_most: int | None = None):
    """The cached calibration data behind a card (recomputed with the card's settings if the cache is cold: then on
    its first ``at_most`` calibration images only, when given)."""
    from mixzoo.methods.mixednuts.calibration_data import calibration_data
    from mixzoo.zoo.data import load_dataset
    from mixzoo.zoo.pairs import card_dataset

    att = card.attack
    data = load_dataset(card_dataset(card, rbc), "calibration", n=card.data.get("n"), root=data_dir)
    return calibration_data(None, rbc, data, eps=att["eps"], norm=att["norm"], cache=cache,
                            n_iter=att.get("n_iter", 100), n_target_classes=att.get("n_target_classes", 9),
                            n_restarts=att.get("n_restarts", 1), seed=att.get("seed", 0), top_k=card.params["top_k"],
                            batch_size=att.get("batch_size", 250), device=device, progress=progress,
                            at_most=at_most)


def screening(attack: str) -> str | None:
    """The screening note of ``attack`` (its class's ``screening_note``, e.g. ``fast``): the curve's points are
    then screening figures, and the report and plot say so. None for an attack that reports robustness figures."""
    from mixzoo.core.errors import MixzooError
    from mixzoo.core.plugins import lookup

    try:
        return getattr(lookup("attack", attack), "screening_note", None)
    except MixzooError:
        return None


def tradeoff_curve(card: Any, abc: nn.Module, rbc: nn.Module, data: Any, *, cache: Cache, attack: str, n: int,
                   eps: float, norm: str, seed: int, batch_size: int, attack_options: dict | None = None,
                   betas: tuple[float, ...] = DEFAULT_BETAS, alphas: tuple[float, ...] = DEFAULT_LINEAR_ALPHAS,
                   data_dir: str | None = None, device: str = "cpu", progress: bool = True,
                   points: int | None = None) -> dict[str, Any]:
    """Fig. 8: MixedNUTS recalibrated at each beta (cached MMAA, so seconds each; the card's own beta among them)
    vs the linear mixture over alpha, and the ABC and RBC alone.

    Every point is measured on the same first ``n`` evaluation images: clean accuracy from cached logits, robust
    accuracy under ``attack`` (a cheaper attack than the main table's by default; the plot says which).
    ``points``: that many betas and alphas per curve, evenly spread over ``betas`` and ``alphas`` (the bench's
    budget; ``None``: all of them; the card's own beta is always among them).
    """
    from mixzoo.core.budget import curve_points

    betas, alphas = curve_points(betas, points), curve_points(alphas, points)
    from mixzoo.attacks.runner import evaluate
    from mixzoo.methods.mixednuts.calibrate import calibrate
    from mixzoo.methods.mixednuts.mixing import MixedClassifier, mix_log_probs
    from mixzoo.zoo.pairs import cached_logits, model_key
    from mixzoo.zoo.pairs import card_key_parts as mixed_key_parts

    # the card's calibration data when `mixzoo mix` cached it here; else as many calibration images as the bench
    # evaluates (its --n), not the card's whole split
    cal = calibration_data_for(card, rbc, cache=cache, data_dir=data_dir, device=device, progress=progress,
                               at_most=len(data.labels))
    abc_logits = cached_logits(abc, data, cache=cache, device=device, progress=progress, what="ABC eval logits")
    rbc_logits = cached_logits(rbc, data, cache=cache, device=device, progress=progress, what="RBC eval logits")
    n = min(n, len(data.labels))
    abc_logits, rbc_logits = abc_logits[:n], rbc_logits[:n]
    labels = data.labels[:n]
    images_r, labels_r = data.images[:n], labels
    base = {"data": data.fingerprint, "abc": model_key(abc), "rbc": model_key(rbc), "curve_n": n}
    common = dict(attack=attack, eps=eps, norm=norm, seed=seed, batch_size=batch_size, cache=cache,
                  attack_options=attack_options, progress=progress)
    from mixzoo.methods.mixednuts.calibrate import Grid

    grid = Grid.from_record(card.params["grid"])

    def clean_acc(**kw: Any) -> float:
        lp = mix_log_probs(abc_logits, rbc_logits, **kw)
        return float((lp.argmax(1) == labels).float().mean())

    own = card.params.get("beta")
    betas = tuple(sorted({*betas, *((float(own),) if isinstance(own, int | float) else ())}))
    nuts = []
    for beta in betas:
        with warnings.catch_warnings():  # the curve's other betas: Algorithm 1's notes on them are not the card's
            warnings.simplefilter("ignore")
            c = calibrate(clean_logits=cal.clean_logits, clean_labels=cal.labels,
                          attacked_logits=cal.attacked_logits, attacked_labels=cal.labels, beta=beta,
                          clamp=card.params["clamp"], top_k=card.params["top_k"], grid=grid)
        q = c.params
        model = MixedClassifier(abc, rbc, s=q["s"], p=q["p"], c=q["c"], alpha=q["alpha"], clamp=q["clamp"],
                                top_k=q["top_k"], alpha_d=q["alpha_d"])
        ev = evaluate(model, images_r, labels_r, key_parts={**mixed_key_parts(c, abc, rbc, data), "curve_n": n},
                      label=f"MixedNUTS beta={beta}", **common)
        nuts.append({"beta": beta, "s": q["s"], "p": q["p"], "c": q["c"], "alpha": q["alpha"],
                     "clean_accuracy": clean_acc(s=q["s"], p=q["p"], c=q["c"], alpha=q["alpha"], clamp=q["clamp"],
                                                 top_k=q["top_k"]),
                     "robust_accuracy": sum(ev["robust_correct"]) / len(ev["robust_correct"])})
    linear = []
    for alpha in alphas:
        ev = evaluate(MixedClassifier.linear(abc, rbc, alpha=alpha), images_r, labels_r,
                      key_parts={**base, "linear_alpha": alpha}, label=f"linear alpha={alpha}", **common)
        linear.append({"alpha": alpha,
                       "clean_accuracy": clean_acc(s=1.0, p=1.0, c=0.0, alpha=alpha, temperature=1.0,
                                                   transform=False),
                       "robust_accuracy": sum(ev["robust_correct"]) / len(ev["robust_correct"])})
    bases = {}
    for role, model, logits in (("abc", abc, abc_logits), ("rbc", rbc, rbc_logits)):
        alone = next((r for r in linear if r["alpha"] == 1.0), None) if role == "rbc" else None
        if alone is None:
            ev = evaluate(model, images_r, labels_r, key_parts={**base, "model": model_key(model)},
                          label=f"{role.upper()} (curve)", **common)
            alone = {"robust_accuracy": sum(ev["robust_correct"]) / len(ev["robust_correct"])}
        bases[role] = {"clean_accuracy": float((logits.argmax(1) == labels).float().mean()),
                       "robust_accuracy": alone["robust_accuracy"]}
    return {"attack": attack, "attack_options": attack_options or {}, "screening": screening(attack),
            "n_robust": len(labels_r), "n_clean": len(labels), "n_calibration": len(cal.labels), "card_beta": own,
            "mixednuts": nuts, "linear": linear, **bases}


def plot_tradeoff(report: Any, path: Path) -> None:
    """Fig. 8 as ``tradeoff.png``: MixedNUTS over beta (the card's own beta starred) and the linear mixture over
    alpha, each point labelled without overlap, the ABC and RBC alone; every point on the same images (one n, in
    the title). A curve of an older report (clean accuracy on more images than robust) says both sizes."""
    from mixzoo.core.figures import place_labels

    plt = _figure()
    cur = report.curve
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    nuts, lin = cur["mixednuts"], cur["linear"]

    def xy(r: dict[str, Any]) -> tuple[float, float]:
        return 100 * r["clean_accuracy"], 100 * r["robust_accuracy"]

    ax.plot(*zip(*map(xy, nuts), strict=True), "o-", color="C0", ms=4, label="MixedNUTS over beta")
    ax.plot(*zip(*map(xy, lin), strict=True), "s--", color="C1", ms=4, label="linear mix over alpha")
    card = report.card.to_dict() if hasattr(report.card, "to_dict") else report.card or {}
    beta = cur.get("card_beta", (card.get("mixednuts") or {}).get("beta", card.get("beta")))
    own = next((r for r in nuts if beta is not None and r["beta"] == beta), None)
    if own is not None:
        ax.plot(*xy(own), "*", color="C3", ms=13, zorder=5, label=f"this card (beta {own['beta']:g})")
    bases = [(cur.get(role) or (None if "abc" in cur else _report_row(report, role)), role.upper())
             for role in ("abc", "rbc")]
    for r in (r for r, _ in bases if r is not None):
        ax.plot(*xy(r), "k^", ms=7, zorder=4)
    fig.tight_layout()
    base_points = [xy(r) for r, _ in bases if r is not None]
    place_labels(ax, [(*xy(r), name) for r, name in bases if r is not None], fontsize=8)
    # the linear mix at alpha 1 is the RBC: its point carries the RBC's label
    everything = base_points + [xy(r) for r in nuts + lin]
    place_labels(ax, [(*xy(r), f"{r['beta']:g}") for r in nuts], avoid=everything, fontsize=6.5, color="C0")
    place_labels(ax, [(*xy(r), f"{r['alpha']:g}") for r in lin if xy(r) not in base_points], avoid=everything,
                 fontsize=6.5, color="C1")
    ax.set_xlabel("clean accuracy %")
    kind = ", screening" if cur.get("screening") else ""
    ax.set_ylabel(f"robust accuracy % ({cur['attack']}{kind})")
    sizes = (f"n = {cur['n_robust']}" if cur["n_clean"] == cur["n_robust"] else
             f"clean n = {cur['n_clean']}, robust n = {cur['n_robust']}")
    ax.set_title(f"Accuracy-robustness trade-off (Bai et al. 2024a, Fig. 8), {sizes}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    _save_png(fig, path)
    plt.close(fig)


def _report_row(report: Any, kind: str) -> dict[str, Any] | None:
    """A base model's row of the report as a curve point (curves of older reports have none of their own)."""
    m = next((m for m in report.models if m.kind == kind), None)
    return None if m is None else {"clean_accuracy": m.clean_accuracy, "robust_accuracy": m.robust_accuracy}


def plot_margins(card: Any, cal: Any, path: Path) -> None:
    from mixzoo.methods.mixednuts.transforms import confidence_margin, layer_norm, rbc_transform, transform_of

    plt = _figure()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    stages = [("before: LN(h_rob)", lambda z: layer_norm(z, top_k=card.params["top_k"])),
              (f"after: M(s={card.params['s']:.3g}, p={card.params['p']:.3g}, c={card.params['c']:.3g})",
               lambda z: rbc_transform(z, **transform_of(card.params)))]
    bins = torch.linspace(0, 1, 41).numpy()
    for ax, (title, fn) in zip(axes, stages, strict=True):
        for logits, what in ((cal.clean_logits, "clean"), (cal.attacked_logits, "attacked")):
            m = confidence_margin(fn(logits))
            correct = logits.argmax(1) == cal.labels
            for mask, ok in ((correct, "correct"), (~correct, "incorrect")):
                if mask.any():
                    ax.hist(m[mask].numpy(), bins=bins, histtype="step", density=True, linewidth=1.5,
                            label=f"{what} {ok} (n={int(mask.sum())})")
        q = (1 - card.params["alpha"]) / card.params["alpha"]
        if title.startswith("after"):
            ax.axvline(q, color="k", linestyle=":", label=f"(1-alpha)/alpha = {q:.3f}")
        ax.set_title(title)
        ax.set_xlabel("confidence margin (top-1 minus top-2 probability)")
        ax.set_yscale("log")
    axes[0].set_ylabel("density")
    handles, labels = axes[1].get_legend_handles_labels()
    fig.suptitle("RBC confidence margins on calibration images (Bai et al. 2024a, Fig. 6)")
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=3, frameon=False)
    _save_png(fig, path)
    plt.close(fig)


def plot_objective(card: Any, path: Path) -> None:
    import numpy as np

    plt = _figure()
    g = card.params["grid"]
    obj = np.asarray(g["objectives"], dtype=float)  # [s][p][c]
    s_vals, p_vals, c_vals = g["s_values"], g["p_values"], g["c_values"]
    cols = min(4, len(p_vals))
    rows = (len(p_vals) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.1 * rows), squeeze=False)
    fig.subplots_adjust(hspace=0.6, wspace=0.35, right=0.85)
    # objectives above 1 mark grid points excluded by the App. D.8.2 constraint: grey, outside the colour scale
    infeasible = obj > 1
    shown = np.where(infeasible, np.nan, obj)
    vmin, vmax = (np.nanmin(shown), np.nanmax(shown)) if np.isfinite(shown).any() else (0.0, 1.0)
    cmap = plt.get_cmap("viridis").with_extremes(bad="lightgrey")
    for j, p in enumerate(p_vals):
        ax = axes[j // cols][j % cols]
        im = ax.imshow(shown[:, j, :], origin="lower", aspect="auto", vmin=vmin, vmax=vmax, cmap=cmap)
        ax.set_title(f"p = {p:.3g}", fontsize=9)
        ax.set_xticks(range(len(c_vals)), [f"{c:.2g}" for c in c_vals], fontsize=6, rotation=90)
        ax.set_yticks(range(len(s_vals)), [f"{s:.2g}" for s in s_vals], fontsize=6)
        ax.set_xlabel("c", fontsize=8)
        ax.set_ylabel("s", fontsize=8)
        if abs(p - card.params["p"]) < 1e-9:
            si = int(np.argmin(np.abs(np.asarray(s_vals) - card.params["s"])))
            ci = int(np.argmin(np.abs(np.asarray(c_vals) - card.params["c"])))
            ax.plot(ci, si, "r*", markersize=10)
    for k in range(len(p_vals), rows * cols):
        axes[k // cols][k % cols].axis("off")
    fig.colorbar(im, cax=fig.add_axes((0.88, 0.15, 0.015, 0.7)), label="objective (share of clean mistakes kept)")
    excluded = " grey = excluded by App. D.8.2;" if infeasible.any() else ""
    fig.suptitle(f"Algorithm 1 objective over the grid (Bai et al. 2024a, Fig. 9);{excluded} red star = chosen")
    _save_png(fig, path)
    plt.close(fig)


def figures(report: Any, card: Any, stage: Path, *, prefix: str = "", rbc: nn.Module, cache: Cache | None,
            data_dir: str | None, device: str) -> list[str]:
    """Write this card's figures into ``stage`` (names prefixed by ``prefix``); returns the file names."""
    names = []
    if card.params["grid"]:
        plot_objective(card, stage / f"{prefix}objective.png")
        names.append(f"{prefix}objective.png")
    if report.curve and not prefix:
        plot_tradeoff(report, stage / "tradeoff.png")
        names.append("tradeoff.png")
    if cache is not None and card.attack and card.attack.get("name") == "mmaa" and card.data.get("n"):
        cal = calibration_data_for(card, rbc, cache=cache, data_dir=data_dir, device=device, progress=False,
                                   at_most=report.dataset.get("n"))
        plot_margins(card, cal, stage / f"{prefix}margins.png")
        names.append(f"{prefix}margins.png")
    return names


def markdown_lines(report: Any, card: Any) -> list[str]:
    """The trade-off curve's tables for report.md (when the bench computed one for this card)."""
    cur = report.curve
    if not cur or card is not report.card:
        return []
    recalibrated = f"; MixedNUTS recalibrated on {cur['n_calibration']} calibration images" \
        if cur.get("n_calibration") else ""
    lines = ["", f"## Trade-off curve ({cur['attack']} on {cur['n_robust']} images; clean on {cur['n_clean']}"
                 f"{recalibrated})", ""]
    if cur.get("screening"):
        lines += [f"**Screening figures** ({cur['screening']}); the table above gives the rows' figures.", ""]
    lines += ["| MixedNUTS beta | alpha | clean % | robust % |", "|---|---|---|---|"]
    lines += [f"| {r['beta']} | {r['alpha']:.4f} | {100 * r['clean_accuracy']:.2f} | "
              f"{100 * r['robust_accuracy']:.2f} |" for r in cur["mixednuts"]]
    lines += ["", "| linear alpha | clean % | robust % |", "|---|---|---|"]
    lines += [f"| {r['alpha']} | {100 * r['clean_accuracy']:.2f} | {100 * r['robust_accuracy']:.2f} |"
              for r in cur["linear"]]
    return lines
