"""Results a user keeps: ``report.json``, ``report.md``, the adversarial points, and each card's method's
figures (e.g. MixedNUTS's Fig. 6, 8, 9: :mod:`mixzoo.methods.mixednuts.figures`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from mixzoo.core.cache import atomic_save_tensors, atomic_write_text, staged_directory
from mixzoo.core.errors import MixzooError
from mixzoo.core.labels import eps_text, row_label
from mixzoo.core.machine import machine_line
from mixzoo.core.paths import check_output, json_with
from mixzoo.core.progress import console

ADVERSARIAL_FILE = "adversarial.safetensors"
REPORT_FILES = ("report.json", "report.md", "objective.png", "tradeoff.png", "margins.png", ADVERSARIAL_FILE)


def seeds_note(settings: dict[str, Any]) -> str:
    """What report.md says about the attacks' randomness: per example (the default) or per batch."""
    if settings.get("per_example_seeds"):
        return " (per-example randomness: outcomes do not depend on the batch size or the number of processes)"
    if settings.get("per_example_seeds") is False:
        return " (randomness per batch, seed + batch number: outcomes depend on the batch size)"
    return ""


def options_text(options: dict[str, Any]) -> str:
    """`` (n_iter=200, n_restarts=2)`` after an attack's name when options were given, else nothing."""
    return f" ({', '.join(f'{k}={v}' for k, v in options.items())})" if options else ""


def budget_text(settings: dict[str, Any]) -> str:
    """`` (quick budget)`` after a title when the report records its budget (:mod:`mixzoo.core.budget`),
    else nothing (reports written before budgets existed)."""
    budget = settings.get("budget")
    return f" ({budget} budget)" if isinstance(budget, str) and budget else ""


def screening_note(attack: str) -> str | None:
    """The note of a screening attack (its class's ``screening_note``, e.g. ``fast``), printed beside its name:
    such a result is not a reported robustness figure. None for other attacks and for names no plugin registers."""
    from mixzoo.core.plugins import lookup

    try:
        return getattr(lookup("attack", attack), "screening_note", None)
    except MixzooError:
        return None


def precision_text(precision: str | None) -> str:
    """Nothing for float32 (the default), else ``, in bf16 (every break confirmed in float32)``."""
    if not precision or precision == "float32":
        return ""
    return f", in {precision} (every break confirmed in float32)"


def bf16_counts(components: list[dict[str, Any]]) -> tuple[int, int, int] | None:
    """A bf16 row's breaks as (found in bf16, confirmed in float32, broken by the float32 re-run of dropped
    candidates), summed over its components; None in float32."""
    counted = [c for c in components if "found_bf16" in c]
    if not counted:
        return None
    found, confirmed, rerun = (sum(c.get(k, 0) for c in counted)
                               for k in ("found_bf16", "confirmed_float32", "rerun_float32"))
    return found, confirmed, rerun


def component_cell(c: dict[str, Any]) -> str:
    """``apgd-ce: 12``, with a bf16 run's counts: ``apgd-ce: 12 (found in bf16 13, confirmed in float32 11, float32
    re-run 1)``."""
    cell = f"{c['name']}: {c['newly_broken']}"
    if "found_bf16" in c:
        cell += (f" (found in bf16 {c['found_bf16']}, confirmed in float32 {c['confirmed_float32']}, float32 "
                 f"re-run {c.get('rerun_float32', 0)})")
    return cell


def markdown(report: Any) -> str:
    """``report.md``: the table, the card, the data, and any warnings."""
    c, d, st = report.card, report.dataset, report.settings
    lines = [
        f"# mixzoo bench report{budget_text(st)}", "",
        f"Evaluation: **{d['name']}** `{d['split']}` split, n = {d['n']} (fingerprint `{d['fingerprint']}`); "
        f"calibration used the disjoint `calibration` split ({(d.get('calibration') or {}).get('n', '?')} images).",
        f"Attack: `{st['attack']}`{options_text(st.get('attack_options') or {})}, {st['norm']}, "
        f"eps = {eps_text(st['eps'])}, seed {st['seed']}{seeds_note(st)}"
        f"{precision_text(st.get('precision'))}.",
        *([f"**Note: {note}.**"] if (note := screening_note(st["attack"])) else []),
        *(f"Note: {note}." for note in getattr(report, "notes", [])), "",
        "| model | kind | clean % (95% CI) | robust % (95% CI) | attack seconds (device) |",
        "|---|---|---|---|---|",
    ]
    for m in report.models:
        lines.append(f"| {row_label(m)} | {m.kind} | {ci_cell(m.clean_accuracy, m.clean_ci)} | "
                     f"{ci_cell(m.robust_accuracy, m.robust_ci)} | {seconds_cell(m)} |")
    rbc = report.row("rbc")
    if rbc.clean_accuracy < 1:
        lines.append("")
        for m in report.mixed_rows():
            cut = (m.clean_accuracy - rbc.clean_accuracy) / (1 - rbc.clean_accuracy)
            lines.append(f"{row_label(m)} vs RBC: clean error cut by {100 * cut:.1f}% (relative), robust accuracy "
                         f"{100 * (m.robust_accuracy - rbc.robust_accuracy):+.2f} points.")
    comparisons = comparison_lines(report)
    if comparisons:
        lines += ["", "Paired comparisons (Newcombe's interval for the difference of two accuracies on the same "
                      "images; `mixzoo/evaluation/stats.py`):", ""] + [f"- {line}" for line in comparisons]
    machines = {m.machine or "unknown" for m in report.models}
    if len(machines) == 1:
        lines += ["", f"Every row was attacked on: {machines.pop()}."]
    else:  # rows read from a cache another machine filled, or a run resumed elsewhere
        lines += ["", "The rows were attacked on different machines: " + "; ".join(
            f"{row_label(m)}: {m.machine or 'unknown'}" for m in report.models) + "."]
    lines += ["", "## Attack components (examples newly broken)", ""]
    for m in report.models:
        comps = ", ".join(component_cell(x) for x in m.components)
        lines.append(f"- {row_label(m)}: {comps}")
        for w in m.warnings:
            lines.append(f"  - **warning**: {w}")
    for m in report.mixed_rows():
        section = {k: v for k, v in (m.card or {}).get(m.method or "", {}).items() if k != "grid"}
        where = f", `{m.card_path}`" if m.card_path else ""
        lines += ["", f"## {row_label(m)}: mix card (method `{m.method}`){where}",
                  "", "```json", json.dumps(section, indent=2), "```"]
    if st.get("linear_alpha_search"):
        mt = st.get("linear_alpha_match", {})
        lines += ["", f"Linear baseline alpha: bisection with `{mt.get('attack')}` {mt.get('options')} on "
                      f"{mt.get('n')} images against {mt.get('card', 'MixedNUTS')}'s "
                      f"{100 * mt.get('target_robust_accuracy', mt.get('mixednuts_robust_accuracy', 0)):.2f}% "
                      "under that attack; robust accuracy per alpha tried: " + ", ".join(
            f"{t['alpha']:.2f} -> {100 * t['robust_accuracy']:.2f}%" for t in st["linear_alpha_search"])]
    for card in report.cards or [c]:
        lines += card.mixing_method.markdown_lines(report, card)
    if report.files:
        lines += ["", "## Plots", ""] + [f"![{f}]({f})" for f in report.files if f.endswith(".png")]
    prov = getattr(c, "provenance", {}) or {}
    lines += ["", f"Made by mixzoo {prov.get('mixzoo_version', '')} (card created {prov.get('created', '?')}); "
                  f"bench took {st.get('seconds') or 0:.0f} s on {st.get('device')}.",
              "", f"Run on: {machine_line(getattr(report, 'run', None))}."]
    return "\n".join(lines) + "\n"


def check_report_dir(out: Path) -> None:
    """Refuse, before any attack, a report directory :func:`write_report` would write into although it holds a
    ``report.json`` mixzoo did not write, or a FIFO, device, directory or link where one of its files goes
    (:func:`mixzoo.core.paths.check_output`)."""
    check_output(out, directory=True, files={name: json_with("models", "settings") if name == "report.json" else None
                                             for name in REPORT_FILES})


def write_report(report: Any, out: Path, *, plots: bool = True) -> list[Path]:
    """Write report.json, report.md, the PNG plots and the adversarial points into ``out``, all or none
    (:func:`mixzoo.core.cache.staged_directory`: files of an earlier report there that this one does not have are
    removed). Only renders: each card's method draws its figures from the report (``report.curve``, the card, and
    ``report.figure_data``, which the bench computed); nothing is attacked or computed here."""
    names: list[str] = []
    figure_data = list(getattr(report, "figure_data", None) or [])
    with staged_directory(out, REPORT_FILES) as stage:
        for index, card in enumerate(report.cards or [report.card]) if plots else ():
            data = figure_data[index] if index < len(figure_data) else None
            names += card.mixing_method.figures(report, card, stage, prefix="" if index == 0 else f"card{index + 1}-",
                                                data=data)
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


# ------------------------------------------------------------------------------------------------ terminal
def seconds_cell(m: Any, device: str | None = None) -> str:
    """Attack seconds, saying where they were spent (given the run's ``device``, as in the terminal: only when it
    is another) and whether this run read them from the cache."""
    where = (m.device or "?") if device is None else m.device if m.device != device else ""
    tags = [t for t in (where, "cached" if m.cached else "") if t]
    return f"{m.seconds:.0f}" + (f" ({', '.join(tags)})" if tags else "")


def ci_cell(value: float, ci: list[float], digits: int = 2) -> str:
    """``87.00 (84.8-89.0)``: a percentage with its 95 % interval, when the row has one."""
    return f"{100 * value:.{digits}f}" + (f" ({100 * ci[0]:.1f}-{100 * ci[1]:.1f})" if ci else "")


def comparison_lines(report: Any) -> list[str]:
    """One sentence per paired comparison of :meth:`Report.comparisons`."""
    lines = []
    for c in report.comparisons():
        a, b = c.get("a_label", c["a"]), c.get("b_label", c["b"])
        parts = []
        for what in ("clean", "robust"):
            d = c.get(what)
            if d:
                parts.append(f"{what} {100 * d['difference']:+.2f} points (95% CI {100 * d['low']:+.2f} to "
                             f"{100 * d['high']:+.2f}; right only for {a}: {d['a_only']}, only for the "
                             f"other: {d['b_only']})")
        if parts:
            lines.append(f"{a} - {b}, paired on the same {report.dataset['n']} images: "
                         + "; ".join(parts))
    return lines


def print_report(report: Any, *, to: Console | None = None) -> None:
    """The bench table in the terminal (or on the console ``to``), fitting 80 columns (report.md has the wide
    form)."""
    to = to or console
    settings = report.settings
    device = settings.get("device", "")
    low = settings.get("precision", "float32") != "float32"
    arithmetic = f", {settings['precision']}" if low else ""
    table = Table(title=f"{report.dataset['name']} evaluation, n={report.dataset['n']}: {settings['attack']} "
                        f"{settings['norm']} eps {eps_text(settings['eps'])} ({device}{arithmetic})"
                        f"{budget_text(settings)}",
                  box=box.SIMPLE_HEAD, pad_edge=False)
    columns = ("model", "clean % (95% CI)", "robust % (95% CI)", *(("breaks bf16/fp32",) if low else ()), "attack s")
    for col in columns:
        table.add_column(col, justify="left" if col == "model" else "right")
    for m in report.models:
        counts = bf16_counts(m.components)
        both = ((f"{counts[0]}/{counts[1]}+{counts[2]}" if counts else "-",) if low else ())
        table.add_row(row_label(m), ci_cell(m.clean_accuracy, m.clean_ci, digits=1),
                      ci_cell(m.robust_accuracy, m.robust_ci, digits=1), *both, seconds_cell(m, device))
    to.print(table)
    if note := screening_note(settings["attack"]):
        to.print(f"[bold yellow]{escape(settings['attack'])}: {escape(note)}", highlight=False)
    if low:
        how = "bfloat16 autocast" if settings["precision"] == "bf16" else "TF32 matrix products and convolutions"
        to.print(f"{settings['precision']}: the attacks ran under {how}; a break counts only when the "
                 "float32 classifier confirms it (breaks bf16/fp32: found in bf16 / confirmed in float32 + broken "
                 "when the component ran again in float32 on the dropped ones)", highlight=False)
    for line in comparison_lines(report):
        to.print(line, highlight=False)
    rows_of: dict[str, list[str]] = {}  # a warning several rows share is printed once, naming them
    for m in report.models:
        for w in m.warnings:
            rows_of.setdefault(w, []).append(row_label(m))
    for w, rows in rows_of.items():
        to.print(f"[yellow]warning ({escape(', '.join(rows))}): {escape(w)}")
    for note in report.notes:
        to.print(f"[yellow]note:[/yellow] {escape(note)}", highlight=False)
