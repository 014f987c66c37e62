"""`make results` (benchmarks/make_results.py) reproduces the committed results page and result blocks byte for byte,
and every number there comes from the report named beside it."""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def make_results():
    spec = importlib.util.spec_from_file_location("make_results", ROOT / "benchmarks" / "make_results.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_results"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("make_results", None)


def test_committed_files_are_what_make_results_writes(make_results):
    outputs = make_results.outputs()
    assert make_results.PAGE in outputs and "README.md" in outputs
    stale = [rel for rel, data in outputs.items() if (ROOT / rel).read_bytes() != data]
    assert not stale, f"run `make results`: {stale} differ from what benchmarks/make_results.py generates"


def test_check_mode_agrees(make_results):
    assert make_results.main(["--check"]) == 0


def test_every_headline_report_is_committed_and_named_on_the_page(make_results):
    page = (ROOT / make_results.PAGE).read_text()
    for table in make_results.TABLES:
        assert f"## {table.title}" in page
        for source in table.sources:
            assert (ROOT / source.path).is_file(), source.path
            assert f"`{source.path}`" in page, source.path


def test_numbers_follow_the_reports(make_results, monkeypatch):
    """Change one robust accuracy in a loaded report: the page changes in that cell, so nothing is typed in."""
    load = make_results.load
    path = make_results.TABLES[0].sources[0].path
    report = load(path)
    mixed = next(m for m in report["models"] if m["kind"] == "mixednuts")

    def patched(p):
        r = load(p)
        if p == path:
            r = copy.deepcopy(r)
            next(m for m in r["models"] if m["kind"] == "mixednuts")["robust_accuracy"] = 0.123
        return r

    before = make_results.outputs()[make_results.PAGE].decode()
    monkeypatch.setattr(make_results, "load", patched)
    after = make_results.outputs()[make_results.PAGE].decode()
    assert before != after
    assert "**12.3 (" in after and f"**{100 * mixed['robust_accuracy']:.1f} (" in before


def test_every_percentage_on_the_page_is_in_a_report(make_results):
    """Each 'x.y (lo-hi)' cell is an accuracy of some row of the page's reports (Wilson interval from its counts)."""
    page = (ROOT / make_results.PAGE).read_text()
    values = set()
    for table in make_results.TABLES:
        for source in table.sources:
            for m in json.loads((ROOT / source.path).read_text())["models"]:
                for key in ("clean_accuracy", "robust_accuracy"):
                    values.add(make_results.with_interval(m[key], m["n"]))
    values |= gate_values(make_results)
    cells = re.findall(r"\d+\.\d \(\d+\.\d-\d+\.\d\)", page)
    assert cells and set(cells) <= values


def gate_values(make_results) -> set[str]:
    """The gate-logit section's cells, counted here from the files: clean and before on the lineage report's first
    n images, after = before minus the union of every pass's new breaks."""
    folder = ROOT / make_results.GATE_DIR
    lineage = json.loads((ROOT / make_results.GATE_LINEAGE.path).read_text())
    summary = json.loads((folder / "summary.json").read_text())
    values = set()
    for short in {name.split(".", 1)[0] for name in summary}:
        runs = [json.loads((folder / f"{name}.json").read_text()) for name in summary
                if name.split(".", 1)[0] == short]
        n, card = runs[0]["n_images"], runs[0]["card"]
        row = next(m for m in lineage["models"] if str(m.get("card_path")).endswith(card))
        before = row["robust_outcomes"][:n].count("1")
        broken = {i for r in runs for i in r["new_breaks"]}
        for k in (row["clean_outcomes"][:n].count("1"), before, before - len(broken)):
            values.add(make_results.count_interval(k, n))
    rbc = next(m for m in lineage["models"] if m["kind"] == "rbc")
    for key in ("clean_outcomes", "robust_outcomes"):
        values.add(make_results.count_interval(rbc[key][:n].count("1"), n))
    return values


def test_gate_section_follows_the_pass_files(make_results, monkeypatch):
    """One more confirmed break in a pass file lowers that card's 'after' cell on the page and the method page."""
    load = make_results.load
    target = f"{make_results.GATE_DIR}/C.strong.json"
    first = load(f"{make_results.GATE_DIR}/C.json")
    survivor = next(s["index"] for s in load(target)["closest_survivors"])

    def patched(p):
        r = load(p)
        if p == target:
            r = copy.deepcopy(r)
            r["broken_by"][str(survivor)] = "gate-t"
            r["new_breaks"].append(survivor)
        return r

    before = make_results.outputs()
    monkeypatch.setattr(make_results, "load", patched)
    after = make_results.outputs()
    n, k = first["n_images"], first["robust_before"]
    broken = len(first["new_breaks"]) + len(load(target)["new_breaks"])
    old_cell, new_cell = (make_results.count_interval(k - b, n) for b in (broken, broken + 1))
    for rel in (make_results.PAGE, "docs/methods/adaptive-smoothing.md"):
        assert f"| {old_cell} |" in before[rel].decode() and f"| {new_cell} |" in after[rel].decode(), rel
    assert f"#{survivor} gate-t" in after[make_results.PAGE].decode()


def test_method_blocks_give_the_rbc_row_once_per_report(make_results):
    built = {t.key: make_results.build_table(t) for t in make_results.TABLES}
    block = make_results.SNIPPETS["method-adaptive-smoothing"](built)
    assert block.count("| RBC `fmnist-pgd`, same report |") == 1


def test_an_unknown_block_is_refused(make_results):
    built = {t.key: make_results.build_table(t) for t in make_results.TABLES}
    with pytest.raises(SystemExit, match="unknown results block"):
        make_results.fill_blocks("<!-- results:nope -->\n<!-- /results:nope -->", built, "x.md")
