"""Mix cards: TOML/JSON round trips, atomic writes, one-line validation errors."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from card_fields import nuts_card

from mixzoo.core.card import SCHEMA_VERSION, MixCard, provenance
from mixzoo.core.errors import InputError, MissingFileError


def full_card() -> MixCard:
    return MixCard(
        "mixednuts",
        {
            "s": 2.59,
            "p": 4.0,
            "c": -0.75,
            "alpha": 0.997,
            "beta": 0.985,
            "clamp": "gelu",
            "top_k": 250,
            "temperature": 0.0,
            "alpha_d": 0.96,
            "objective": 0.671,
            "grid": {
                "s_values": torch.tensor([0.5, 1.0]),
                "p_values": [1.0, 4.0],
                "c_values": (-1.0, 0.0),
                "objectives": [[[0.5, 0.25], [0.1, 0.2]], [[0.3, 0.4], [0.6, 0.7]]],
                "optimizer": "grid",
            },
            "fit": "mmaa",
        },
        abc={"name": "convnextv2-l", "weight_hash": "0123456789abcdef"},
        rbc={"name": "liu2023-swin-l", "weight_hash": "fedcba9876543210"},
        dataset="imagenet",
        data={"n": 1000, "n_clean": 1000, "n_clean_incorrect": 200, "split": "calibration"},
        attack={
            "name": "mmaa",
            "eps": 4 / 255,
            "norm": "Linf",
            "n_iter": 100,
            "n_target_classes": 9,
            "n_restarts": 1,
            "seed": 0,
        },
        provenance=provenance(seed=0, command="mixzoo mix"),
        notes=["a note"],
    )


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_round_trip(tmp_path, suffix):
    card = full_card()
    path = card.save(tmp_path / f"card{suffix}")
    loaded = MixCard.load(path)
    assert loaded.to_dict() == card.to_dict()
    assert loaded.params["grid"]["s_values"] == [0.5, 1.0] and loaded.params["top_k"] == 250
    # no temporary files left behind; a TOML card's grid (more than a few numbers) is in its arrays sidecar
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"card{suffix}"] + (["card.arrays.json"] if suffix == ".toml" else []))


def test_a_parameter_set_as_an_attribute_is_saved(tmp_path):
    """``card.alpha = a`` updates the method's section (refit_alpha does this): it once made an instance attribute
    that shadowed ``params`` while save() wrote the old alpha."""
    card = full_card()
    card.params["alpha"], card.params["objective"] = 0.999, 0.5
    assert card.params["alpha"] == 0.999 and card.params["alpha"] == 0.999
    loaded = MixCard.load(card.save(tmp_path / "card.toml"))
    assert (loaded.params["alpha"], loaded.params["objective"]) == (0.999, 0.5)
    card.notes = ["replaced"]  # a card field stays a field
    assert card.notes == ["replaced"] and "notes" not in card.params


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_none_values_round_trip(tmp_path, suffix):
    card = MixCard(
        "mixednuts", {"s": 1.0, "p": 1.0, "c": 0.0, "alpha": 0.6, "fit": "guess"}
    )  # beta, top_k, alpha_d, dataset: None
    loaded = MixCard.load(card.save(tmp_path / f"c{suffix}"))
    assert loaded == card
    assert loaded.params["beta"] is None and loaded.params["top_k"] is None


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
    assert card.params["alpha"] == 0.997


def test_save_replaces_an_existing_card(tmp_path):
    path = tmp_path / "c.toml"
    full_card().save(path)
    MixCard("mixednuts", {"s": 1.0, "p": 2.0, "c": 0.0, "alpha": 0.7, "beta": 0.9}).save(path)
    assert MixCard.load(path).params["p"] == 2.0


def test_provenance_records_version_and_time():
    prov = provenance(seed=3)
    assert prov["seed"] == 3 and "mixzoo_version" in prov and prov["created"].endswith("+00:00")


# ------------------------------------------------------------------------------------------------ mix card
def _card(**changes) -> dict:
    base = dict(s=2.0, p=2.0, c=-0.5, alpha=0.9, beta=0.985)
    base.update(changes)
    return base


def _edited(changes: dict) -> dict:
    """A schema-2 card dict (as loaded from a file) of ``_card()`` with ``changes`` made in the method's section;
    ``method="linear"`` gives the linear method's section (the schema-1 linear card: fit by the margin rule)."""
    d = nuts_card(**_card()).to_dict()
    changes = dict(changes)
    if changes.pop("method", None) == "linear":
        del d["mixednuts"]
        d["method"] = "linear"
        d["linear"] = {"alpha": 0.9, "beta": 0.985, "temperature": 1.0, "fit": "linear"}
    d[d["method"]].update(changes)
    return d


@pytest.mark.parametrize(("changes", "message"), [
    ({"s": 0.0}, "'mixednuts.s' must be positive"),
    ({"p": 0.0}, "'mixednuts.p' must be positive"),
    ({"s": -1.0}, "'mixednuts.s' must be positive"),
    ({"beta": 1.5}, r"'mixednuts.beta' must be in \[0.0, 1.0\]"),
    ({"beta": -0.1}, r"'mixednuts.beta' must be in \[0.0, 1.0\]"),
    ({"alpha_d": 1.2}, r"'mixednuts.alpha_d' must be in \[0.0, 1.0\]"),
    ({"alpha_d": -0.5}, r"'mixednuts.alpha_d' must be in \[0.0, 1.0\]"),
    ({"temperature": -1.0}, r"'mixednuts.temperature' must be in \[0.0, inf\]"),
    ({"s": float("nan")}, "'mixednuts.s' must be a finite number"),
    ({"alpha": float("inf")}, "'mixednuts.alpha' must be a finite number"),
    ({"beta": float("nan")}, "'mixednuts.beta' must be a finite number"),
    ({"s": True}, "'mixednuts.s' must be a finite number"),
    ({"top_k": True}, "'mixednuts.top_k' must be an integer"),
    ({"method": "linear", "beta": None}, "missing field 'linear.beta'"),
])
def test_card_values_outside_their_domain_are_refused(changes, message):
    """Paper Eq. 4/5: s, p > 0; beta, alpha_d are probabilities; a temperature is >= 0; numbers are finite reals
    (a bool is not one); the MMAA and linear methods are calibrated at a beta, so their cards must record it."""
    with pytest.raises(InputError, match=message):
        nuts_card(**_card(**changes))
    with pytest.raises(InputError, match=message):
        MixCard.from_dict(_edited(changes), source="edited.toml")


def test_card_boundary_values_are_accepted():
    for changes in ({"beta": 0.0}, {"beta": 1.0}, {"alpha_d": 0.0}, {"alpha_d": 1.0}, {"alpha": 0.5},
                    {"alpha": 1.0}, {"temperature": 0.0}, {"top_k": 2}, {"method": "guess", "beta": None}):
        nuts_card(**_card(**changes))


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_every_card_field_survives_a_round_trip(tmp_path, suffix):
    """Each field differs from its default, so a field that to_dict forgets to write comes back changed."""
    # ``method=`` in the keyword form is the fit (default "mmaa"); "linear" would give a linear card without s, p, c
    card = MixCard(
        "mixednuts",
        {
            "s": 1.5,
            "p": 3.0,
            "c": -0.25,
            "alpha": 0.8,
            "beta": 0.95,
            "clamp": "relu",
            "top_k": 5,
            "temperature": 0.7,
            "alpha_d": 0.6,
            "objective": 0.3,
            "fit": "transfer",
        },
        abc={"name": "a"},
        rbc={"name": "r"},
        dataset="digits",
        data={"n_clean": 3},
        attack={"name": "apgd"},
        provenance={"seed": 1},
        notes=["x"],
        weights={"w.pt": "0" * 64},
    )
    written = card.to_dict()
    # schema 2: the common fields, then the method's section under its name (``params``); ``path`` is not written
    assert set(written) == ({f for f in MixCard.__dataclass_fields__} - {"params", "path"}) | {card.method}
    assert written[card.method] == card.params
    assert set(card.params) >= {"s", "p", "c", "alpha", "beta", "clamp", "top_k", "temperature", "alpha_d",
                                "objective", "fit"}
    loaded = MixCard.load(card.save(tmp_path / f"card{suffix}"))
    assert loaded == card and loaded.params["temperature"] == 0.7 and loaded.params["fit"] == "transfer"
    linear = MixCard(
        "linear", {"alpha": 0.8, "beta": 0.95, "temperature": 0.7, "fit": "linear"}, abc={"name": "a"}, dataset="digits"
    )
    loaded = MixCard.load(linear.save(tmp_path / f"linear{suffix}"))
    assert (
        loaded == linear
        and loaded.method == "linear"
        and loaded.params["temperature"] == 0.7
        and loaded.params["beta"] == 0.95
    )


def test_none_inside_grid_arrays_keeps_the_grid_shape_in_toml(tmp_path):
    """TOML has no null: a ``None`` inside an array becomes nan, so the [s][p][c] shape survives the file."""
    grid = {"s_values": [1.0, 2.0], "p_values": [1.0], "c_values": [0.0, 0.5],
            "objectives": [[[0.5, None]], [[0.25, 0.75]]]}
    card = nuts_card(**_card(grid=grid))
    loaded = MixCard.load(card.save(tmp_path / "card.toml"))
    obj = np.asarray(loaded.params["grid"]["objectives"], dtype=float)
    assert obj.shape == (2, 1, 2) and math.isnan(obj[0, 0, 1]) and obj[1, 0, 1] == 0.75


def _mmaa_card(**attack_changes) -> dict:
    attack = {"name": "mmaa", "eps": 0.2, "norm": "Linf", "n_iter": 10, "n_target_classes": 9, "n_restarts": 1,
              "seed": 0}
    attack.update(attack_changes)
    return _card(attack=attack, data={"n": 100})


def test_mmaa_record_accepts_zero_target_classes_and_zero_counts():
    """MMAA with ``n_target_classes = 0`` (no targeted runs, e.g. fewer than 4 classes) is a valid record, and a
    calibration set can have no clean mistakes: 0 counts are integers >= 0."""
    nuts_card(**_mmaa_card(n_target_classes=0))
    card = _mmaa_card()
    card["data"] = {"n": 100, "n_clean": 0, "n_attacked": 0}
    nuts_card(**card)


@pytest.mark.parametrize(("changes", "field"), [({"n_iter": True}, "attack.n_iter"),
                                                ({"n_restarts": False}, "attack.n_restarts"),
                                                ({"seed": True}, "attack.seed")])
def test_mmaa_record_refuses_booleans_as_integers(changes, field):
    with pytest.raises(InputError, match=field):
        nuts_card(**_mmaa_card(**changes))


def test_grid_record_with_wrong_axis_length_is_refused():
    """Same number of axes, one of the wrong length: a 2x1x2 grid with a 2x1x3 objective table."""
    grid = {"s_values": [1.0, 2.0], "p_values": [1.0], "c_values": [0.0, 0.5],
            "objectives": [[[0.5, 0.6, 0.7]], [[0.4, 0.7, 0.1]]]}
    with pytest.raises(InputError, match="'mixednuts.grid.objectives' must be a 2x1x2"):
        nuts_card(**_card(grid=grid))


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_numpy_scalars_in_tables_are_written_as_plain_numbers(tmp_path, suffix):
    card = nuts_card(**_card(provenance={"seed": np.int64(3), "share": np.float32(0.5)}))
    loaded = MixCard.load(card.save(tmp_path / f"card{suffix}"))
    assert loaded.provenance == {"seed": 3, "share": 0.5} and type(loaded.provenance["seed"]) is int


def test_check_path_refuses_a_wrong_suffix_before_any_work(tmp_path):
    with pytest.raises(InputError, match=r"\.toml or \.json"):
        MixCard.check_path(tmp_path / "card.yaml")
    assert MixCard.check_path(tmp_path / "card.toml") == tmp_path / "card.toml"
