"""Compare two outputs of ``benchmarks/same_outcomes.sh``: every report's rows (per-example clean and robust
outcomes, components, alphas), curve, calibration and comparisons, and every card (its provenance aside); timings,
machine and cache flags are ignored. Prints each difference; exit status 1 when there is one."""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

IGNORED = {"seconds", "machine", "cached", "card_path", "warnings", "provenance", "created"}


def strip(x: object) -> object:
    if isinstance(x, dict):
        return {k: strip(v) for k, v in x.items() if k not in IGNORED and "second" not in k}
    if isinstance(x, list):
        return [strip(v) for v in x]
    return x


def main(a: Path, b: Path) -> int:
    bad = 0
    for rep in sorted(a.rglob("report.json")):
        other = b / rep.relative_to(a)
        if not other.exists():
            print(f"missing: {other}")
            bad += 1
            continue
        ra, rb = json.loads(rep.read_text()), json.loads(other.read_text())
        for key in ("models", "curve", "calibration", "comparisons"):
            if strip(ra.get(key)) != strip(rb.get(key)):
                print(f"differs: {rep.relative_to(a)} {key}")
                bad += 1
    for card in sorted(a.rglob("card.toml")):
        other = b / card.relative_to(a)
        ca = tomllib.loads(card.read_text())
        cb = tomllib.loads(other.read_text()) if other.exists() else {}
        if strip(ca) != strip(cb):
            print(f"differs: {card.relative_to(a)}")
            bad += 1
    print("identical" if not bad else f"{bad} differences")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
