"""A TOML card keeps its large arrays (MixedNUTS's 8x8x8 search grid, training records) in a sidecar file
referenced by sha256, so that a person can read it; old cards with inline arrays still load."""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path

import pytest
from foreign_files import KINDS, put_foreign, tree_state

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

    from mixzoo.core.card_sidecar import _drop_none  # TOML has no null: the writer's own rule

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


# --------------------------------------------------------------------------------------- the sidecar's place
FMNIST = ROOT / "benchmarks" / "results" / "cards" / "fmnist_mixednuts.toml"


def test_a_sidecar_that_links_out_of_the_cards_folder_is_refused(tmp_path):
    out = MixCard.load(FMNIST).save(tmp_path / "cards" / "card.toml")
    side = out.with_name("card.arrays.json")
    elsewhere = tmp_path / "elsewhere" / "arrays.json"
    elsewhere.parent.mkdir()
    side.rename(elsewhere)  # the right bytes (the digest matches), but outside the card's folder
    side.symlink_to(elsewhere)
    with pytest.raises(InputError, match=r"arrays\.file.*symbolic link out of") as err:
        MixCard.load(out)
    assert "\n" not in str(err.value)
    side.unlink()
    shutil.copy(elsewhere, side)  # the file itself, beside the card: loads
    assert MixCard.load(out).params["grid"] == MixCard.load(FMNIST).params["grid"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_card_never_replaces_what_is_not_its_sidecar(tmp_path, kind):
    """``STEM.arrays.json`` is part of the card's output: what is there and is not a sidecar mixzoo wrote (an
    unrelated file, a FIFO, a directory, a link) is refused before anything is written, by check_path (before a
    fit) and by save."""
    card = MixCard.load(FMNIST)
    path = tmp_path / "y.toml"
    put_foreign(path.with_name("y.arrays.json"), kind, tmp_path)
    before = tree_state(tmp_path)
    with pytest.raises(InputError, match=r"y\.arrays\.json") as err:
        MixCard.check_path(path)
    assert "\n" not in str(err.value)
    with pytest.raises(InputError, match=r"y\.arrays\.json"):
        card.save(path)
    assert tree_state(tmp_path) == before and not path.exists()


def test_a_card_replaces_its_own_sidecar(tmp_path):
    card = MixCard.load(FMNIST)
    path = card.save(tmp_path / "y.toml")
    assert MixCard.check_path(path) == path and card.save(path) == path
    assert MixCard.load(path).to_dict() == card.to_dict()


@pytest.mark.parametrize("kind", ["directory", "unrelated"])
def test_mix_refuses_a_foreign_sidecar_before_the_fit(tmp_path, kind):
    from typer.testing import CliRunner

    from mixzoo.cli import app

    put_foreign(tmp_path / "y.arrays.json", kind, tmp_path)
    before = tree_state(tmp_path)
    res = CliRunner().invoke(app, ["mix", "--abc", "digits-std", "--rbc", "digits-pgd", "--out",
                                   str(tmp_path / "y.toml"), "--cache-dir", str(tmp_path / "cache")])
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and "y.arrays.json" in lines[0], res.output
    assert tree_state(tmp_path) == before


def test_save_as_checks_the_sidecar_before_copying_weights(tmp_path):
    card = MixCard.load(ROOT / "plugins" / "cards" / "fmnist-adaptive-smoothing-a.toml")
    put_foreign(tmp_path / "mine.arrays.json", "unrelated", tmp_path)
    before = tree_state(tmp_path)
    with pytest.raises(InputError, match=r"mine\.arrays\.json exists and is not"):
        card.save_as(tmp_path / "mine.toml")
    assert tree_state(tmp_path) == before


@pytest.mark.parametrize("value", [2 ** 63, 2 ** 70, -1])
def test_a_count_in_a_card_beyond_64_bits_is_one_line(value):
    """A card built in memory (``MixCard.from_dict``, no file schema in between) checks its counts as a file does."""
    data = MixCard.load(FMNIST).to_dict()
    data["data"] = {**data["data"], "n": value}
    with pytest.raises(InputError, match=r"field 'data\.n' must be ") as err:
        MixCard.from_dict(data, source="card")
    assert "\n" not in str(err.value)
