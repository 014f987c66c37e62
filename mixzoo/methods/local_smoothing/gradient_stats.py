"""Per-class input-gradient norms of the two base models: Bai et al. (local smoothing), Fig. 2-3 (and App. A.4 with
attacked inputs).

Bai et al. (local smoothing), Sec. 4 argues that R_i(x) = ||grad g_i(x)||_* / ||grad h_i(x)||_* is worth computing
because it varies from input to input: the distributions of ||grad g_i||_* and ||grad h_i||_* per class i have
non-trivial spread (Fig. 2), ||grad g_i|| is usually larger than ||grad h_i|| (the accurate model is the less smooth
one), and the g and h norms are weakly correlated with each other (Fig. 3). :func:`gradient_norms` measures them on
images (whole Jacobians, one batched backward pass per model and chunk: :func:`~.gradients.class_gradients`),
:func:`gradient_norm_summary` reduces them to what the figures show (quantiles per class, the 2c x 2c correlation
matrix, the share of (image, class) pairs with ||grad g_i|| > ||grad h_i||) and :func:`gradient_norm_figure` draws
them (PNG).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from mixzoo.core.errors import InputError
from mixzoo.methods.local_smoothing.gradients import check_norm, class_gradients, dual_norm

QUANTILES = (0.0, 0.05, 0.25, 0.5, 0.75, 0.95, 1.0)


def gradient_norms(abc: nn.Module, rbc: nn.Module, images: torch.Tensor, *, norm: str = "Linf",
                   space: str = "logits", batch_size: int = 100) -> tuple[torch.Tensor, torch.Tensor]:
    """``(G, H)``, each (n, c): ``G[b, i] = ||grad_x g_i(x_b)||_*``, ``H`` likewise for h, the dual norm of the
    threat model ``norm`` (l1 for l-inf, Bai et al. (local smoothing)'s case), of the logits (Bai et al. (local
    smoothing)) or of the probabilities."""
    check_norm(norm)
    if space not in ("logits", "probabilities"):
        raise InputError(f"space must be logits or probabilities, got {space!r}")
    if len(images) == 0:
        raise InputError("gradient_norms needs at least one image")

    def fn(model: nn.Module) -> Any:
        return model if space == "logits" else (lambda x: torch.softmax(model(x), dim=-1))

    gs, hs = [], []
    for lo in range(0, len(images), batch_size):
        x = images[lo:lo + batch_size]
        gs.append(dual_norm(class_gradients(fn(abc), x)[1], norm).T)
        hs.append(dual_norm(class_gradients(fn(rbc), x)[1], norm).T)
    return torch.cat(gs).double(), torch.cat(hs).double()


def gradient_norm_summary(g: torch.Tensor, h: torch.Tensor) -> dict[str, Any]:
    """What Bai et al. (local smoothing), Fig. 2-3 show, as numbers: per class the quantiles :data:`QUANTILES`, mean
    and standard deviation of each model's norms; the Pearson correlation matrix of the 2c variables (g_1..g_c, then
    h_1..h_c); the share of (image, class) pairs where ||grad g_i|| > ||grad h_i||; and per class the coefficient of
    variation of R_i = g/h (how much the ratio moves from input to input)."""
    if g.shape != h.shape or g.ndim != 2:
        raise InputError(f"g and h norms must both be (n, c), got {tuple(g.shape)} and {tuple(h.shape)}")
    q = torch.tensor(QUANTILES, dtype=g.dtype)
    both = torch.cat([g, h], dim=1)
    corr = torch.corrcoef(both.T)
    ratio = g / h.clamp_min(torch.finfo(h.dtype).tiny)

    def per_class(v: torch.Tensor) -> dict[str, list]:
        return {"quantiles": torch.quantile(v, q, dim=0).T.tolist(), "mean": v.mean(0).tolist(),
                "std": v.std(0).tolist()}

    c = g.shape[1]
    off = ~torch.eye(c, dtype=torch.bool)
    return {"n": g.shape[0], "classes": c, "quantile_levels": list(QUANTILES), "g": per_class(g), "h": per_class(h),
            "correlation": corr.tolist(), "share_g_larger": float((g > h).double().mean()),
            "ratio_cv": (ratio.std(0) / ratio.mean(0)).tolist(),
            "mean_corr_g_g": float(corr[:c, :c][off].mean()), "mean_corr_h_h": float(corr[c:, c:][off].mean()),
            "mean_corr_g_h": float(corr[:c, c:].mean())}


def gradient_norm_figure(g: torch.Tensor, h: torch.Tensor, path: str | Path, *, title: str = "",
                         norm_name: str = "l1") -> Path:
    """Bai et al. (local smoothing), Fig. 2 (box plots of ||grad g_i|| above and ||grad h_i|| below, one box per class,
    log scale) beside Fig. 3 (the correlation matrix), one PNG at ``path``."""
    from mixzoo.core.figures import figure_module, save_png

    plt = figure_module()
    c = g.shape[1]
    fig = plt.figure(figsize=(12, 5.2))
    grid = fig.add_gridspec(2, 2, width_ratios=[1.25, 1])
    for row, (v, name) in enumerate(((g, "g (ABC)"), (h, "h (RBC)"))):
        ax = fig.add_subplot(grid[row, 0])
        ax.boxplot([v[:, i].clamp_min(1e-12).numpy() for i in range(c)], whis=(5, 95), showfliers=False)
        ax.set_yscale("log")
        ax.set_xticks(range(1, c + 1), [str(i) for i in range(c)])
        ax.set_ylabel(f"||grad {name[0]}_i||_{norm_name[1:]}\n{name}", fontsize=8)
        if row == 1:
            ax.set_xlabel("class i (boxes: quartiles, whiskers: 5-95 %)")
    ax = fig.add_subplot(grid[:, 1])
    corr = torch.corrcoef(torch.cat([g, h], dim=1).T).numpy()
    im = ax.imshow(corr, vmin=-1, vmax=1, cmap="RdBu_r")
    labels = [f"g{i}" for i in range(c)] + [f"h{i}" for i in range(c)]
    ax.set_xticks(range(2 * c), labels, fontsize=6, rotation=90)
    ax.set_yticks(range(2 * c), labels, fontsize=6)
    ax.set_title("correlation of the 2c gradient norms (Bai et al. (local smoothing), Fig. 3)", fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.046)
    fig.suptitle(title or "per-class input-gradient norms (Bai et al. (local smoothing), Fig. 2)", fontsize=10)
    out = Path(path)
    save_png(fig, out)
    plt.close(fig)
    return out


def gradient_figure_and_record(g: torch.Tensor, h: torch.Tensor, stem: str | Path, *, title: str = "",
                               extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """``STEM.png`` (:func:`gradient_norm_figure`) and ``STEM.json`` (:func:`gradient_norm_summary` plus ``extra``,
    e.g. the models, data and machine); returns the record."""
    import json

    from mixzoo.core.cache import atomic_write_text

    stem = Path(stem)
    record = {**gradient_norm_summary(g, h), **(extra or {})}
    gradient_norm_figure(g, h, stem.with_name(stem.name + ".png"), title=title)
    atomic_write_text(stem.with_name(stem.name + ".json"), json.dumps(record, indent=1, default=str))
    return record
