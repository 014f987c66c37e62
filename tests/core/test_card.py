"""Mix cards: TOML/JSON round trips, atomic writes, one-line validation errors."""

from __future__ import annotations

import json

import pytest
import torch

from mixzoo.card import SCHEMA_VERSION, MixCard, provenance
from mixzoo.errors import InputError, MissingFileError


def full_card() -> MixCard:
    return MixCard(
        s=2.59, p=4.0, c=-0.75, alpha=0.997, beta=0.985, clamp="gelu", top_k=250, temperature=0.0, alpha_d=0.96,
        objective=0.671, method="mmaa", abc={"name": "convnextv2-l", "weight_hash": "0123456789abcdef"},
        rbc={"name": "liu2023-swin-l", "weight_hash": "fedcba9876543210"}, dataset="imagenet",
        grid={"s_values": torch.tensor([0.5, 1.0]), "p_values": [1.0, 4.0], "c_values": (-1.0, 0.0),
              "objectives": [[[0.5, 0.25], [0.1, 0.2]], [[0.3, 0.4], [0.6, 0.7]]], "optimizer": "grid"},
        data={"n": 1000, "n_clean": 1000, "n_clean_incorrect": 200, "split": "calibration"},
        attack={"name": "mmaa", "eps": 4 / 255, "norm": "Linf", "n_iter": 100, "n_target_classes": 9,
                "n_restarts": 1, "seed": 0},
        provenance=provenance(seed=0, command="mixzoo mix"), notes=["a note"],
    )


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_round_trip(tmp_path, suffix):
    card = full_card()
    path = card.save(tmp_path / f"card{suffix}")
    loaded = MixCard.load(path)
    assert loaded.to_dict() == card.to_dict()
    assert loaded.grid["s_values"] == [0.5, 1.0] and loaded.top_k == 250
    assert [p.name for p in tmp_path.iterdir()] == [f"card{suffix}"]  # no temporary files left behind


def test_a_parameter_set_as_an_attribute_is_saved(tmp_path):
    """``card.alpha = a`` updates the method's section (refit_alpha does this): it once made an instance attribute
    that shadowed ``params`` while save() wrote the old alpha."""
    card = full_card()
    card.alpha, card.objective = 0.999, 0.5
    assert card.params["alpha"] == 0.999 and card.alpha == 0.999
    loaded = MixCard.load(card.save(tmp_path / "card.toml"))
    assert (loaded.alpha, loaded.objective) == (0.999, 0.5)
    card.notes = ["replaced"]  # a card field stays a field
    assert card.notes == ["replaced"] and "notes" not in card.params


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_none_values_round_trip(tmp_path, suffix):
    card = MixCard(s=1.0, p=1.0, c=0.0, alpha=0.6, method="guess")  # beta, top_k, alpha_d, dataset: None
    loaded = MixCard.load(card.save(tmp_path / f"c{suffix}"))
    assert loaded == card
    assert loaded.beta is None and loaded.top_k is None


def test_top_level_fields_are_plain_toml(tmp_path):
    text = full_card().save(tmp_path / "c.toml").read_text()
    for line in ("s = 2.59", "p = 4.0", "c = -0.75", "alpha = 0.997", "beta = 0.985", 'clamp = "gelu"',
                 f"schema_version = {SCHEMA_VERSION}"):
        assert line in text.splitlines()


def _write(tmp_path, data, name="bad.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d["mixednuts"].pop("alpha"), "missing field 'mixednuts.alpha'"),
    (lambda d: d["mixednuts"].pop("s"), "missing field 'mixednuts.s'"),
    (lambda d: d.pop("mixednuts"), "missing table .mixednuts."),
    (lambda d: d.update(schema_version=99), "schema_version 99"),
    (lambda d: d["mixednuts"].update(alpha=1.5), "'mixednuts.alpha' must be in .0.5, 1.0."),
    (lambda d: d["mixednuts"].update(alpha=0.2), "'mixednuts.alpha' must be in .0.5, 1.0."),
    (lambda d: d["mixednuts"].update(s="big"), "'mixednuts.s' must be a finite number"),
    (lambda d: d["mixednuts"].update(beta=None), "missing field 'mixednuts.beta'"),
    (lambda d: d.update(method="magic"), "unknown method 'magic'"),
    (lambda d: d["mixednuts"].update(fit="magic"), "'mixednuts.fit' must be one of"),
    (lambda d: d["mixednuts"].update(top_k=1), "'mixednuts.top_k'"),
    (lambda d: d["mixednuts"].update(grid=[1, 2]), "'mixednuts.grid' must be a table"),
])
def test_bad_cards_give_one_line_errors_naming_file_and_field(tmp_path, change, message):
    data = full_card().to_dict()
    change(data)
    path = _write(tmp_path, data)
    with pytest.raises(InputError, match=message) as err:
        MixCard.load(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_corrupt_and_missing_files(tmp_path):
    bad = tmp_path / "c.toml"
    bad.write_text("s = = 1\n")
    with pytest.raises(InputError, match="not valid TOML"):
        MixCard.load(bad)
    with pytest.raises(MissingFileError, match="mixzoo mix"):
        MixCard.load(tmp_path / "absent.toml")
    with pytest.raises(InputError, match=r"\.toml or \.json"):
        full_card().save(tmp_path / "card.yaml")


def test_unknown_fields_warn_and_are_ignored(tmp_path):
    data = full_card().to_dict()
    data["future_field"] = 3
    with pytest.warns(UserWarning, match="future_field"):
        card = MixCard.load(_write(tmp_path, data))
    assert card.alpha == 0.997


def test_save_replaces_an_existing_card(tmp_path):
    path = tmp_path / "c.toml"
    full_card().save(path)
    MixCard(s=1.0, p=2.0, c=0.0, alpha=0.7, beta=0.9).save(path)
    assert MixCard.load(path).p == 2.0


def test_provenance_records_version_and_time():
    prov = provenance(seed=3)
    assert prov["seed"] == 3 and "mixzoo_version" in prov and prov["created"].endswith("+00:00")
