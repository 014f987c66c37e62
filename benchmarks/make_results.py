"""Build the results page and every result block the README and the docs quote, from committed bench reports.

    make results                                   # = .venv/bin/python benchmarks/make_results.py
    .venv/bin/python benchmarks/make_results.py --check    # exit 1 when a generated file differs from the disk

Nothing here is typed in by hand: every accuracy is read from a ``report.json`` under ``benchmarks/results/`` and
printed beside that report's path, the commit it was measured at and the machine it ran on. The gate-logit section
(``GATE_DIR``) counts robust examples per card from the lineage report's per-example outcomes and the confirmed
breaks of each gate-logit pass file, each file named beside its numbers. The headline reports
are the ``TABLES`` below (one table per question, one column per attack where two reports of the same models give
two numbers). Where several reports measure the same card, the table's first source is the headline: the most
complete attack that was run on it.

Outputs:

* ``docs/results.md``: the results page (written whole);
* ``docs/assets/tradeoff.png``: a copy of ``FIGURE`` for the site;
* marked blocks in ``README.md`` and ``docs/**/*.md``: the text between ``<!-- results:NAME -->`` and
  ``<!-- /results:NAME -->`` is replaced by ``SNIPPETS[NAME]``. An unknown NAME is an error.

Running it twice gives the same bytes (``tests/test_results_page.py`` checks the committed files against it).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = "benchmarks/results"
PAGE = "docs/results.md"
FIGURE = f"{RESULTS}/mixednuts_fmnist/demo_adaptive_apgd_n200/tradeoff.png"
FIGURE_COPY = "docs/assets/tradeoff.png"
Z95 = 1.959963984540054  # the standard normal's 97.5 % quantile (as mixzoo.evaluation.stats)


@dataclass(frozen=True)
class Source:
    """One report: a column of a table."""

    path: str  # report.json, relative to the repository root
    column: str  # what the column measured, for its header
    machine: str = ""  # for reports without a run record only: the machine, as the note below recorded it
    recorded_in: str = ""  # that note
    loaded: str = ""  # what else ran on the machine while it was measured ("" : a quiet machine)


@dataclass(frozen=True)
class Table:
    key: str
    title: str
    about: str  # one line: what the table answers
    sources: tuple[Source, ...]  # the first is the headline


# The headline reports. Each line says what the report is; the first source of a table is its headline.
TABLES: tuple[Table, ...] = (
    Table(
        "every-method",
        "Every method of the family on the built-in Fashion-MNIST pair",
        "ABC `fmnist-std`, RBC `fmnist-pgd`, the first 1,000 evaluation images, L-inf eps 0.1: one report with a "
        "row per method, the full adaptive AutoAttack plus each card's declared attacks, worst case per example, "
        "every reported robust error confirmed by `mixzoo verify`.",
        (
            Source(f"{RESULTS}/every_method_fmnist_n1000/report/report.json",
                   "adaptive + declared attacks"),
            Source(f"{RESULTS}/mixednuts_fmnist/adaptive_apgd_n1000/report.json",
                   "adaptive-apgd"),
        ),
    ),
    Table(
        "demo",
        "The Fashion-MNIST card on 200 images",
        "The card `benchmarks/results/cards/fmnist_mixednuts.toml` on the first 200 evaluation images under the "
        "gradient half of the adaptive attack (`adaptive-apgd`), the trade-off curve on the same 200 images: "
        "`mixzoo bench benchmarks/results/cards/fmnist_mixednuts.toml --n 200 --attack adaptive-apgd` (`make "
        "demo` runs the same with a card it fits and a 100-image curve).",
        (Source(f"{RESULTS}/mixednuts_fmnist/demo_adaptive_apgd_n200/report.json", "adaptive-apgd",
                loaded="other jobs shared the two cores"),),
    ),
    Table(
        "quickstart",
        "Quick start: the digits pair",
        "`digits-std` + `digits-pgd` (scikit-learn digits, L-inf eps 0.2), MixedNUTS at beta 0.95, the "
        "first 200 evaluation images, `adaptive-apgd`: the README's quick start.",
        (Source(f"{RESULTS}/quickstart_digits/bench/report.json", "adaptive-apgd"),),
    ),
)


# ------------------------------------------------------------------------------------------------ reading reports

def load(path: str) -> dict:
    return json.loads((ROOT / path).read_text())


def wilson(k: int, n: int) -> tuple[float, float]:
    p, z2 = k / n, Z95 * Z95
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return (0.0 if k == 0 else max(0.0, centre - half)), (1.0 if k == n else min(1.0, centre + half))


def pct(x: float) -> str:
    return f"{100 * x:.1f}"


def with_interval(acc: float, n: int) -> str:
    return count_interval(round(acc * n), n)


def count_interval(k: int, n: int) -> str:
    lo, hi = wilson(k, n)
    return f"{pct(k / n)} ({pct(lo)}-{pct(hi)})"


def method_of(model: dict) -> str:
    return model.get("method") or re.sub(r"-\d+$", "", model["kind"])


def row_label(model: dict) -> str:
    """The same model in two reports gets the same label (the table's row)."""
    kind = model["kind"]
    if kind == "abc":
        return f"ABC `{model['name']}`"
    if kind == "rbc":
        return f"RBC `{model['name']}`"
    from mixzoo.core.labels import row_label as mixzoo_label

    method = method_of(model)
    if method == "mixednuts":  # as mixzoo labels the row in the terminal and report.md
        return mixzoo_label({**model, "name": "MixedNUTS"})
    if method == "linear":
        return mixzoo_label({**model, "name": "Linear mix"})
    return model["name"]


ROW_ORDER = {"abc": 0, "rbc": 1, "linear": 2, "mixednuts": 3}


def short_commit(report: dict) -> str:
    run = report.get("run") or {}
    commit = run.get("git_commit")
    if not commit:
        return "commit not recorded"
    return f"commit `{commit[:7]}`" + (" with local changes" if run.get("source_modified") else "")


def machine_words(m: dict) -> list[str]:
    """A run record's ``machine`` entry in words: CPU (vector extension), cores, torch threads, GPU."""
    threads = m.get("torch_threads")
    return [p for p in [f"{m.get('cpu', 'CPU')} ({m['cpu_capability']})" if m.get("cpu_capability")
                        else m.get("cpu", "CPU"),
                        f"{m['cpu_count']} cores" if m.get("cpu_count") else "",
                        f"{threads} torch thread{'s' if threads != 1 else ''}" if threads else "",
                        m.get("gpu") or ""] if p]


def machine(report: dict, source: Source) -> str:
    run = report.get("run") or {}
    m = run.get("machine")
    if m:
        parts = machine_words(m)
        world = report["settings"].get("world_size")
        if world and world > 1:
            parts.append(f"{world} processes")
        return ", ".join(parts)
    return source.machine or f"device `{report['settings'].get('device', '?')}`, machine not recorded"


def machine_source(report: dict, source: Source) -> str:
    if not (report.get("run") or {}).get("machine") and source.recorded_in:
        return f"{machine(report, source)} (machine recorded in `{source.recorded_in}`)"
    return machine(report, source)


def created(report: dict) -> str:
    run = report.get("run") or {}
    return run.get("created", "")[:10]


def describe(report: dict, source: Source) -> str:
    s, d = report["settings"], report["dataset"]
    bits = [f"`{source.path}`", f"attack `{s['attack']}`" + (" with each card's declared attacks"
                                                             if s.get("extra_attacks") else ""),
            f"{d['n']:,} {d['name']} {d['split']} images", f"{s['norm'].replace('inf', '-inf')} eps {s['eps']:g}",
            short_commit(report), machine_source(report, source) + (f" ({source.loaded})" if source.loaded else "")]
    when = created(report)
    if when:
        bits.append(when)
    return "; ".join(bits)


# ------------------------------------------------------------------------------------------------ building tables

@dataclass
class Built:
    table: Table
    reports: list[dict]
    rows: list[tuple[str, list[dict | None]]]  # label, the model of each source (None: not in that report)


def build_table(table: Table) -> Built:
    reports = [load(s.path) for s in table.sources]
    labels: dict[str, tuple[int, int]] = {}
    for j, rep in enumerate(reports):
        for i, m in enumerate(rep["models"]):
            labels.setdefault(row_label(m), (ROW_ORDER.get(method_of(m) if m["kind"] not in ("abc", "rbc")
                                                          else m["kind"], 4), j * 100 + i))
    rows = []
    for label in sorted(labels, key=labels.get):
        cells = [next((m for m in rep["models"] if row_label(m) == label), None) for rep in reports]
        rows.append((label, cells))
    return Built(table, reports, rows)


def markdown_table(b: Built, *, sources: bool = True) -> str:
    cols = [f"robust %, {s.column} [{i + 1}]" for i, s in enumerate(b.table.sources)]
    lines = ["| model | clean % [1] | " + " | ".join(cols) + " |", "|---" * (2 + len(cols)) + "|"]
    for label, cells in b.rows:
        first = next(c for c in cells if c is not None)
        head = cells[0] if cells[0] is not None else first
        clean = with_interval(head["clean_accuracy"], head["n"]) if cells[0] is not None else "-"
        robust = [with_interval(c["robust_accuracy"], c["n"]) if c is not None else "-" for c in cells]
        if cells[0] is not None:
            robust[0] = f"**{robust[0]}**"
        lines.append(f"| {label} | {clean} | " + " | ".join(robust) + " |")
    out = "\n".join(lines) + "\n"
    if sources:
        out += "\n" + "\n".join(f"- [{i + 1}] {describe(r, s)}." for i, (r, s) in
                                enumerate(zip(b.reports, b.table.sources, strict=True))) + "\n"
    return out


def paired(b: Built) -> str:
    rep = b.reports[0]
    comps = [c for c in rep.get("comparisons") or [] if c.get("b_kind") == "rbc"]
    if not comps:
        return ""
    by_name = {m["name"]: m for m in rep["models"]}
    lines = ["Paired against the RBC on the same images (difference in points, Newcombe's 95 % interval; "
             "from [1]):", ""]
    for c in comps:
        label = row_label(by_name[c["a"]]) if c["a"] in by_name else c["a"]
        parts = []
        for what in ("clean", "robust"):
            d = c[what]
            parts.append(f"{what} {100 * d['difference']:+.1f} ({100 * d['low']:+.1f} to {100 * d['high']:+.1f})")
        lines.append(f"- {label}: " + ", ".join(parts))
    return "\n".join(lines) + "\n"


def warnings(b: Built) -> str:
    rep = b.reports[0]
    lines = [f"- {row_label(m)}: {w}" for m in rep["models"] for w in m.get("warnings") or []]
    if not lines:
        return ""
    return "Warnings the report [1] carries:\n\n" + "\n".join(lines) + "\n"


def older_code(b: Built) -> str:
    """A note under a table whose reports were made by other code than today's attacks, runner and methods
    (:func:`mixzoo.evaluation.versions.stale_code`): their numbers stand as measured, a re-run may differ."""
    from mixzoo.evaluation.versions import stale_code

    lines = [f"- [{i}] was made by older code ({'; '.join(why)}): a re-run with today's code may give other numbers;"
             " `benchmarks/gpu_checks.sh` step 8 re-runs it on a GPU (1,000 images)."
             for i, rep in enumerate(b.reports, 1) if (why := stale_code(rep))]
    return "\n".join(lines) + "\n" if lines else ""


def seconds(report: dict) -> float:
    return float(report["settings"]["seconds"])


def duration(s: float) -> str:
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


# ------------------------------------------------------------------------------------------------ gate-logit attacks

# The re-measurement of the learned-gate cards with their declared `gate-logit` attack
# (benchmarks/gate_attacks_remeasure.py): one JSON per card and pass, named CARD.json or CARD.PASS.json and listed in
# summary.json; "before" is the lineage report's per-example outcome on the same first n images.
GATE_DIR = f"{RESULTS}/gate_attacks_fmnist_n500"
GATE_LINEAGE = Source(f"{RESULTS}/every_method_fmnist_n1000/report/report.json", "adaptive + declared attacks")
GATE_NOTE = "benchmarks/gate_attacks.md"
GATE_SHARED = "shared with other jobs"  # what the run records do not hold; checked to stand in GATE_NOTE
N_SURVIVORS = 5


@dataclass
class GateCard:
    """One card's worst case over the lineage report and every gate-logit pass on it."""

    label: str  # the lineage report's row label
    card: str  # the card file the passes attacked
    method: str
    n: int  # the first n evaluation images
    clean: int  # correct without attack, on those n (lineage report)
    before: int  # robust under the lineage report's attacks, on those n
    breaks: dict[int, tuple[str, str]]  # example -> (component, pass file) for every confirmed new break
    components: dict[str, int]  # new breaks per component, over every pass
    excluded: list[tuple[str, int, int, float]]  # (pass file, excluded, attacked, RBC-margin threshold)
    survivors: list[tuple[int, float, str]]  # (example, smallest mixture margin, pass file), closest first
    passes: list[tuple[str, dict]]  # (pass file, its JSON), the first pass first

    @property
    def after(self) -> int:
        return self.before - len(self.breaks)


def gate_cards() -> list[GateCard]:
    """Every card of :data:`GATE_DIR`, in the lineage report's row order. A pass whose breaks were not all
    confirmed, or a 'before' that disagrees with the lineage report, is an error."""
    summary = load(f"{GATE_DIR}/summary.json")
    lineage = load(GATE_LINEAGE.path)
    by_card: dict[str, list[str]] = {}
    for name in summary:
        by_card.setdefault(name.split(".", 1)[0], []).append(name)
    cards = []
    for short, names in by_card.items():
        if short not in names:
            raise SystemExit(f"{GATE_DIR}/summary.json: card {short!r} has passes but no first pass")
        for name in names:
            if not summary[name].get("confirmed"):
                raise SystemExit(f"{GATE_DIR}/summary.json: the breaks of {name!r} are not all confirmed")
        passes = sorted(((f"{GATE_DIR}/{name}.json", load(f"{GATE_DIR}/{name}.json")) for name in names),
                        key=lambda x: (Path(x[0]).stem != short, x[1]["machine"].get("created", "")))
        first = passes[0][1]
        card, n = first["card"], first["n_images"]
        rows = [m for m in lineage["models"]
                if (m.get("card_path") or "") == card or (m.get("card_path") or "").endswith("/" + card)]
        if len(rows) != 1:
            raise SystemExit(f"{GATE_LINEAGE.path}: {len(rows)} rows for the card {card!r}")
        row = rows[0]
        robust = {i for i, c in enumerate(row["robust_outcomes"][:n]) if c == "1"}
        if first["robust_before"] != len(robust):
            raise SystemExit(f"{passes[0][0]}: robust_before {first['robust_before']} but {GATE_LINEAGE.path} "
                             f"counts {len(robust)} robust among the first {n} images")
        breaks: dict[int, tuple[str, str]] = {}
        components: dict[str, int] = {}
        margins: dict[int, tuple[float, str]] = {}
        excluded = []
        for path, p in passes:
            if p["card"] != card or p["n_images"] != n:
                raise SystemExit(f"{path}: another card or image count than {passes[0][0]}")
            for comp in p["components"]:
                components.setdefault(comp, 0)
            for i, comp in p["broken_by"].items():
                if int(i) not in robust:
                    raise SystemExit(f"{path}: example {i} is a new break but the lineage report counts it broken")
                breaks.setdefault(int(i), (comp, path))
            for s in p["closest_survivors"]:
                if s["index"] not in margins or s["mixture_margin"] < margins[s["index"]][0]:
                    margins[s["index"]] = (s["mixture_margin"], path)
            if p.get("screen_excluded"):
                excluded.append((path, p["screen_excluded"], p["attacked"], p["rbc_margin_threshold"]))
        for comp, _ in breaks.values():
            components[comp] = components.get(comp, 0) + 1
        survivors = sorted((m, i, path) for i, (m, path) in margins.items() if i not in breaks)[:N_SURVIVORS]
        cards.append(GateCard(row_label(row), card, method_of(row), n, row["clean_outcomes"][:n].count("1"),
                              len(robust), dict(sorted(breaks.items())), components, excluded,
                              [(i, m, path) for m, i, path in survivors], passes))
    order = {m["name"]: k for k, m in enumerate(lineage["models"])}
    return sorted(cards, key=lambda c: order.get(c.label, len(order)))


def run_machine(run: dict) -> str:
    """A gate pass's run record's machine, in :func:`machine`'s words."""
    m = run.get("machine")
    return ", ".join(machine_words(m)) if m else "machine not recorded"


def run_commit(run: dict) -> str:
    return short_commit({"run": run})


def gate_snippet(method: str | None = None) -> Callable[[dict[str, Built]], str]:
    """The gate-logit re-measurement of every card of ``method`` (all cards: None): before and after, per card.
    [L] is the lineage report, [G] the gate-logit passes (letters, so as not to clash with a page's numbered
    references)."""
    def make(built: dict[str, Built]) -> str:
        cards = [c for c in gate_cards() if method is None or c.method == method]
        lineage = load(GATE_LINEAGE.path)
        note = (ROOT / GATE_NOTE).read_text()
        if GATE_SHARED not in note:
            raise SystemExit(f"{GATE_NOTE} no longer says the machine was {GATE_SHARED!r}: update GATE_SHARED")
        n = cards[0].n
        lines = ["| card | images | clean % [L] | robust % before [L] | robust % after `gate-logit` [L, G] | "
                 "new breaks by component [G] | closest survivors: mixture margin [G] |",
                 "|---|---|---|---|---|---|---|"]
        for c in cards:
            comps = ", ".join(f"{k} {v}" for k, v in c.components.items())
            near = ", ".join(f"#{i} {m:.4f}" for i, m, _ in c.survivors) or "none"
            lines.append(f"| {c.label} | {c.n:,} | {count_interval(c.clean, c.n)} | "
                         f"{count_interval(c.before, c.n)} | {count_interval(c.after, c.n)} | "
                         f"{len(c.breaks)}: {comps} | {near} |")
        rbc = next(m for m in lineage["models"] if m["kind"] == "rbc")
        lines.append(f"| {row_label(rbc)}, same report | {n:,} | "
                     f"{count_interval(rbc['clean_outcomes'][:n].count('1'), n)} | "
                     f"{count_interval(rbc['robust_outcomes'][:n].count('1'), n)} | - (no gate) | - | - |")
        machines = sorted({run_machine(p["machine"]) for c in cards for _, p in c.passes})
        out = ["\n".join(lines), "",
               "'Before' is the worst case over the attacks of [L] on its first "
               f"{n:,} images; 'after' adds every break the gate-logit passes [G] found, each confirmed in a fresh "
               "process (strictly inside the eps-ball, in float32 and float64). Robust accuracies are upper bounds, "
               "with 95 % Wilson intervals; the closest survivors (the mixture's smallest probability margin the "
               "gate attacks reached) are where a stronger attack is most likely to break one more.", "",
               f"- [L] {describe(lineage, GATE_LINEAGE)}."]
        for c in cards:
            runs = ", ".join(f"`{path}` ({run_commit(p['machine'])})" for path, p in c.passes)
            bits = [f"- [G] {c.label}, card `{c.card}`, one file per pass: {runs}"]
            for path, _ in c.passes:
                found = [f"#{i} {comp}" for i, (comp, where) in c.breaks.items() if where == path]
                closest = [f"#{i}" for i, _, where in c.survivors if where == path]
                if found or closest:
                    bits.append(f"`{Path(path).name}`: " + ", ".join(
                        ([f"new breaks {', '.join(found)}"] if found else [])
                        + ([f"closest margins of {', '.join(closest)}"] if closest else [])))
            for path, k, attacked, thr in c.excluded:
                bits.append(f"in `{Path(path).name}` the RBC-margin screen (threshold {thr:.4f}) kept {k} of "
                            f"{attacked} examples from the gate components, an attack result, not a certificate")
            out.append("; ".join(bits) + ".")
        out.append(f"- Machine of [G]: {'; '.join(machines)}, {GATE_SHARED} (as recorded in `{GATE_NOTE}`).")
        return "\n".join(out) + "\n"
    return make


def adaptive_smoothing_c_bound(built: dict[str, Built]) -> str:
    """The 1,000-image figure of adaptive smoothing's card C beside what `gate-logit` found on its first images."""
    c = next(c for c in gate_cards() if c.card.endswith("/fmnist-adaptive-smoothing-c.toml"))
    rep = load(GATE_LINEAGE.path)
    row = next(m for m in rep["models"] if row_label(m) == c.label)
    total, robust = row["n"], row["robust_outcomes"].count("1")
    return (f"On the {total:,} images of the table above card C is {pct(robust / total)} % robust "
            f"({robust:,} of {total:,}). Read that as an upper bound: on the first {c.n:,} of those images the "
            f"`gate-logit` attack lowers C from {pct(c.before / c.n)} % to {pct(c.after / c.n)} % "
            f"({len(c.breaks)} new breaks, table below), so at most {robust - len(c.breaks):,} of the {total:,} "
            f"({pct((robust - len(c.breaks)) / total)} %) are robust; the other {total - c.n:,} images have not "
            "been attacked through the gate.\n")


# ------------------------------------------------------------------------------------------------ outputs

def results_page(built: dict[str, Built]) -> str:
    parts = [
        "# Results",
        "",
        "<!-- Generated by `make results` (benchmarks/make_results.py) from the reports named below; "
        "do not edit by hand. -->",
        "",
        "Every number on this page is read from a committed `report.json`; the reference under each table gives "
        "its path, the commit it was measured at and the machine. Accuracies are percentages with a 95 % Wilson "
        "interval from the counts; the robust accuracy of a headline report is in **bold**. Robust accuracies are "
        "upper bounds: an attack failed, nothing more. `mixzoo verify` re-checks a report's saved adversarial "
        "points with the code you have; how each table was chosen is in `benchmarks/make_results.py`.",
        "",
        "![Clean against robust accuracy of MixedNUTS and the linear mix on the built-in pair](assets/tradeoff.png)",
        "",
        f"Trade-off curve (MixedNUTS over beta, the linear mix over alpha; 200 images, each point under the "
        f"screening attack `fast`) from `{FIGURE}`.",
        "",
    ]
    for b in built.values():
        parts += [f"## {b.table.title}", "", b.table.about, "", markdown_table(b).rstrip("\n"), ""]
        for extra in (older_code(b), paired(b), warnings(b)):
            if extra:
                parts += [extra.rstrip("\n"), ""]
        if b.table.sources[0].path == GATE_LINEAGE.path:
            parts += ["## Attacks through the gate's logit", "",
                      "The learned gates of the table above (adaptive smoothing's mixing network, the "
                      "`local-smoothing-adaptive` policy) re-attacked with the `gate-logit` attack their methods "
                      "declare, on the first images of the same report: APGD on the loss minus mu times the gate's "
                      "logit, then a refinement toward the decision boundary ([Adaptive smoothing]"
                      "(methods/adaptive-smoothing.md#attacks-through-the-gates-logit)).", "",
                      gate_snippet()(built).rstrip("\n"), ""]
    parts += ["## Other measurements", "",
              "Speed, parity with AutoAttack, certified radii, the choice of the RBC and the other investigations "
              "have their own notes, listed in `benchmarks/README.md`.", ""]
    return "\n".join(parts)


def model_row(b: Built, method: str) -> list[dict]:
    return [m for m in b.reports[0]["models"] if m["kind"] not in ("abc", "rbc") and method_of(m) == method]


def method_snippet(method: str) -> Callable[[dict[str, Built]], str]:
    """Every row of ``method`` in each table's headline report, then that report's RBC row (once per report)."""
    def make(built: dict[str, Built]) -> str:
        lines = ["| row | clean % | robust % | attack | images | report |", "|---|---|---|---|---|---|"]
        for b in built.values():
            rep, src = b.reports[0], b.table.sources[0]
            rows = [(m, row_label(m)) for m in model_row(b, method)]
            if not rows:
                continue
            rbc = next(x for x in rep["models"] if x["kind"] == "rbc")
            for row, label in [*rows, (rbc, f"{row_label(rbc)}, same report")]:
                lines.append(f"| {label} | {with_interval(row['clean_accuracy'], row['n'])} | "
                             f"{with_interval(row['robust_accuracy'], row['n'])} | {src.column} | "
                             f"{row['n']:,} | `{src.path}` ({short_commit(rep)}) |")
        return "\n".join(lines) + "\n\nMachines and commits: [Results](../results.md).\n"
    return make


def readme_headline(built: dict[str, Built]) -> str:
    b = built["every-method"]
    rep, src = b.reports[0], b.table.sources[0]
    rows = [m for m in rep["models"] if m["kind"] in ("abc", "rbc") or method_of(m) in ("mixednuts", "linear")]
    lines = ["| model | clean % | robust % |", "|---|---|---|"]
    for m in rows:
        lines.append(f"| {row_label(m)} | {pct(m['clean_accuracy'])} | {pct(m['robust_accuracy'])} |")
    return "\n".join(lines) + f"\n\nFrom {describe(rep, src)}.\n"


def readme_quickstart(built: dict[str, Built]) -> str:
    b = built["quickstart"]
    rep, src = b.reports[0], b.table.sources[0]
    lines = ["| model | clean % | robust % (adaptive-apgd) |", "|---|---|---|"]
    for m in rep["models"]:
        lines.append(f"| {row_label(m)} | {pct(m['clean_accuracy'])} | {pct(m['robust_accuracy'])} |")
    return "\n".join(lines) + f"\n\nFrom {describe(rep, src)}.\n"


def readme_cost(built: dict[str, Built]) -> str:
    b = built["demo"]
    rep, src = b.reports[0], b.table.sources[0]
    curve = rep["settings"]["components"]["curve"]
    return (f"`mixzoo bench --attack adaptive-apgd` of the Fashion-MNIST card on 200 images (the four rows, the "
            f"matched baseline's alpha search and a {len(rep['curve']['mixednuts']) + len(rep['curve']['linear'])}"
            f"-point trade-off curve under `{curve['attack']}`) took {duration(seconds(rep))} on "
            f"{machine(rep, src)}, {src.loaded} (`{src.path}`).\n")


SNIPPETS: dict[str, Callable[[dict[str, Built]], str]] = {
    "readme-headline": readme_headline,
    "readme-quickstart": readme_quickstart,
    "readme-cost": readme_cost,
    "method-mixednuts": method_snippet("mixednuts"),
    "method-linear": method_snippet("linear"),
    "method-adaptive-smoothing": method_snippet("adaptive-smoothing"),
    "method-local-smoothing": method_snippet("local-smoothing-adaptive"),
    "gate-attacks": gate_snippet(),
    "gate-attacks-adaptive-smoothing": gate_snippet("adaptive-smoothing"),
    "gate-attacks-local-smoothing": gate_snippet("local-smoothing-adaptive"),
    "adaptive-smoothing-c-bound": adaptive_smoothing_c_bound,
}

BLOCK = re.compile(r"(<!-- results:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /results:(?P=name) -->)", re.S)


def fill_blocks(text: str, built: dict[str, Built], where: str) -> str:
    def sub(match: re.Match) -> str:
        name = match["name"]
        if name not in SNIPPETS:
            raise SystemExit(f"{where}: unknown results block {name!r} (known: {', '.join(SNIPPETS)})")
        return match.group(1) + SNIPPETS[name](built) + match.group(4)
    return BLOCK.sub(sub, text)


def outputs() -> dict[str, bytes]:
    """Every generated file: path relative to the repository root -> its bytes."""
    built = {t.key: build_table(t) for t in TABLES}
    out: dict[str, bytes] = {PAGE: results_page(built).encode(), FIGURE_COPY: (ROOT / FIGURE).read_bytes()}
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        rel = path.relative_to(ROOT).as_posix()
        if rel == PAGE:
            continue
        text = path.read_text()
        if "<!-- results:" in text:
            out[rel] = fill_blocks(text, built, rel).encode()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the files on disk; exit 1 on a difference")
    args = ap.parse_args(argv)
    stale = []
    for rel, data in outputs().items():
        path = ROOT / rel
        if path.exists() and path.read_bytes() == data:
            continue
        if args.check:
            stale.append(rel)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            print(f"wrote {rel}")
    if stale:
        print("out of date (run `make results`): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
