"""What certify shows: the terminal and certify.md show the same radii, and the plot cites the theorem its bound
rests on (Thm 3.5 for a Lipschitz RBC, Thm A.2 for randomized smoothing)."""

from __future__ import annotations

import re

from typer.testing import CliRunner

from mixzoo.certify.report import CertCurve, CertifyResult, shown_radii
from mixzoo.cli import app


def _result(bound: str, n_radii: int = 26) -> CertifyResult:
    radii = [2.81 * k / (n_radii - 1) for k in range(n_radii)]
    curves = [CertCurve(label=f"alpha {a}", alpha=a, bound=bound, accuracy=[1 - r / 3 for r in radii],
                        clean_accuracy=0.9, radii=radii) for a in (1.0, 0.62)]
    return CertifyResult(settings={"rbc": "fmnist-lip100", "mode": "Lipschitz", "norm": "l2", "n": 10,
                                   "dataset": "fashion-mnist", "split": "evaluation", "abc": "fmnist-std",
                                   "alphas": [1.0, 0.62]}, curves=curves, notes=[], run={}, labels=[])


def test_shown_radii_span_the_grid():
    grid = [k / 25 for k in range(26)]
    assert shown_radii(grid) == [grid[0], grid[6], grid[12], grid[19], grid[25]]
    assert shown_radii(grid[:3]) == grid[:3]


def test_terminal_and_markdown_show_the_same_radii(tmp_path):
    result = _result("lipschitz")
    md_header = next(line for line in result.markdown().splitlines() if line.startswith("| classifier"))
    md_radii = [c.strip() for c in md_header.strip("|").split("|")][3:]
    terminal_header, _ = result.table_rows(result.certified_curves, bound=False)
    assert terminal_header[2:] == md_radii
    assert md_radii[-1] == f"{result.curves[0].radii[-1]:.3g}"  # the largest radius is shown


def test_the_plot_cites_the_theorem_of_its_bound():
    lipschitz = _result("lipschitz").figure().axes[0].get_title()
    assert "Thm 3.5" in lipschitz and "A.2" not in lipschitz
    smoothing = _result("smoothing").figure().axes[0].get_title()
    assert "Thm A.2" in smoothing and "3.5" not in smoothing


def test_cli_table_and_markdown_agree_on_digits(tmp_path):
    out = tmp_path / "cert"
    result = CliRunner().invoke(app, ["certify", "--rbc", "digits-pgd", "--norm", "linf", "--n", "20",
                                      "--out", str(out)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    md_header = next(line for line in (out / "certify.md").read_text().splitlines()
                     if line.startswith("| classifier"))
    md_radii = [c.strip() for c in md_header.strip("|").split("|")][3:]
    term_header = next(line for line in result.output.splitlines() if "clean %" in line)
    assert re.findall(r"[0-9.]+(?:e-?\d+)?", term_header.split("clean %", 1)[1]) == md_radii
