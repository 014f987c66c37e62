"""MixedNUTS's own figures and report sections (Bai et al. 2024a, Fig. 6, 8, 9), written by the bench through the
method.

* ``tradeoff.png`` (Fig. 8): clean vs robust accuracy of MixedNUTS over beta against the linear mixture over alpha.
* ``margins.png`` (Fig. 6 / Table 6): RBC confidence-margin histograms before and after M(s*, p*, c*), clean vs
  attacked (MMAA), correct vs incorrect, on the calibration images.
* ``objective.png`` (Fig. 9): the Algorithm 1 objective as s-c heat maps, one per p.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from mixzoo.core.figures import figure_module as _figure
from mixzoo.core.figures import save_png as _save_png

if TYPE_CHECKING:
    from mixzoo.core.request import EvalRequest, ReportRequest

DEFAULT_BETAS = (0.9, 0.95, 0.97, 0.98, 0.985, 0.99, 0.995)
DEFAULT_LINEAR_ALPHAS = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.98, 1.0)


def calibration_data_for(card: Any, rbc: nn.Module, request: ReportRequest, at_most: int | None = None):
    """The cached calibration data behind a card (recomputed with the card's settings if the cache is cold: then on
    its first ``at_most`` calibration images only, when given), with the cache, data directory, device and progress
    of ``request`` (:class:`~mixzoo.core.request.ReportRequest`). The bench calls it; writing a report never does."""
    from mixzoo.methods.mixednuts.calibration_data import calibration_data, mmaa_of_card
    from mixzoo.zoo.data import load_dataset
    from mixzoo.zoo.pairs import card_dataset

    data = load_dataset(card_dataset(card, rbc), "calibration", n=card.data.get("n"), root=request.data_dir)
    return calibration_data(None, rbc, data, mmaa_of_card(card), cache=request.evaluation.cache,
                            device=request.device, progress=request.evaluation.progress, at_most=at_most)


def screening(attack: str) -> str | None:
    """The screening note of ``attack`` (its class's ``screening_note``, e.g. ``fast``): the curve's points are
    then screening figures, and the report and plot say so. None for an attack that reports robustness figures."""
    from mixzoo.core.errors import MixzooError
    from mixzoo.core.plugins import lookup

    try:
        return getattr(lookup("attack", attack), "screening_note", None)
    except MixzooError:
        return None


def tradeoff_curve(card: Any, abc: nn.Module, rbc: nn.Module, data: Any, request: ReportRequest, *,
                   betas: tuple[float, ...] = DEFAULT_BETAS,
                   alphas: tuple[float, ...] = DEFAULT_LINEAR_ALPHAS) -> dict[str, Any]:
    """Fig. 8: MixedNUTS recalibrated at each beta (cached MMAA, so seconds each; the card's own beta among them)
    vs the linear mixture over alpha, and the ABC and RBC alone.

    Every point is measured on the same first ``request.n`` evaluation images: clean accuracy from cached logits,
    robust accuracy under the attack of ``request.evaluation`` (a cheaper attack than the main table's by default;
    the plot says which). ``request.points``: that many betas and alphas per curve, evenly spread over ``betas``
    and ``alphas`` (the bench's budget; ``None``: all of them; the card's own beta is always among them).
    """
    from mixzoo.core.budget import curve_points
    from mixzoo.zoo.pairs import cached_logits

    betas, alphas = curve_points(betas, request.points), curve_points(alphas, request.points)
    # the card's calibration data when `mixzoo mix` cached it here; else as many calibration images as the bench
    # evaluates (its --n), not the card's whole split
    cal = calibration_data_for(card, rbc, request, at_most=len(data.labels))
    ev = request.evaluation
    logits = {role: cached_logits(model, data, cache=ev.cache, device=request.device, progress=ev.progress,
                                  what=f"{role.upper()} eval logits") for role, model in (("abc", abc), ("rbc", rbc))}
    n = min(request.n, len(data.labels))
    points = CurvePoints(abc, rbc, data, n, logits["abc"][:n], logits["rbc"][:n], ev)
    own = card.params.get("beta")
    betas = tuple(sorted({*betas, *((float(own),) if isinstance(own, int | float) else ())}))
    nuts = [points.mixednuts(card, cal, beta) for beta in betas]
    linear = [points.linear(alpha) for alpha in alphas]
    r = ev.record
    return {"attack": r.attack, "attack_options": r.options(), "screening": screening(r.attack), "n_robust": n,
            "n_clean": n, "n_calibration": len(cal.labels), "card_beta": own, "mixednuts": nuts, "linear": linear,
            **points.bases(linear)}


@dataclass(frozen=True)
class CurvePoints:
    """The trade-off curve's points on the first ``n`` evaluation images: clean accuracy from the cached logits,
    robust accuracy under ``request``'s attack (each point cached under its own key)."""

    abc: nn.Module
    rbc: nn.Module
    data: Any
    n: int
    abc_logits: torch.Tensor
    rbc_logits: torch.Tensor
    request: EvalRequest

    @property
    def labels(self) -> torch.Tensor:
        return self.data.labels[:self.n]

    def clean_accuracy(self, **mix: Any) -> float:
        from mixzoo.methods.mixednuts.mixing import mix_log_probs

        lp = mix_log_probs(self.abc_logits, self.rbc_logits, **mix)
        return float((lp.argmax(1) == self.labels).float().mean())

    def robust_accuracy(self, model: nn.Module, key_parts: dict[str, Any], label: str) -> float:
        from mixzoo.attacks.runner import evaluate

        ev = evaluate(model, self.data.images[:self.n], self.labels,
                      self.request.replace(key_parts=key_parts, label=label))
        return sum(ev["robust_correct"]) / len(ev["robust_correct"])

    def base_key(self) -> dict[str, Any]:
        from mixzoo.zoo.pairs import model_key

        return {"data": self.data.fingerprint, "abc": model_key(self.abc), "rbc": model_key(self.rbc),
                "curve_n": self.n}

    def mixednuts(self, card: Any, cal: Any, beta: float) -> dict[str, Any]:
        """MixedNUTS recalibrated at ``beta`` on the card's calibration data, and its accuracies."""
        from mixzoo.methods.mixednuts.calibrate import Grid, calibrate
        from mixzoo.methods.mixednuts.mixing import MixedClassifier, MixingParams
        from mixzoo.zoo.pairs import card_key_parts

        with warnings.catch_warnings():  # the curve's other betas: Algorithm 1's notes on them are not the card's
            warnings.simplefilter("ignore")
            c = calibrate(clean_logits=cal.clean_logits, clean_labels=cal.labels,
                          attacked_logits=cal.attacked_logits, attacked_labels=cal.labels, beta=beta,
                          clamp=card.params["clamp"], top_k=card.params["top_k"],
                          grid=Grid.from_record(card.params["grid"]))
        q = c.params
        mix = {k: q[k] for k in ("s", "p", "c", "alpha", "clamp", "top_k")}
        model = MixedClassifier(self.abc, self.rbc, MixingParams(**mix, alpha_d=q["alpha_d"]))
        robust = self.robust_accuracy(model, {**card_key_parts(c, self.abc, self.rbc, self.data), "curve_n": self.n},
                                      f"MixedNUTS beta={beta}")
        return {"beta": beta, **{k: q[k] for k in ("s", "p", "c", "alpha")},
                "clean_accuracy": self.clean_accuracy(**mix), "robust_accuracy": robust}

    def linear(self, alpha: float) -> dict[str, Any]:
        """The linear mixture at ``alpha`` and its accuracies."""
        from mixzoo.methods.mixednuts.mixing import MixedClassifier

        robust = self.robust_accuracy(MixedClassifier.linear(self.abc, self.rbc, alpha=alpha),
                                      {**self.base_key(), "linear_alpha": alpha}, f"linear alpha={alpha}")
        return {"alpha": alpha,
                "clean_accuracy": self.clean_accuracy(s=1.0, p=1.0, c=0.0, alpha=alpha, temperature=1.0,
                                                      transform=False),
                "robust_accuracy": robust}

    def bases(self, linear: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
        """The ABC and the RBC alone (the RBC's robust accuracy is the linear mixture's at alpha 1 when the curve
        has it)."""
        from mixzoo.zoo.pairs import model_key

        out = {}
        for role, model, logits in (("abc", self.abc, self.abc_logits), ("rbc", self.rbc, self.rbc_logits)):
            alone = next((r["robust_accuracy"] for r in linear if r["alpha"] == 1.0), None) if role == "rbc" else None
            if alone is None:
                alone = self.robust_accuracy(model, {**self.base_key(), "model": model_key(model)},
                                             f"{role.upper()} (curve)")
            out[role] = {"clean_accuracy": float((logits.argmax(1) == self.labels).float().mean()),
                         "robust_accuracy": alone}
        return out


def plot_tradeoff(report: Any, path: Path) -> None:
    """Fig. 8 as ``tradeoff.png`` (:func:`tradeoff_figure`)."""
    fig = tradeoff_figure(report)
    _save_png(fig, path)
    _figure().close(fig)


def tradeoff_figure(report: Any) -> Any:
    """Fig. 8: MixedNUTS over beta (the card's own beta starred) and the linear mixture over alpha, each point
    labelled without overlap, the ABC and RBC alone, both axes within 0-100 %; every point on the same images (one
    n, in the title). A curve of an older report (clean accuracy on more images than robust) says both sizes."""
    from mixzoo.core.figures import keep_within, place_labels

    plt = _figure()
    cur = report.curve
    fig, ax = plt.subplots(figsize=(8.0, 5.6))
    nuts, lin = cur["mixednuts"], cur["linear"]

    def xy(r: dict[str, Any]) -> tuple[float, float]:
        return 100 * r["clean_accuracy"], 100 * r["robust_accuracy"]

    ax.plot(*zip(*map(xy, nuts), strict=True), "o-", color="C0", ms=4, label="MixedNUTS over beta")
    ax.plot(*zip(*map(xy, lin), strict=True), "s--", color="C1", ms=4, label="linear mix over alpha")
    card = report.card.to_dict() if hasattr(report.card, "to_dict") else report.card or {}
    beta = cur.get("card_beta", (card.get("mixednuts") or {}).get("beta", card.get("beta")))
    own = next((r for r in nuts if beta is not None and r["beta"] == beta), None)
    if own is not None:
        ax.plot(*xy(own), "*", color="C3", ms=13, zorder=5, label=f"the card's beta ({own['beta']:g}) on this curve")
    bases = [(cur.get(role) or (None if "abc" in cur else _report_row(report, role)), role.upper())
             for role in ("abc", "rbc")]
    for r in (r for r, _ in bases if r is not None):
        ax.plot(*xy(r), "k^", ms=7, zorder=4)
    keep_within(ax)
    fig.tight_layout()
    base_points = [xy(r) for r, _ in bases if r is not None]
    place_labels(ax, [(*xy(r), name) for r, name in bases if r is not None], fontsize=9)
    # the linear mix at alpha 1 is the RBC: its point carries the RBC's label
    everything = base_points + [xy(r) for r in nuts + lin]
    place_labels(ax, [(*xy(r), f"{r['beta']:g}") for r in nuts], avoid=everything, fontsize=7.5, color="C0")
    place_labels(ax, [(*xy(r), f"{r['alpha']:g}") for r in lin if xy(r) not in base_points], avoid=everything,
                 fontsize=7.5, color="C1")
    ax.set_xlabel("clean accuracy %")
    kind = ", screening" if cur.get("screening") else ""
    ax.set_ylabel(f"robust accuracy % ({cur['attack']}{kind})")
    sizes = (f"n = {cur['n_robust']}" if cur["n_clean"] == cur["n_robust"] else
             f"clean n = {cur['n_clean']}, robust n = {cur['n_robust']}")
    ax.set_title(f"Accuracy-robustness trade-off (Bai et al. 2024a, Fig. 8), {sizes}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return fig


def _report_row(report: Any, kind: str) -> dict[str, Any] | None:
    """A base model's row of the report as a curve point (curves of older reports have none of their own)."""
    m = next((m for m in report.models if m.kind == kind), None)
    return None if m is None else {"clean_accuracy": m.clean_accuracy, "robust_accuracy": m.robust_accuracy}


MARGIN_BINS = 40  # the Fig. 6 histograms' bins over [0, 1]


def margin_histograms(card: Any, cal: Any) -> dict[str, Any]:
    """The Fig. 6 histograms of the RBC's confidence margins on the calibration images ``cal``: before (LN(h)) and
    after M(s, p, c), clean and attacked (MMAA), correct and incorrect (by the raw logits), as counts per bin of
    ``bins`` with each group's size: what :func:`plot_margins` draws, computed during the bench."""
    from mixzoo.methods.mixednuts.transforms import confidence_margin, layer_norm, rbc_transform, transform_of

    stages = {"before": lambda z: layer_norm(z, top_k=card.params["top_k"]),
              "after": lambda z: rbc_transform(z, **transform_of(card.params))}
    bins = torch.linspace(0, 1, MARGIN_BINS + 1).numpy()
    out: dict[str, Any] = {"bins": bins.tolist(), "n_calibration": len(cal.labels)}
    for stage, fn in stages.items():
        out[stage] = {}
        for logits, what in ((cal.clean_logits, "clean"), (cal.attacked_logits, "attacked")):
            m = confidence_margin(fn(logits)).numpy()
            correct = (logits.argmax(1) == cal.labels).numpy()
            out[stage][what] = {ok: {"n": int(mask.sum()), "counts": np.histogram(m[mask], bins)[0].tolist()}
                                for mask, ok in ((correct, "correct"), (~correct, "incorrect"))}
    return out


def figure_data(card: Any, rbc: nn.Module, data: Any, request: ReportRequest) -> dict[str, Any] | None:
    """What MixedNUTS's figures plot beyond the card and the curve: the Fig. 6 margin histograms on the card's
    calibration data (:func:`margin_histograms`; cached by ``mixzoo mix`` on this machine, else MMAA on as many
    calibration images as the bench evaluates). ``None`` for a card calibrated without MMAA records."""
    if not (card.attack and card.attack.get("name") == "mmaa" and card.data.get("n")):
        return None
    cal = calibration_data_for(card, rbc, request, at_most=len(data.labels))
    return {"margins": margin_histograms(card, cal)}


def plot_margins(card: Any, margins: dict[str, Any], path: Path) -> None:
    """Fig. 6 as ``margins.png`` from :func:`margin_histograms`' counts."""
    plt = _figure()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    titles = {"before": "before: LN(h_rob)",
              "after": f"after: M(s={card.params['s']:.3g}, p={card.params['p']:.3g}, c={card.params['c']:.3g})"}
    bins = np.asarray(margins["bins"], dtype=float)
    centres = (bins[:-1] + bins[1:]) / 2
    for ax, stage in zip(axes, ("before", "after"), strict=True):
        for what in ("clean", "attacked"):
            for ok in ("correct", "incorrect"):
                group = margins[stage][what][ok]
                if group["n"]:
                    ax.hist(centres, bins=bins, weights=np.asarray(group["counts"], dtype=float), histtype="step",
                            density=True, linewidth=1.5, label=f"{what} {ok} (n={group['n']})")
        q = (1 - card.params["alpha"]) / card.params["alpha"]
        if stage == "after":
            ax.axvline(q, color="k", linestyle=":", label=f"(1-alpha)/alpha = {q:.3f}")
        ax.set_title(titles[stage])
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
    """Fig. 9 as ``objective.png`` (:func:`objective_figure`)."""
    fig = objective_figure(card)
    _save_png(fig, path)
    _figure().close(fig)


def objective_range(shown: Any) -> tuple[float, float]:
    """The colour scale of the feasible objectives ``shown`` (NaN where excluded): their least and largest, widened
    by 0.05 on each side when they are all equal so that their colour is the scale's middle, (0, 1) when none is
    feasible."""
    if not np.isfinite(shown).any():
        return 0.0, 1.0
    lo, hi = float(np.nanmin(shown)), float(np.nanmax(shown))
    return (lo - 0.05, hi + 0.05) if hi - lo < 1e-12 else (lo, hi)


def objective_figure(card: Any) -> Any:
    """Fig. 9: the Algorithm 1 objective as s-c heat maps, one per p, points excluded by App. D.8.2 in grey, the
    chosen point starred."""
    plt = _figure()
    g = card.params["grid"]
    obj = np.asarray(g["objectives"], dtype=float)  # [s][p][c]
    s_vals, p_vals, c_vals = g["s_values"], g["p_values"], g["c_values"]
    cols = min(4, len(p_vals))
    rows = (len(p_vals) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 3.5 * rows), squeeze=False)
    fig.subplots_adjust(hspace=0.6, wspace=0.35, right=0.85)
    # objectives above 1 mark grid points excluded by the App. D.8.2 constraint: grey, outside the colour scale
    infeasible = obj > 1
    shown = np.where(infeasible, np.nan, obj)
    vmin, vmax = objective_range(shown)
    cmap = plt.get_cmap("viridis").with_extremes(bad="lightgrey")
    for j, p in enumerate(p_vals):
        ax = axes[j // cols][j % cols]
        im = ax.imshow(shown[:, j, :], origin="lower", aspect="auto", vmin=vmin, vmax=vmax, cmap=cmap)
        ax.set_title(f"p = {p:.3g}", fontsize=10)
        ax.set_xticks(range(len(c_vals)), [f"{c:.2g}" for c in c_vals], fontsize=8, rotation=90)
        ax.set_yticks(range(len(s_vals)), [f"{s:.2g}" for s in s_vals], fontsize=8)
        ax.set_xlabel("c", fontsize=10)
        ax.set_ylabel("s", fontsize=10)
        if abs(p - card.params["p"]) < 1e-9:
            si = int(np.argmin(np.abs(np.asarray(s_vals) - card.params["s"])))
            ci = int(np.argmin(np.abs(np.asarray(c_vals) - card.params["c"])))
            ax.plot(ci, si, "r*", markersize=12)
    for k in range(len(p_vals), rows * cols):
        axes[k // cols][k % cols].axis("off")
    bar = fig.colorbar(im, cax=fig.add_axes((0.88, 0.15, 0.015, 0.7)), label="objective (share of clean mistakes kept)")
    bar.ax.tick_params(labelsize=8)
    excluded = " grey = excluded by App. D.8.2;" if infeasible.any() else ""
    feasible = shown[np.isfinite(shown)]
    same = f" every feasible point {feasible[0]:.3g};" if feasible.size and np.ptp(feasible) == 0 else ""
    fig.suptitle(f"Algorithm 1 objective over the grid (Bai et al. 2024a, Fig. 9);{excluded}{same} red star ="
                 " chosen")
    return fig


def figures(report: Any, card: Any, stage: Path, *, prefix: str = "", data: dict[str, Any] | None = None
            ) -> list[str]:
    """Write this card's figures into ``stage`` (names prefixed by ``prefix``) from the report, the card and
    ``data`` (:func:`figure_data`, computed by the bench); returns the file names. Only renders."""
    names = []
    if card.params["grid"]:
        plot_objective(card, stage / f"{prefix}objective.png")
        names.append(f"{prefix}objective.png")
    if report.curve and not prefix:
        plot_tradeoff(report, stage / "tradeoff.png")
        names.append("tradeoff.png")
    if data and data.get("margins"):
        plot_margins(card, data["margins"], stage / f"{prefix}margins.png")
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
