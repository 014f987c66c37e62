"""``mixzoo verify --recheck N`` also recomputes each stand-alone component's outcomes (``own_outcomes``, what
RobustBench's ``autoattack_acc`` counts) on the examples it attacks again: an honest adaptive-strong report, whose
``autoattack-standard`` draws its randomness per batch, rechecks clean under any ``--batch-size``; one image's
stand-alone outcome flipped, with every figure and digest made to agree, passes the file and the saved points but
not the recheck (exit 1)."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pytest
import torch
from report_edits import reseal
from typer.testing import CliRunner

from mixzoo.attacks import runner
from mixzoo.cli import app
from mixzoo.core.record import RunRecord
from mixzoo.evaluation.bench import bench
from mixzoo.evaluation.recheck import own_differences, recheck_row, row_outcomes

N = 30
ALONE = "autoattack-standard"
STRONG = dict(attack="adaptive-strong", attack_options={"n_iter": 5, "n_queries": 50, "n_target_classes": 2},
              n=N, batch_size=15, eps=0.2, baseline=None, curve=None, plots=False, extra_attacks=False,
              progress=False, save_adversarial=True)


@pytest.fixture(scope="module")
def strong(digits_card, tmp_path_factory):
    root = tmp_path_factory.mktemp("recheck-own")
    bench(digits_card, out=root / "bench", cache_dir=root / "cache", **STRONG)
    return root / "bench"


def cli(*args):
    return CliRunner().invoke(app, ["verify", *map(str, args)])


def _alone(data):
    """The mixed row and its stand-alone component."""
    return next((m, c) for m in data["models"] for c in m["components"] if c["name"] == ALONE)


def test_an_honest_report_rechecks_its_stand_alone_outcomes_clean(strong):
    data = json.loads((strong / "report.json").read_text())
    row, comp = _alone(data)
    assert len(comp["own_outcomes"]) == N and comp["own_broken"] > 0
    res = cli(strong, "--recheck", N, "--batch-size", 7, "--json")  # the record's batches, not --batch-size's
    assert res.exit_code == 0, res.output
    rows = {r["name"]: r for r in json.loads(res.output)["rows"]}
    assert all(r["rechecked"] and not r["recheck_differs"] and r["own_differs"] == {} for r in rows.values())
    assert len(rows[row["name"]]["rechecked"]) == row["clean_outcomes"].count("1")  # every clean-correct image


def test_a_flipped_stand_alone_outcome_is_caught_by_the_recheck(strong, tmp_path):
    out = tmp_path / "bench"
    shutil.copytree(strong, out)
    data = json.loads((out / "report.json").read_text())
    row, comp = _alone(data)
    own = comp["own_outcomes"]
    broken = [i for i in range(N) if row["clean_outcomes"][i] == "1" and row["robust_outcomes"][i] == "0"]
    # a broken image called correct on its own (if its new breaks allow one fewer), else one more broken on its own
    ones = comp["own_broken"] > (comp["newly_broken"] or 0)
    i = next(i for i in broken if own[i] == ("0" if ones else "1"))
    comp["own_outcomes"] = own[:i] + ("1" if ones else "0") + own[i + 1:]
    comp["own_broken"] += -1 if ones else 1
    (out / "report.json").write_text(json.dumps(reseal(data)))
    assert cli(out).exit_code == 0  # the file and its saved points agree with the edit
    res = cli(out, "--recheck", N, "--json")
    assert res.exit_code == 1, res.output
    rows = {r["name"]: r for r in json.loads(res.output)["rows"]}
    assert rows[row["name"]]["own_differs"] == {ALONE: [i]} and not rows[row["name"]]["recheck_differs"]
    assert all(r["passed"] for name, r in rows.items() if name != row["name"])
    table = cli(out, "--recheck", N)
    assert table.exit_code == 1 and "1 stand-alone outcomes differ on recheck" in table.output, table.output
    assert f"1 of {ALONE} on its own" in table.output


def test_own_differences_maps_each_example_to_its_place_among_those_attacked():
    reported = [{"name": "a", "own_outcomes": "10110"}, {"name": "b"}, {"name": "c", "own_outcomes": "11111"}]
    again = [{"name": "a", "own_outcomes": "010"}, {"name": "b"}]  # examples 2, 3, 4 attacked again
    assert own_differences(reported, again, [2, 4], [0, 2]) == {"a": [2], "c": [2, 4]}  # c: not re-run at all
    assert own_differences(reported, [{"name": "a", "own_outcomes": "110"}, {"name": "c", "own_outcomes": "111"}],
                           [2, 4], [0, 2]) == {}


def test_the_recheck_attacks_the_records_whole_batches_and_compares_the_picked_examples(monkeypatch):
    """The first robust example (5) and the first broken one (2) of a row are attacked within their batches of the
    record's size 4 (examples 0..7); only they are compared: a robust outcome flipped at 2 and stand-alone
    outcomes flipped at 5 and at 1 (attacked, not picked) give 2 and 5."""
    clean, robust, own = "0011111111", "0000011001", "0011111111"
    again_robust, again_own = "0010011001", "0111101111"
    seen = []

    def fake(model, x, y, request):
        index = request.example_index.tolist()
        seen.append(index)
        return {"robust_correct": [again_robust[i] == "1" for i in index],
                "components": [{"name": "alone", "own_outcomes": "".join(again_own[i] for i in index)}]}

    monkeypatch.setattr(runner, "evaluate", fake)
    m = {"name": "row", "clean_outcomes": clean, "robust_outcomes": robust,
         "components": [{"name": "alone", "own_outcomes": own}]}
    got = recheck_row(m, row_outcomes(m, 10), None, None, SimpleNamespace(eps=0.1, norm="Linf"),
                      torch.zeros(10, 1, 2, 2),
                      torch.zeros(10, dtype=torch.long), 1, RunRecord(attack="apgd", batch_size=4))
    assert seen == [list(range(8))]
    assert got == ([2, 5], [2], {"alone": [5]})
