"""What ``mixzoo certify`` returns and writes: certified-accuracy curves (Bai et al. 2024b, Fig. 6-7) as JSON, Markdown
and PNG.

Certified curves (provable Lipschitz bound, Thm 3.5; randomized smoothing, Thm 3.5 / Thm A.2) and estimated ones
(local Lipschitz constants found by PGD, App. C.3) are kept apart: different lists in the JSON, different tables
in the Markdown, different PNG files. An estimated curve is never drawn in ``certify.png``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from mixzoo.core.cache import atomic_write_text, staged_directory
from mixzoo.core.figures import figure_module, save_png
from mixzoo.core.machine import machine_line

__all__ = ["CertCurve", "CertifyResult", "pareto_frontier"]

FILES = ("certify.json", "certify.md", "certify.png", "estimated.png")
TABLE_COLUMNS = 5  # radii the tables show (terminal and certify.md alike)
# the result each kind of bound rests on (Bai et al. 2024b)
THEOREMS = {"lipschitz": "Thm 3.5", "lipschitz-logits": "Lemma 3.2", "smoothing-lipschitz": "Thm 3.5",
            "smoothing": "Thm A.2"}


def shown_radii(grid: list[float], columns: int = TABLE_COLUMNS) -> list[float]:
    """Up to ``columns`` radii of ``grid`` spread evenly over it, the first and the last included."""
    if len(grid) <= columns:
        return list(grid)
    picks = sorted({round(k * (len(grid) - 1) / (columns - 1)) for k in range(columns)})
    return [grid[i] for i in picks]


def theorem_text(bounds: list[str]) -> str:
    """``Bai et al. 2024b, Thm 3.5``: the results the certified curves with these bounds rest on, in order."""
    cited = list(dict.fromkeys(THEOREMS[b] for b in bounds if b in THEOREMS))
    return "Bai et al. 2024b, " + " / ".join(cited) if cited else "Bai et al. 2024b"


@dataclass
class CertCurve:
    """Accuracy of one classifier (the RBC alone at alpha = 1, or a mixture) at every radius of the grid.

    ``bound``: ``"lipschitz"`` (Thm 3.5 with a provable constant), ``"lipschitz-logits"`` (a declared Lipschitz
    constant of the logits: logit margin / (sqrt(2) L), Lemma 3.2 for mixtures), ``"smoothing-lipschitz"`` (Thm 3.5
    with the smoothed model's constant), ``"smoothing"`` (Thm A.2) or ``"estimated"`` (App. C.3: NOT a certificate);
    ``clean_accuracy``: the classifier's own prediction at the clean images (the mixture can be right where the RBC
    is wrong; those images are never certified, Bai et al. 2024b, App. A.3); ``radius``: per example, ``None`` when not
    certified.
    """

    label: str
    alpha: float
    bound: str
    accuracy: list[float]
    clean_accuracy: float
    radius: list[float | None] = field(default_factory=list)
    radii: list[float] = field(default_factory=list)

    @property
    def certified(self) -> bool:
        return self.bound != "estimated"

    def at(self, r: float) -> float:
        """Accuracy at grid radius ``r`` (the nearest grid point at or below it)."""
        i = max(k for k, v in enumerate(self.radii) if v <= r + 1e-12)
        return self.accuracy[i]

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "alpha": self.alpha, "bound": self.bound, "certified": self.certified,
                "clean_accuracy": self.clean_accuracy, "radii": self.radii, "accuracy": self.accuracy,
                "radius": self.radius}


@dataclass
class CertifyResult:
    """Everything one certification produced; :meth:`save` writes it, :meth:`markdown` renders it."""

    settings: dict[str, Any]
    curves: list[CertCurve]
    notes: list[str]
    run: dict[str, Any]
    labels: list[int]

    @property
    def certified_curves(self) -> list[CertCurve]:
        return [c for c in self.curves if c.certified]

    @property
    def estimated_curves(self) -> list[CertCurve]:
        return [c for c in self.curves if not c.certified]

    def to_dict(self) -> dict[str, Any]:
        return {"settings": self.settings, "run": self.run, "notes": self.notes, "labels": self.labels,
                "certified": [c.to_dict() for c in self.certified_curves],
                "estimated": [c.to_dict() for c in self.estimated_curves]}

    def table_rows(self, curves: list[CertCurve], columns: int = TABLE_COLUMNS,
                   bound: bool = True) -> tuple[list[str], list[list[str]]]:
        """Header and rows: label, [bound,] clean accuracy, accuracy at up to ``columns`` radii of the grid, spread
        evenly from the first to the last (the terminal and certify.md show the same radii)."""
        if not curves:
            return [], []
        grid = curves[0].radii
        shown = shown_radii(grid, columns)
        header = ["classifier", "bound", "clean %"] + [f"{r:.3g}" for r in shown]
        rows = [[c.label, c.bound, f"{100 * c.clean_accuracy:.1f}"] + [f"{100 * c.at(r):.1f}" for r in shown]
                for c in curves]
        if not bound:
            header, rows = [header[0]] + header[2:], [[r[0]] + r[2:] for r in rows]
        return header, rows

    def markdown(self) -> str:
        s = self.settings
        lines = [f"# mixzoo certify: {s['rbc']} ({s['mode']}, {s['norm']})", "",
                 f"{s['n']} images of {s['dataset']} ({s['split']} split); ABC {s.get('abc') or '-'};"
                 f" alphas {', '.join(f'{a:g}' for a in s['alphas'])}.", "",
                 "Certified accuracy: correct and certified at least r (Bai et al. 2024b, Fig. 6-7). The clean column"
                 " is the classifier's own accuracy; the mixture is only certified where the RBC is right.", ""]
        for title, curves in (("Certified", self.certified_curves),
                              ("ESTIMATED (local Lipschitz constants by PGD, Bai et al. 2024b, App. C.3; not a"
                               " certificate)", self.estimated_curves)):
            header, rows = self.table_rows(curves)
            if not rows:
                continue
            lines += [f"## {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            lines += ["| " + " | ".join(r) + " |" for r in rows] + [""]
        if self.notes:
            lines += ["## Notes", ""] + [f"- {n}" for n in self.notes] + [""]
        lines += [f"Machine: {machine_line(self.run)}", ""]
        return "\n".join(lines)

    def figure(self, estimated: bool = False) -> Any:
        plt = figure_module()
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        curves = self.estimated_curves if estimated else self.certified_curves
        alphas = sorted({c.alpha for c in curves}, reverse=True)
        if len(alphas) > 4:  # a readable figure: the RBC alone and three mixtures spread over the alphas
            keep = {alphas[round(k * (len(alphas) - 1) / 3)] for k in range(4)}
            curves = [c for c in curves if c.alpha in keep]
        for c in curves:
            style = "--" if c.bound in ("lipschitz", "smoothing-lipschitz") else "-"
            line, = ax.step(c.radii, [100 * a for a in c.accuracy], style, where="post", label=c.label)
            ax.plot([0], [100 * c.clean_accuracy], "o", color=line.get_color(), ms=4)
        ax.set_xlabel(f"{self.settings['norm']} radius")
        ax.set_ylabel("accuracy (%)")
        title = ("ESTIMATED, not certified (Bai et al. 2024b, App. C.3)" if estimated
                 else f"certified accuracy ({theorem_text([c.bound for c in curves])})")
        ax.set_title(f"{self.settings['rbc']}: {title}", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        return fig

    def save(self, out: str | Path) -> Path:
        """Write certify.json, certify.md, certify.png (and estimated.png) into ``out`` all at once."""
        out = Path(out)
        plt = figure_module()
        with staged_directory(out, FILES) as stage:
            atomic_write_text(stage / "certify.json", json.dumps(self.to_dict(), indent=1) + "\n")
            atomic_write_text(stage / "certify.md", self.markdown())
            for estimated, name in ((False, "certify.png"), (True, "estimated.png")):
                if (self.estimated_curves if estimated else self.certified_curves):
                    fig = self.figure(estimated)
                    save_png(fig, stage / name)
                    plt.close(fig)
        return out


def pareto_frontier(curves: list[CertCurve], min_clean_accuracy: float) -> list[float]:
    """Bai et al. 2024b, App. A.3 "Pareto frontier": at every radius, the best certified accuracy over the curves (any
    alpha, any sigma) whose clean accuracy is at least ``min_clean_accuracy``. Curves must share one radius grid."""
    keep = [c for c in curves if c.certified and c.clean_accuracy >= min_clean_accuracy]
    if not keep:
        return []
    return torch.tensor([c.accuracy for c in keep]).amax(0).tolist()
