"""benchmarks/lineage_worst_case.py: an example is robust under two runs only if both left it robust."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from mixzoo.core.errors import InputError

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "lineage_worst_case.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("lineage_worst_case", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _parity_run(root: Path, chunks: list[list[int]], card: str = "card.toml") -> Path:
    (root / "chunks").mkdir(parents=True)
    for i, robust in enumerate(chunks):
        body = {"mixzoo": {"adaptive@exact-apgd-1": {"robust": robust}}}
        (root / "chunks" / f"chunk_{i:06d}.json").write_text(json.dumps(body))
    (root / "parity.json").write_text(json.dumps({"card": card, "n": sum(map(len, chunks))}))
    return root


REPORT = {"models": [{"name": "RBC", "kind": "rbc", "robust_outcomes": "110011"},
                     {"name": "mix", "kind": "mixednuts", "card_path": "card.toml", "robust_outcomes": "111010"}]}


def test_and_of_both_runs_in_chunk_order(script, tmp_path):
    card, other = script.parity_outcomes(_parity_run(tmp_path, [[1, 0, 1], [0, 1, 1]]), "adaptive@exact-apgd-1")
    assert card == "card.toml" and other == [True, False, True, False, True, True]
    out = script.worst_case(REPORT, card, other)
    assert out["worst_case_robust"] == 3  # 111010 and 101011: examples 0, 2 and 4
    assert out["report_robust"] == 4 and out["other_robust"] == 4
    assert out["broken_only_by_other"] == [1] and out["broken_only_by_report"] == [5]
    # against the RBC's 110011: the worst case 101010 wins example 2, loses 1 and 5
    assert out["minus_rbc"]["a_only"] == 1 and out["minus_rbc"]["b_only"] == 2


def test_mismatched_runs_are_one_line_errors(script, tmp_path):
    run = _parity_run(tmp_path / "a", [[1, 1]])
    _, other = script.parity_outcomes(run, "adaptive@exact-apgd-1")
    with pytest.raises(InputError, match="same --n-images"):
        script.worst_case(REPORT, "card.toml", other)
    with pytest.raises(InputError, match="0 rows for card"):
        script.worst_case(REPORT, "other.toml", other)
    with pytest.raises(InputError, match="pass --attack"):
        script.parity_outcomes(run, "adaptive")
    (run / "parity.json").write_text(json.dumps({"card": "card.toml", "n": 3}))
    with pytest.raises(InputError, match="n = 3"):
        script.parity_outcomes(run, "adaptive@exact-apgd-1")


def test_a_file_that_is_not_a_bench_report_is_refused(script, tmp_path):
    (tmp_path / "a.json").write_text("nope")
    (tmp_path / "b.json").write_text('{"x": 1}')
    with pytest.raises(InputError, match="not JSON"):
        script.read_report(tmp_path / "a.json")
    with pytest.raises(InputError, match="no 'models' list"):
        script.read_report(tmp_path / "b.json")
