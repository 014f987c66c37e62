"""``mixzoo verify``: the threat model comes from every part of the report (settings, rows, run record), which
must agree; unusable input is exit 2 with one line; ``--recheck N`` attacks examples again without the cache and
catches a forged but well-formed cache entry that the saved points cannot refute."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from mixzoo.cli import app
from mixzoo.core.errors import InputError
from mixzoo.evaluation.bench import ADVERSARIAL_FILE, bench

N = 30
BENCH = dict(attack="apgd", n=N, attack_options={"n_iter": 5, "n_target_classes": 2}, curve=None, plots=False,
             baseline=None, batch_size=15, progress=False, eps=0.2, save_adversarial=True)


@pytest.fixture(scope="module")
def made(digits_card, tmp_path_factory):
    root = tmp_path_factory.mktemp("recheck")
    report = bench(digits_card, out=root / "bench", cache_dir=root / "cache", **BENCH)
    return root, report


def cli(*args: str):
    return CliRunner().invoke(app, ["verify", *map(str, args)])


def copy(made, tmp_path):
    shutil.copytree(made[0] / "bench", tmp_path / "bench")
    return tmp_path / "bench"


def test_the_report_records_its_run_record(made):
    data = json.loads((made[0] / "bench" / "report.json").read_text())
    record = data["record"]
    assert record["eps"] == 0.2 and record["norm"] == "Linf" and record["attack"] == "apgd"
    assert record["n"] == N and record["examples"] == data["dataset"]["fingerprint"] and len(record["digest"]) == 64


def test_a_genuine_report_passes_the_recheck(made):
    res = cli(made[0] / "bench", "--recheck", 3, "--json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)["rows"]
    assert all(r["rechecked"] and not r["recheck_differs"] for r in rows)


def test_settings_eps_raised_over_the_rows_is_unusable_input(made, tmp_path):
    """settings.eps 1.0 while the rows say 0.2, and a saved point moved outside the 0.2 ball: exit 2, not
    'verified'."""
    out = copy(made, tmp_path)
    data = json.loads((out / "report.json").read_text())
    data["settings"]["eps"] = 1.0
    data.pop("record")  # a report without a record: the rows still hold the threat model
    (out / "report.json").write_text(json.dumps(data))
    points = load_file(out / ADVERSARIAL_FILE)
    assert len(points["abc.index"])
    points["abc.images"][0] = (points["abc.images"][0] + 0.6).clamp(0, 1)  # outside 0.2, inside 1.0
    save_file(points, out / ADVERSARIAL_FILE)
    res = cli(out)
    assert res.exit_code == 2, res.output
    assert "disagrees with itself on the threat model" in res.output and "eps=1" in res.output
    assert len(res.output.strip().splitlines()) == 1 and "Traceback" not in res.output


def test_a_saved_point_of_the_wrong_shape_is_exit_2_in_one_line(made, tmp_path):
    out = copy(made, tmp_path)
    points = load_file(out / ADVERSARIAL_FILE)
    points["abc.images"] = points["abc.images"].flatten(1)
    save_file(points, out / ADVERSARIAL_FILE)
    res = cli(out)
    assert res.exit_code == 2 and "abc.images has shape" in res.output, res.output
    assert len(res.output.strip().splitlines()) == 1


def test_a_forged_well_formed_cache_entry_passes_the_points_but_not_the_recheck(made, digits_card, tmp_path):
    """A cache entry edited to call every clean-correct example robust, its components' breaks set to none and its
    content digest recomputed (a forger who knows the format), its points emptied: the bench reports the forged
    row, the saved points cannot refute it, --recheck can (exit 1)."""
    from mixzoo.attacks.outcome_cache import outcome_digest

    cache = tmp_path / "cache"
    shutil.copytree(made[0] / "cache", cache)
    forged = 0
    for path in (cache / "bench").glob("*.json"):
        entry = json.loads(path.read_text())
        if len(entry["robust_correct"]) != N or entry["robust_correct"] == entry["clean_correct"]:
            continue
        entry["robust_correct"] = list(entry["clean_correct"])
        for component in entry["components"]:  # its breaks made to add up to the forged outcomes
            component["newly_broken"] = 0
        entry["digest"] = outcome_digest(entry, entry["key"])
        path.write_text(json.dumps(entry))
        save_file({"index": torch.zeros(0, dtype=torch.long), "images": torch.zeros(0, 1, 8, 8)},
                  path.with_suffix(".adv.safetensors"))
        forged += 1
    assert forged
    report = bench(digits_card, out=tmp_path / "bench", cache_dir=cache, **BENCH)
    abc = report.row("abc")
    assert abc.cached and abc.robust_accuracy == abc.clean_accuracy > made[1].row("abc").robust_accuracy
    plain = cli(tmp_path / "bench")
    assert plain.exit_code == 0, plain.output  # the points alone: "verified"
    res = cli(tmp_path / "bench", "--recheck", 3, "--json")
    assert res.exit_code == 1, res.output
    rows = {r["kind"]: r for r in json.loads(res.output)["rows"]}
    assert rows["abc"]["recheck_differs"] and rows["rbc"]["recheck_differs"]


def _edited(made, tmp_path, edit) -> Path:
    out = copy(made, tmp_path)
    data = json.loads((out / "report.json").read_text())
    text = edit(data)
    (out / "report.json").write_text(text if isinstance(text, str) else json.dumps(data))
    return out


def _one_line_exit_2(res, *needles):
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and "Traceback" not in res.output, res.output
    assert all(n in lines[0] for n in needles), lines[0]


def test_a_robust_figure_the_outcomes_do_not_give_is_exit_2_naming_the_row_and_both_values(made, tmp_path):
    def edit(data):
        row = next(m for m in data["models"] if m["robust_outcomes"].count("1") < m["clean_outcomes"].count("1"))
        row["robust_accuracy"] = row["clean_accuracy"]
        edit.row = row
    out = _edited(made, tmp_path, edit)
    row = edit.row
    given = row["robust_outcomes"].count("1") / N
    _one_line_exit_2(cli(out), str(out / "report.json"), f"row {row['name']!r}", f"robust_accuracy is"
                     f" {row['clean_accuracy']!r}", f"give {given!r}")


def test_a_figure_written_twice_is_exit_2(made, tmp_path):
    def edit(data):
        key = f'"robust_outcomes": "{data["models"][0]["robust_outcomes"]}"'
        return json.dumps(data).replace(key, f'"robust_accuracy": 0.0, {key}', 1)

    _one_line_exit_2(cli(_edited(made, tmp_path, edit)), "'robust_accuracy' appears twice")


def test_settings_moved_away_from_the_record_are_exit_2_even_for_the_recheck(made, tmp_path):
    """settings.attack changed to a 1-step pgd, the run record left alone: refused before anything is re-run."""
    def edit(data):
        data["settings"].update(attack="pgd", attack_options={"n_iter": 1})

    out = _edited(made, tmp_path, edit)
    _one_line_exit_2(cli(out, "--recheck", 3), "settings.attack is 'pgd'", "run record says 'apgd'")
    data = json.loads((made[0] / "bench" / "report.json").read_text())
    data["record"]["eps"] = 0.3  # the record edited alone: its digest no longer matches
    (out / "report.json").write_text(json.dumps(data))
    _one_line_exit_2(cli(out, "--recheck", 3), "not the digest of its fields")


def test_settings_budget_moved_away_from_the_record_is_exit_2(made, tmp_path):
    """settings.budget, which decides the extra attacks' options, is a copy of the run record's: edited alone it is
    refused by plain verify and by the recheck."""
    def edit(data):
        data["settings"]["budget"] = "quick"

    out = _edited(made, tmp_path, edit)
    for args in ((), ("--recheck", 3)):
        _one_line_exit_2(cli(out, *args), "settings.budget is 'quick'", "run record says 'standard'")


def test_the_recheck_attack_is_the_run_records(made):
    """Everything the recheck attacks with, extra attacks included, is the run record's; the report's settings are
    never read for it."""
    from mixzoo.core.card import MixCard
    from mixzoo.core.settings import RunSettings
    from mixzoo.evaluation.recheck import attack_record
    from mixzoo.evaluation.worst_case import declared_attacks

    path = made[0] / "bench" / "report.json"
    data = json.loads(path.read_text())
    data["settings"].update(attack="pgd", attack_options={"n_iter": 1}, seed=5, extra_attacks=False, budget="quick")
    r = attack_record(data, path, RunSettings(budget="strong"))
    record = data["record"]
    assert (r.attack, r.options(), r.seed, r.extra_attacks, r.budget, r.counts()) == (
        record["attack"], record["attack_options"], record["seed"], record["extra_attacks"], record["budget"],
        record["count_overrides"])
    assert r.batch_size == record["batch_size"] == BENCH["batch_size"] != RunSettings().batch_size  # its batches
    assert record["count_overrides"] == BENCH["attack_options"]  # the -O counts, which every component follows
    card = MixCard.from_dict(data["card"])
    row = next(m for m in data["models"] if m.get("card"))
    ran = {k.split(": ", 1)[1]: v["options"] for k, v in data["settings"]["components"].items()
           if k.startswith(f"{row['name']}: ")}
    assert ran and {e.name: o for e, o in declared_attacks(card, r.budget, r.counts())} == ran  # what the bench ran
    data.pop("record")
    with pytest.raises(InputError, match="has no run record"):
        attack_record(data, path, RunSettings())


def test_a_record_without_the_budget_verifies_but_is_not_rechecked(made, tmp_path):
    """A report of a mixzoo whose run record did not hold the budget (its digest of those fields): plain verify
    passes; the recheck refuses in one line rather than trust the settings' copy, unless it has no extra
    attacks."""
    from mixzoo.core.record import sha256_of
    from mixzoo.core.settings import RunSettings
    from mixzoo.evaluation.recheck import attack_record

    def edit(data):
        record = {k: v for k, v in data["record"].items() if k not in ("digest", "budget", "count_overrides")}
        data["record"] = {**record, "digest": sha256_of(record)}
        edit.data = data

    out = _edited(made, tmp_path, edit)
    assert cli(out).exit_code == 0
    _one_line_exit_2(cli(out, "--recheck", 3), "re-run `mixzoo bench` to record the budget")
    data = edit.data
    data["record"]["extra_attacks"] = False
    r = attack_record(data, out / "report.json", RunSettings())
    assert not r.extra_attacks and r.counts() == {}
