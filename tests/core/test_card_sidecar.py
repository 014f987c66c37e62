"""A TOML card keeps its large arrays (MixedNUTS's 8x8x8 search grid, training records) in a sidecar file
referenced by sha256, so that a person can read it; old cards with inline arrays still load."""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path

import pytest

from mixzoo.core.card import MixCard
from mixzoo.core.errors import InputError, MissingFileError

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = [ROOT / "benchmarks" / "results" / "cards" / "fmnist_mixednuts.toml",
             ROOT / "benchmarks" / "results" / "cards" / "digits_mixednuts_per_example_mmaa.toml",
             *sorted((ROOT / "plugins" / "cards").glob("*.toml"))]


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.name)
def test_committed_cards_are_short_and_load_with_their_arrays(path):
    lines = path.read_text().splitlines()
    assert len(lines) <= 100, f"{path.name}: {len(lines)} lines"
    card = MixCard.load(path)
    grid = card.params.get("grid")
    if card.method == "mixednuts" and grid:
        assert len(grid["objectives"]) == len(grid["s_values"]) and "objectives = " not in path.read_text()


def test_a_written_card_moves_its_grid_to_the_sidecar_and_loads_the_same(tmp_path):
    old = ROOT / "benchmarks" / "results" / "cards" / "fmnist_mixednuts.toml"
    card = MixCard.load(old)
    out = card.save(tmp_path / "card.toml")
    data = tomllib.loads(out.read_text())
    side = tmp_path / "card.arrays.json"
    assert data["arrays"]["file"] == side.name and side.is_file()
    assert "mixednuts.grid.objectives" in data["arrays"]["keys"] and "objectives" not in data["mixednuts"]["grid"]
    assert len(out.read_text().splitlines()) < 100
    assert MixCard.load(out).to_dict() == card.to_dict()


def test_an_old_card_with_inline_arrays_still_loads(tmp_path):
    card = MixCard.load(ROOT / "benchmarks" / "results" / "cards" / "fmnist_mixednuts.toml")
    inline = tmp_path / "inline.toml"
    import tomli_w

    from mixzoo.core.card import _drop_none  # TOML has no null: the writer's own rule

    inline.write_text(tomli_w.dumps(_drop_none(card.to_dict())))
    assert "objectives = " in inline.read_text()  # the grid inline, as cards were written before
    assert MixCard.load(inline).params["grid"] == card.params["grid"]


def test_the_sidecar_is_checked_by_its_digest(tmp_path):
    card = MixCard.load(ROOT / "benchmarks" / "results" / "cards" / "fmnist_mixednuts.toml")
    out = card.save(tmp_path / "card.toml")
    side = tmp_path / "card.arrays.json"
    altered = json.loads(side.read_text())
    altered["arrays"]["mixednuts.grid.objectives"][0][0][0] = 0.123
    side.write_text(json.dumps(altered))
    with pytest.raises(InputError, match=r"card\.arrays\.json has sha256 .* but .*card\.toml records") as err:
        MixCard.load(out)
    assert "\n" not in str(err.value)
    side.unlink()
    with pytest.raises(MissingFileError, match=r"card\.arrays\.json .* does not exist; keep it next to the card"):
        MixCard.load(out)


def test_save_as_copies_the_arrays_under_the_new_name(tmp_path):
    src = ROOT / "plugins" / "cards" / "fmnist-adaptive-smoothing-a.toml"
    card = MixCard.load(src)
    new = card.save_as(tmp_path / "mine.toml")
    assert (tmp_path / "mine.arrays.json").is_file()
    shutil.rmtree(tmp_path / "unused", ignore_errors=True)
    assert MixCard.load(new).to_dict()["adaptive-smoothing"] == {
        **card.to_dict()["adaptive-smoothing"],
        "weights_file": MixCard.load(new).params["weights_file"]}
