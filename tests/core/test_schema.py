"""The schema layer: files nested without bound and fields of the wrong type are one-line errors naming the file
and the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mixzoo.core.card import MixCard
from mixzoo.core.errors import InputError


@pytest.mark.parametrize("suffix", [".toml", ".json"])
@pytest.mark.parametrize("depth", [100, 10_000])
def test_a_card_nested_very_deep_is_a_one_line_error(tmp_path, suffix, depth):
    deep = "[" * depth + "]" * depth
    path = tmp_path / f"card{suffix}"
    path.write_text(f'schema_version = 2\nmethod = "linear"\nnotes = {deep}\n' if suffix == ".toml" else
                    f'{{"schema_version": 2, "method": "linear", "notes": {deep}}}')
    with pytest.raises(InputError, match="nested deeper than") as err:
        MixCard.load(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_validate_names_the_file_and_the_field():
    from mixzoo.core.schema import ReportFile, validate

    row = {"name": "card", "kind": "mixednuts", "n": 10, "clean_accuracy": 0.9, "robust_accuracy": 0.5}
    report = {"settings": {"attack": "apgd", "eps": 0.1, "norm": "Linf"}, "models": [row]}
    assert validate(ReportFile, report, "r.json").models[0].n == 10
    for change, field in [({"n": "ten"}, "models[0].n"), ({"clean_accuracy": -3}, "models[0].clean_accuracy"),
                          ({"robust_accuracy": 0.95}, "models[0]"), ({"n": True}, "models[0].n"),
                          ({"components": "x"}, "models[0].components"), ({"n": 2 ** 63}, "models[0].n")]:
        with pytest.raises(InputError) as err:
            validate(ReportFile, {**report, "models": [{**row, **change}]}, "r.json")
        assert str(err.value).startswith(f"r.json: field '{field}") and "\n" not in str(err.value), str(err.value)
    with pytest.raises(InputError, match="r.json: missing field 'models\\[0\\].name'"):
        validate(ReportFile, {**report, "models": [{k: v for k, v in row.items() if k != "name"}]}, "r.json")


# ------------------------------------------------------------------------- a report's copies against their truth
REAL = Path(__file__).resolve().parents[2] / "benchmarks/results/mixednuts_fmnist/demo_adaptive_apgd_n200/report.json"


def _real() -> dict:
    return json.loads(REAL.read_text())


def _flip_first_broken(m: dict) -> None:
    i = next(i for i, (c, r) in enumerate(zip(m["clean_outcomes"], m["robust_outcomes"], strict=True)) if c > r)
    m["robust_outcomes"] = m["robust_outcomes"][:i] + "1" + m["robust_outcomes"][i + 1:]


# edit -> what the one line must name (the row or field and both values)
def _row(i: int, **changes):
    return lambda d: d["models"][i].update(**changes)


def _step_off(d: dict) -> None:
    d["models"][0]["clean_accuracy"] -= 1 / 200


def _more_breaks(d: dict) -> None:
    d["models"][0]["components"][0]["newly_broken"] += 1


EDITS = {
    "robust_accuracy 0.8": (_row(1, robust_accuracy=0.8), ["row 'fmnist-pgd'", "0.8", "robust_outcomes give"]),
    "clean_accuracy a step off": (_step_off, ["clean_accuracy is", "clean_outcomes give"]),
    "an outcome flipped": (lambda d: _flip_first_broken(d["models"][2]), ["robust_accuracy is", "outcomes give"]),
    "robust_accuracy no whole number": (_row(0, robust_accuracy=0.0001), ["no whole number", "robust_accuracy"]),
    "outcomes too short": (lambda d: d["models"][0].update(clean_outcomes="1" * 199), ["199 images", "n = 200"]),
    "a component's breaks": (_more_breaks, ["newly_broken", "accuracies say"]),
    "settings.attack": (lambda d: d["settings"].update(attack="pgd"), ["settings.attack is 'pgd'", "'adaptive-apgd'"]),
    "settings.attack_options": (lambda d: d["settings"].update(attack_options={"n_iter": 1}),
                                ["settings.attack_options", "run record says"]),
    "settings.seed": (lambda d: d["settings"].update(seed=7), ["settings.seed is 7", "run record says 0"]),
    "the record's attack": (lambda d: d["record"].update(attack="pgd"), ["not the digest of its fields"]),
    "the record's digest": (lambda d: d["record"].update(digest="0" * 64), ["digest 000000000000"]),
    "a card's parameter": (lambda d: d["cards"][0]["mixednuts"].update(s=0.5), ["cards' digest"]),
    "dataset.fingerprint": (lambda d: d["dataset"].update(fingerprint="0" * 16), ["dataset.fingerprint"]),
}


def test_a_real_report_passes_and_its_figures_are_counted_from_its_outcomes():
    from mixzoo.core.schema import ReportFile, counts, validate

    data = _real()
    validate(ReportFile, data, str(REAL))
    for m in data["models"]:
        n, clean, robust = counts(m)
        assert (clean / n, robust / n) == (m["clean_accuracy"], m["robust_accuracy"])


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_a_report_whose_copies_disagree_is_refused_naming_both_values(edit):
    from mixzoo.core.schema import ReportFile, validate

    change, needles = EDITS[edit]
    data = _real()
    change(data)
    with pytest.raises(InputError) as err:
        validate(ReportFile, data, "report.json")
    text = str(err.value)
    assert text.startswith("report.json: ") and "\n" not in text and all(n in text for n in needles), text


def _sealed(data: dict) -> dict:
    """``data`` with its run record's digest recomputed (a forger who knows the format, or a record as written)."""
    from mixzoo.core.record import sha256_of

    fields = {k: v for k, v in data["record"].items() if k != "digest"}
    data["record"] = {**fields, "digest": sha256_of(fields)}
    return data


def test_settings_budget_is_checked_against_a_record_that_holds_it():
    """A record that holds the budget: settings.budget is its copy, refused when it disagrees; a record written
    before the budget was recorded checks nothing against it (verify --recheck then refuses)."""
    from mixzoo.core.schema import ReportFile, validate

    old = _real()
    assert "budget" not in old["record"]
    old["settings"]["budget"] = "quick"
    validate(ReportFile, old, "report.json")
    data = _real()
    data["record"].update(budget="standard", count_overrides={})
    validate(ReportFile, _sealed(data), "report.json")
    data["settings"]["budget"] = "quick"
    with pytest.raises(InputError, match="settings.budget is 'quick' but the run record says 'standard'"):
        validate(ReportFile, data, "report.json")


def _with_own(data: dict, row: int = 2) -> tuple[dict, dict]:
    """``data`` with a stand-alone component on row ``row``: its own outcomes the row's robust ones plus the first
    clean-correct image broken only by other components, its own breaks counted from them."""
    m = data["models"][row]
    i = next(i for i, (c, r) in enumerate(zip(m["clean_outcomes"], m["robust_outcomes"], strict=True)) if c > r)
    own = m["robust_outcomes"][:i] + "1" + m["robust_outcomes"][i + 1:]
    comp = {"name": "autoattack-standard", "newly_broken": 0, "own_outcomes": own,
            "own_broken": m["clean_outcomes"].count("1") - own.count("1")}
    m["components"].append(comp)
    return data, comp


OWN_EDITS = {
    "own_broken one off": (lambda c: c.update(own_broken=c["own_broken"] - 1), ["component 'autoattack-standard'",
                                                                                "own_broken is", "give"]),
    "an own outcome correct that is not clean": (lambda c: c.update(own_outcomes="1" * len(c["own_outcomes"])),
                                                 ["not clean"]),
    "an own outcome broken that is robust": (lambda c: c.update(own_outcomes="0" * len(c["own_outcomes"])),
                                             ["broken that is robust"]),
    "own_outcomes too short": (lambda c: c.update(own_outcomes=c["own_outcomes"][1:]), ["199 images"]),
}


def test_a_components_own_breaks_are_counted_from_its_own_outcomes():
    from mixzoo.core.schema import ReportFile, own_breaks, validate

    data, comp = _with_own(_real())
    report = validate(ReportFile, data, "report.json")
    row = data["models"][2]
    assert own_breaks(report.models[2].components[-1].model_dump(), row["clean_outcomes"], row["robust_outcomes"],
                      "row") == comp["own_broken"]
    del comp["own_broken"]  # the count is a copy: without it the outcomes still give it
    validate(ReportFile, data, "report.json")


@pytest.mark.parametrize("edit", sorted(OWN_EDITS))
def test_own_outcomes_that_disagree_are_refused_naming_the_row_and_component(edit):
    from mixzoo.core.schema import ReportFile, validate

    change, needles = OWN_EDITS[edit]
    data, comp = _with_own(_real())
    change(comp)
    with pytest.raises(InputError) as err:
        validate(ReportFile, data, "report.json")
    text = str(err.value)
    assert f"row {data['models'][2]['name']!r}" in text and "\n" not in text and all(n in text for n in needles), text
