"""The schema layer: files nested without bound and fields of the wrong type are one-line errors naming the file
and the field."""

from __future__ import annotations

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
