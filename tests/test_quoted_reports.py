"""A report the README or the docs quote (benchmarks/make_results.py's tables) must have been made by the code
versions of today's attacks, runner and methods (mixzoo.evaluation.versions): stale numbers cannot stay quoted."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from mixzoo.evaluation.versions import code_versions, stale_code

ROOT = Path(__file__).resolve().parents[1]

# Quoted reports written before reports recorded their code versions, each with what is known to differ today.
# Re-run the report's command (its report.md says which) and remove its line; a report not listed here must be
# current, and a listed one that has become current must leave the list.
KNOWN_STALE = {
    "benchmarks/results/every_method_fmnist_n1000/report/report.json":
        "adaptive had no code version at 34e8c08; today lean-1 (default components, early stopping)",
    "benchmarks/results/mixednuts_fmnist/adaptive_apgd_n1000/report.json": "bench-5 at b8fd5ae4; today bench-6",
}


@pytest.fixture(scope="module")
def quoted() -> list[str]:
    spec = importlib.util.spec_from_file_location("make_results", ROOT / "benchmarks" / "make_results.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_results"] = module
    try:
        spec.loader.exec_module(module)
        paths = {src.path for table in module.TABLES for src in table.sources} | {module.GATE_LINEAGE.path}
    finally:
        sys.modules.pop("make_results", None)
    return sorted(paths)


def test_every_quoted_report_was_made_by_todays_code(quoted):
    stale = {path: stale_code(json.loads((ROOT / path).read_text())) for path in quoted}
    stale = {path: why for path, why in stale.items() if why}
    new = {path: why for path, why in stale.items() if path not in KNOWN_STALE}
    assert not new, f"quoted reports made by other code than today's: re-run them, then `make results`: {new}"
    current = sorted(set(KNOWN_STALE) - set(stale))
    assert not current, f"these reports are current now: remove them from KNOWN_STALE: {current}"


def test_the_quick_start_report_is_current_and_uncached(quoted):
    path = "benchmarks/results/quickstart_digits/bench/report.json"
    assert path in quoted
    report = json.loads((ROOT / path).read_text())
    assert stale_code(report) == []
    assert not any(m["cached"] for m in report["models"]), "regenerate it with an empty cache (MIXZOO_CACHE=tmp)"


def test_a_changed_attack_or_method_version_makes_a_report_stale(monkeypatch):
    from mixzoo.core.plugins import lookup

    now = code_versions(["adaptive-apgd", "fast"], ["mixednuts", "linear"])
    report = {"settings": {"code_versions": now}}
    assert stale_code(report) == []
    monkeypatch.setattr(lookup("attack", "fast"), "code_version", "malt-99")
    assert stale_code(report) == [f"attack/fast: {now['attack/fast']} in the report, malt-99 today"]
    monkeypatch.setattr(type(lookup("method", "linear")), "code_version", "linear-2")
    assert "method/linear: None in the report, linear-2 today" in stale_code(report)
    assert stale_code({"settings": {}}) == ["no code versions recorded"]
    assert "attack/no-such-attack: no longer installed" in stale_code(
        {"settings": {"code_versions": {**now, "attack/no-such-attack": "1"}}})
