"""Certificates against attacks on the same images: no example certified at the attack's radius may be broken.

    .venv/bin/python benchmarks/certified_vs_attacked.py DIR [DIR ...] [--out FILE]

Each ``DIR`` is a ``mixzoo bench --norm L2`` output (``report.json``) of a linear card whose RBC declares a
Lipschitz constant. For the RBC row and the mixture row, this certifies the same images (``mixzoo.certify``, the
card's alpha) at the bench's eps and counts: certified, robust under the attack, and certified but broken (must be
0: the attack stays in the eps-ball, which the certificate covers). Writes ``--out`` (default
``DIR/../certified_vs_attacked.json`` of the first ``DIR``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mixzoo.certify import certify
from mixzoo.core.cache import atomic_write_text
from mixzoo.core.card import MixCard
from mixzoo.core.machine import machine_line, run_record


def compare(report_dir: Path) -> dict:
    report = json.loads((report_dir / "report.json").read_text())
    rows = {m["kind"]: m for m in report["models"]}
    mixed = next(m for m in report["models"] if m["kind"] not in ("abc", "rbc"))
    card = MixCard.load(mixed["card_path"])
    eps, n = float(report["settings"]["eps"]), int(mixed["n"])
    if report["settings"]["norm"].lower() != "l2":
        raise SystemExit(f"{report_dir}: the certificate is l2; pass an L2 bench, not {report['settings']['norm']}")
    alpha = float(mixed["alpha"])
    result = certify(card, alphas=[alpha], n=n, radii=[eps], progress=False)
    out = {"report": str(report_dir / "report.json"), "card": mixed["card_path"], "eps": eps, "n": n, "alpha": alpha}
    for curve in result.curves:
        row = rows["rbc"] if curve.alpha == 1.0 else mixed
        robust = [ch == "1" for ch in row["robust_outcomes"]]
        cert = [r is not None and r >= eps for r in curve.radius]
        out["rbc" if curve.alpha == 1.0 else "mixture"] = {
            "certified": sum(cert) / n, "robust": sum(robust) / n,
            "certified_but_broken": sum(c and not r for c, r in zip(cert, robust, strict=True))}
    out["machine"] = machine_line(run_record("cpu"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    dirs = [Path(d) for d in args.dirs]
    rows = [compare(d) for d in dirs]
    for r in rows:
        print(json.dumps({k: r[k] for k in ("eps", "alpha", "rbc", "mixture")}), flush=True)
    out = Path(args.out) if args.out else dirs[0].parent / "certified_vs_attacked.json"
    atomic_write_text(out, json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
