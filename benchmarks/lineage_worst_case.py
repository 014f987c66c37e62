"""Worst case per example over two evaluations of the same card on the same images (the lineage bench).

The lineage bench (``benchmarks/results/every_method_fmnist_n1000/``) attacked every row with ``adaptive`` as it was
before its code version ``exact-apgd-1`` (which added AutoAttack's APGD-CE and APGD-T on the exact gradient for mixed
classifiers with ``forward_pair``). The parity run (``benchmarks/autoattack_parity.py``) attacked the
MixedNUTS card ``cards/fmnist_mixednuts.toml`` on the same 1,000 images with the current ``adaptive`` and kept each
example's outcome. An example is robust under the union of both attacks only if it is robust in both runs; this
script prints that worst case, and the paired differences (Newcombe) against the report's RBC row::

    python benchmarks/lineage_worst_case.py benchmarks/results/every_method_fmnist_n1000/report/report.json \
        benchmarks/results/autoattack_parity/fmnist_n1000_h100

Outcomes only are combined (no attack is run), so it takes a second on any machine.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mixzoo.core.errors import InputError, run_script
from mixzoo.evaluation.stats import paired_difference, wilson_interval


def _bits(text: str) -> list[bool]:
    return [c == "1" for c in text]


def parity_outcomes(run_dir: Path, attack: str) -> tuple[str, list[bool]]:
    """(card path, per-example robust outcomes of mixzoo's ``attack``) of a finished parity run's chunks."""
    summary = json.loads((run_dir / "parity.json").read_text())
    robust: list[bool] = []
    for chunk in sorted((run_dir / "chunks").glob("chunk_*.json")):
        evaluations = json.loads(chunk.read_text())["mixzoo"]
        if attack not in evaluations:
            raise InputError(f"{chunk}: no evaluation {attack!r} (it has {', '.join(evaluations)}); pass --attack")
        robust += [bool(r) for r in evaluations[attack]["robust"]]
    if len(robust) != summary["n"]:
        raise InputError(f"{run_dir}: chunks hold {len(robust)} outcomes, parity.json says n = {summary['n']}")
    return summary["card"], robust


def read_report(path: Path) -> dict:
    """A bench report.json with per-example outcomes, or a one-line error."""
    try:
        report = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise InputError(f"{path} is not JSON ({exc}); give the report.json that `mixzoo bench` wrote") from None
    if not isinstance(report, dict) or not isinstance(report.get("models"), list):
        raise InputError(f"{path} has no 'models' list; give the report.json that `mixzoo bench` wrote")
    return report


def worst_case(report: dict, card: str, other: list[bool]) -> dict:
    """The report's row for ``card`` with its robust outcomes AND-ed with ``other`` (same images, same order)."""
    rows = [m for m in report["models"] if m.get("card_path") == card]
    if len(rows) != 1:
        raise InputError(f"the report has {len(rows)} rows for card {card!r}; bench that card first")
    row = rows[0]
    mine = _bits(row["robust_outcomes"])
    if len(mine) != len(other):
        raise InputError(f"the report attacked {len(mine)} images, the other run {len(other)}: use the same --n-images")
    both = [a and b for a, b in zip(mine, other, strict=True)]
    rbc = _bits(next(m for m in report["models"] if m["kind"] == "rbc")["robust_outcomes"])
    k, n = sum(both), len(both)
    return {"row": row["name"], "report_robust": sum(mine), "other_robust": sum(other), "worst_case_robust": k,
            "n": n, "worst_case_ci": wilson_interval(k, n),
            "broken_only_by_other": [i for i, (a, b) in enumerate(zip(mine, other, strict=True)) if a and not b],
            "broken_only_by_report": [i for i, (a, b) in enumerate(zip(mine, other, strict=True)) if b and not a],
            "minus_rbc": paired_difference(both, rbc).to_dict()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path, help="a bench report.json with per-example outcomes")
    parser.add_argument("parity_run", type=Path, help="a benchmarks/autoattack_parity.py output folder")
    parser.add_argument("--attack", default="adaptive@exact-apgd-1", help="mixzoo's evaluation in the parity run")
    args = parser.parse_args()
    for path in (args.report, args.parity_run / "parity.json"):
        if not path.is_file():
            raise InputError(f"{path} does not exist; give a bench report.json and a parity run's folder")
    card, other = parity_outcomes(args.parity_run, args.attack)
    print(json.dumps(worst_case(read_report(args.report), card, other), indent=1))


if __name__ == "__main__":
    run_script(main)
