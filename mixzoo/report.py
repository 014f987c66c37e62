"""Results a user keeps: ``report.json``, ``report.md``, the adversarial points, and each card's method's
figures (e.g. MixedNUTS's Fig. 6, 8, 9: :mod:`mixzoo.methods.mixednuts.figures`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from torch import nn

from mixzoo.cache import Cache, atomic_save_tensors, atomic_write_bytes, atomic_write_text, staged_directory
from mixzoo.machine import machine_line


# ------------------------------------------------------------------------------------------------ plots
def _figure():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save_png(fig: Any, path: Path) -> None:
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight")
    atomic_write_bytes(path, buf.getvalue())


# ------------------------------------------------------------------------------------------------ files
def options_text(options: dict[str, Any]) -> str:
    """`` (n_iter=200, n_restarts=2)`` after an attack's name when options were given, else nothing."""
    return f" ({', '.join(f'{k}={v}' for k, v in options.items())})" if options else ""


def markdown(report: Any) -> str:
    """``report.md``: the table, the card, the data, and any warnings."""
    from mixzoo.bench import ci_cell, comparison_lines, seconds_cell

    c, d, st = report.card, report.dataset, report.settings
    lines = [
        "# mixzoo bench report", "",
        f"Evaluation: **{d['name']}** `{d['split']}` split, n = {d['n']} (fingerprint `{d['fingerprint']}`); "
        f"calibration used the disjoint `calibration` split ({(d.get('calibration') or {}).get('n', '?')} images).",
        f"Attack: `{st['attack']}`{options_text(st.get('attack_options') or {})}, {st['norm']}, "
        f"eps = {st['eps']:.6g}, seed {st['seed']}.",
        *(f"Note: {note}." for note in getattr(report, "notes", [])), "",
        "| model | kind | alpha | clean % (95% CI) | robust % (95% CI) | attack seconds (device) |",
        "|---|---|---|---|---|---|",
    ]
    for m in report.models:
        alpha = "" if m.alpha is None else f"{m.alpha:.4f}"
        lines.append(f"| {m.name} | {m.kind} | {alpha} | {ci_cell(m.clean_accuracy, m.clean_ci)} | "
                     f"{ci_cell(m.robust_accuracy, m.robust_ci)} | {seconds_cell(m)} |")
    rbc = report.row("rbc")
    if rbc.clean_accuracy < 1:
        lines.append("")
        for m in report.mixed_rows():
            cut = (m.clean_accuracy - rbc.clean_accuracy) / (1 - rbc.clean_accuracy)
            lines.append(f"{m.name} vs RBC: clean error cut by {100 * cut:.1f}% (relative), robust accuracy "
                         f"{100 * (m.robust_accuracy - rbc.robust_accuracy):+.2f} points.")
    comparisons = comparison_lines(report)
    if comparisons:
        lines += ["", "Paired comparisons (Newcombe's interval for the difference of two accuracies on the same "
                      "images; `mixzoo/stats.py`):", ""] + [f"- {line}" for line in comparisons]
    machines = {m.machine or "unknown" for m in report.models}
    if len(machines) == 1:
        lines += ["", f"Every row was attacked on: {machines.pop()}."]
    else:  # rows read from a cache another machine filled, or a run resumed elsewhere
        lines += ["", "The rows were attacked on different machines: " + "; ".join(
            f"{m.name}: {m.machine or 'unknown'}" for m in report.models) + "."]
    lines += ["", "## Attack components (examples newly broken)", ""]
    for m in report.models:
        comps = ", ".join(f"{x['name']}: {x['newly_broken']}" for x in m.components)
        lines.append(f"- {m.name}: {comps}")
        for w in m.warnings:
            lines.append(f"  - **warning**: {w}")
    for m in report.mixed_rows():
        section = {k: v for k, v in (m.card or {}).get(m.method or "", {}).items() if k != "grid"}
        lines += ["", f"## {m.name}: mix card (method `{m.method}`)" + (f", `{m.card_path}`" if m.card_path else ""),
                  "", "```json", json.dumps(section, indent=2), "```"]
    if st.get("linear_alpha_search"):
        mt = st.get("linear_alpha_match", {})
        lines += ["", f"Linear baseline alpha: bisection with `{mt.get('attack')}` {mt.get('options')} on "
                      f"{mt.get('n')} images against {mt.get('card', 'MixedNUTS')}'s "
                      f"{100 * mt.get('target_robust_accuracy', mt.get('mixednuts_robust_accuracy', 0)):.2f}% "
                      "under that attack; robust accuracy per alpha tried: " + ", ".join(
            f"{t['alpha']:.2f} -> {100 * t['robust_accuracy']:.2f}%" for t in st["linear_alpha_search"])]
    for card in getattr(report, "cards", None) or [c]:
        extra = getattr(card.mixing_method, "markdown_lines", None) if hasattr(card, "mixing_method") else None
        lines += extra(report, card) if extra is not None else []
    if report.files:
        lines += ["", "## Plots", ""] + [f"![{f}]({f})" for f in report.files if f.endswith(".png")]
    prov = getattr(c, "provenance", {}) or {}
    lines += ["", f"Made by mixzoo {prov.get('mixzoo_version', '')} (card created {prov.get('created', '?')}); "
                  f"bench took {st.get('seconds') or 0:.0f} s on {st.get('device')}.",
              "", f"Run on: {machine_line(getattr(report, 'run', None))}."]
    return "\n".join(lines) + "\n"


def write_report(report: Any, out: Path, *, rbc: nn.Module, plots: bool = True, cache: Cache | None = None,
                 data_dir: str | None = None, device: str = "cpu") -> list[Path]:
    """Write report.json, report.md, the PNG plots and the adversarial points into ``out``, all or none
    (:func:`mixzoo.cache.staged_directory`: files of an earlier report there that this one does not have are
    removed). ``rbc`` is the RBC the report evaluated (its cached calibration margins feed the Fig. 6 histograms)."""
    from mixzoo.bench import ADVERSARIAL_FILE

    names: list[str] = []
    known = ("report.json", "report.md", "objective.png", "tradeoff.png", "margins.png", ADVERSARIAL_FILE)
    with staged_directory(out, known) as stage:
        for index, card in enumerate(getattr(report, "cards", None) or [report.card]) if plots else ():
            figures = getattr(card.mixing_method, "figures", None)
            if figures is not None:
                names += figures(report, card, stage, prefix="" if index == 0 else f"card{index + 1}-",
                                 rbc=rbc, cache=cache, data_dir=data_dir, device=device)
        if report.adversarial:
            st = report.settings
            tensors = {f"{kind}.{what}": t for kind, pts in report.adversarial.items() for what, t in pts.items()}
            atomic_save_tensors(stage / ADVERSARIAL_FILE, tensors,
                                metadata={"eps": repr(st["eps"]), "norm": st["norm"], "attack": st["attack"],
                                          "data": report.dataset["fingerprint"], "n": str(report.dataset["n"])})
            names.append(ADVERSARIAL_FILE)
        report.files = names
        report.out = out
        atomic_write_text(stage / "report.json", json.dumps(report.to_dict(), indent=2, default=str))
        atomic_write_text(stage / "report.md", markdown(report))
    return [out / name for name in ("report.json", "report.md", *names)]
