"""Paths built from data stay in their folder (a card's weight names, names read from a report), damaged files are
the user's file problems, and an output path never replaces a file mixzoo did not write or a special file."""

from __future__ import annotations

import hashlib
import os
import shutil
import tomllib
from pathlib import Path

import pytest
import tomli_w
import torch
from foreign_files import put_foreign
from typer.testing import CliRunner

from mixzoo.cli import app
from mixzoo.core.card import MixCard
from mixzoo.core.errors import InputError, MixzooError

AS_CARD = Path(__file__).resolve().parents[2] / "plugins" / "cards" / "fmnist-adaptive-smoothing-a.toml"
OUTSIDE_NAMES = ["../outside/net.safetensors", "ABSOLUTE", "sub/net.safetensors", "..", ".", "a\\b.safetensors"]


@pytest.fixture(scope="module")
def linear_card(tmp_path_factory):
    """A linear digits card (fitted in well under a second), read-only."""
    path = tmp_path_factory.mktemp("linear") / "card.toml"
    res = CliRunner().invoke(app, ["mix", "--method", "linear", "--abc", "digits-std", "--rbc", "digits-pgd", "-O",
                                   "alpha=0.9", "--out", str(path)])
    assert res.exit_code == 0, res.output
    return path


def _one_line_error(res) -> str:
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (res.exit_code, res.output,
                                                                                       repr(res.exception))
    return lines[0]


def _card_naming(linear_card: Path, tmp_path: Path, name: str) -> Path:
    """A copy of the linear card in ``tmp_path/cards`` whose ``[weights]`` names ``name``, a file that exists (with
    the right sha256) outside the card's folder."""
    outside = tmp_path / "outside" / "net.safetensors"
    outside.parent.mkdir()
    outside.write_bytes(b"weights from elsewhere")
    name = str(outside) if name == "ABSOLUTE" else name
    data = tomllib.loads(linear_card.read_text())
    data["weights"] = {name: hashlib.sha256(outside.read_bytes()).hexdigest()}
    card = tmp_path / "cards" / "card.toml"
    card.parent.mkdir()
    (card.parent / "sub").mkdir()
    card.write_text(tomli_w.dumps(data))
    return card


@pytest.mark.parametrize("name", OUTSIDE_NAMES)
def test_a_card_weight_name_must_be_a_plain_name_in_its_folder(linear_card, tmp_path, name):
    card = _card_naming(linear_card, tmp_path, name)
    with pytest.raises(InputError, match="weights") as err:
        MixCard.load(card)
    assert str(card) in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("command", ["export", "push"])
@pytest.mark.parametrize("name", ["../outside/net.safetensors", "ABSOLUTE"])
def test_export_and_push_refuse_a_card_naming_weights_outside_its_folder(linear_card, tmp_path, name, command,
                                                                         monkeypatch):
    card = _card_naming(linear_card, tmp_path, name)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    args = (["export", str(card), "--format", "torch-export", "--check-n", "5", "--out", str(out)]
            if command == "export" else ["push", str(card), "--repo", "me/card", "--dry-run", "--out", str(out)])
    line = _one_line_error(CliRunner().invoke(app, args))
    assert str(card) in line and "weights" in line and "Traceback" not in line
    assert not out.exists()


def test_a_card_weight_that_is_a_symbolic_link_out_of_the_folder_is_refused(tmp_path):
    folder = tmp_path / "cards"
    shutil.copytree(AS_CARD.parent, folder, ignore=shutil.ignore_patterns("*-b.*", "*-c.*", "mixednuts-*"))
    weights = folder / "fmnist-adaptive-smoothing-a.mixing-network.safetensors"
    real = tmp_path / "elsewhere.safetensors"
    weights.rename(real)
    weights.symlink_to(real)
    card = MixCard.load(folder / AS_CARD.name)
    with pytest.raises(InputError, match="symbolic link out of"):
        card.weight_file(weights.name)


def test_weights_whose_bytes_are_not_a_network_are_a_one_line_file_error(tmp_path):
    """The sha256 matches (the card was re-hashed), but the bytes are not a mixing network's safetensors."""
    from mixzoo.methods.adaptive.method import load_network

    folder = tmp_path / "cards"
    folder.mkdir()
    shutil.copy(AS_CARD.with_name("fmnist-adaptive-smoothing-a.arrays.json"), folder)  # the card's large arrays
    data = tomllib.loads(AS_CARD.read_text())
    name = data["adaptive-smoothing"]["weights_file"]
    for blob in (b"not a safetensors file at all" * 20, (AS_CARD.parent / name).read_bytes()[:500]):
        (folder / name).write_bytes(blob)
        data["weights"] = {name: hashlib.sha256(blob).hexdigest()}
        (folder / AS_CARD.name).write_text(tomli_w.dumps(data))
        with pytest.raises(MixzooError) as err:
            load_network(MixCard.load(folder / AS_CARD.name))
        assert err.type.__name__ == "FileProblemError" and str(folder / name) in str(err.value)
        assert "mixzoo mix" in str(err.value) and "\n" not in str(err.value)


def test_safe_component_keeps_names_in_their_folder():
    from mixzoo.core.paths import safe_component

    for value, want in [("../../X", "X"), ("/etc/passwd", "etc_passwd"), ("cifar10", "cifar10"), ("Linf", "Linf"),
                        ("a/b", "a_b"), ("..\\..\\x", "x"), ("é", None), (".", None), ("..", None), ("", None),
                        (None, None)]:
        if want is None:
            with pytest.raises(InputError):
                safe_component(value, "field 'x'")
        else:
            got = safe_component(value, "field 'x'")
            assert got == want and Path(got).name == got and not got.startswith(".")


# ----------------------------------------------------------------------------------------------------- outputs
def test_check_output_refuses_special_and_foreign_files(tmp_path):
    from mixzoo.core.paths import check_output, json_with

    ours = json_with("models")
    for kind in ("fifo", "directory", "link"):
        path = tmp_path / kind / "report.json"
        put_foreign(path, kind, tmp_path)
        with pytest.raises(InputError, match="a FIFO|a directory|a symbolic link"):
            check_output(path, ours=ours)
        with pytest.raises(InputError):
            check_output(path.parent, directory=True, files={"report.json": ours})
    foreign = tmp_path / "foreign" / "report.json"
    foreign.parent.mkdir()
    foreign.write_text('{"name": "package"}')
    with pytest.raises(InputError, match="exists and is not"):
        check_output(foreign, ours=ours)
    foreign.write_text('{"models": []}')
    assert check_output(foreign, ours=ours) == foreign
    assert check_output(tmp_path / "new" / "x.json", ours=ours) == tmp_path / "new" / "x.json"
    assert (tmp_path / "link" / "report.json").is_symlink() and (tmp_path / "elsewhere.json").read_text()


def test_a_hugging_face_snapshot_links_its_weights_to_its_blobs(tmp_path):
    """huggingface_hub stores a snapshot's files as links to ``../../blobs/SHA``: those are the card's own files."""
    repo = tmp_path / "models--me--card"
    snapshot, blobs = repo / "snapshots" / ("0" * 40), repo / "blobs"
    snapshot.mkdir(parents=True)
    blobs.mkdir()
    for file in (AS_CARD, AS_CARD.with_name("fmnist-adaptive-smoothing-a.mixing-network.safetensors"),
                 AS_CARD.with_name("fmnist-adaptive-smoothing-a.arrays.json")):
        blob = blobs / hashlib.sha256(file.read_bytes()).hexdigest()
        blob.write_bytes(file.read_bytes())
        (snapshot / file.name).symlink_to(os.path.relpath(blob, snapshot))
    card = MixCard.load(snapshot / AS_CARD.name)
    name = "fmnist-adaptive-smoothing-a.mixing-network.safetensors"
    assert card.weight_file(name) == snapshot / name


# ------------------------------------------------------------------------------------ folders, names, variables
def test_below_refuses_a_symbolic_link_in_any_component(tmp_path):
    from mixzoo.core.paths import below

    out, elsewhere = tmp_path / "mi", tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert below(out, "digits", "Linf", "card.json", what="--out") == out / "digits" / "Linf" / "card.json"
    out.mkdir()
    (out / "digits").symlink_to(elsewhere)
    for parts in (("digits", "Linf", "card.json"), ("digits",)):
        with pytest.raises(InputError, match=r"mi/digits is a symbolic link") as err:
            below(out, *parts, what="--out")
        assert "\n" not in str(err.value)
    for bad in ("..", ".", "", "a/b"):
        with pytest.raises(InputError, match="not one plain"):
            below(out, bad, what="--out")


@pytest.mark.parametrize("value", ["", "   "])
def test_an_empty_folder_variable_means_the_default(monkeypatch, tmp_path, value):
    from mixzoo.core.paths import cache_folder
    from mixzoo.core.plugins.failures import failure_file

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MIXZOO_CACHE", value)
    assert cache_folder() == tmp_path / "home" / ".cache" / "mixzoo"
    assert Path(failure_file()).parent == cache_folder()


@pytest.mark.parametrize("name", ["MIXZOO_CACHE", "MIXZOO_ROBUSTBENCH_DIR", "MIXZOO_DATA_DIR"])
@pytest.mark.parametrize("value", ["cache", "./cache", "."])
def test_a_relative_folder_variable_is_one_line(monkeypatch, name, value):
    from mixzoo.core.paths import cache_folder
    from mixzoo.zoo.files import dataset_files, robustbench_dir

    monkeypatch.setenv(name, value)
    read = {"MIXZOO_CACHE": cache_folder, "MIXZOO_ROBUSTBENCH_DIR": robustbench_dir,
            "MIXZOO_DATA_DIR": lambda: dataset_files("cifar10")}[name]
    with pytest.raises(InputError, match=rf"{name}=.* is not an absolute folder path") as err:
        read()
    assert "\n" not in str(err.value)


def test_a_cache_with_an_empty_variable_is_not_written_in_the_current_folder(monkeypatch, tmp_path):
    from mixzoo.core.cache import Cache

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MIXZOO_CACHE", "")
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    cache = Cache()
    cache.save("k", "key", {"x": torch.arange(3)}, {})
    assert cache.root == tmp_path / "home" / ".cache" / "mixzoo" and os.listdir(tmp_path / "work") == []


def test_names_longer_than_the_file_system_takes_are_refused_before_any_work(tmp_path):
    from mixzoo.core.cache import check_writable
    from mixzoo.core.paths import check_name_fits, check_output, name_max

    limit = name_max(tmp_path)
    fits = tmp_path / ("a" * (limit - 14))
    assert check_name_fits(fits) == fits and check_writable(fits) == fits
    for path in (tmp_path / ("a" * (limit - 13)), tmp_path / ("d" * (limit + 1)) / "x.json"):
        for check in (check_name_fits, check_output, check_writable):
            with pytest.raises(InputError, match="bytes, more than this file system takes") as err:
                check(path)
            assert "\n" not in str(err.value)
    with pytest.raises(InputError, match="more than this file system takes"):
        check_output(tmp_path, directory=True, files={"b" * limit: None})
    assert sorted(os.listdir(tmp_path)) == []


def test_every_folder_variable_is_read_by_env_folder():
    """The library reads no folder variable but through :func:`mixzoo.core.paths.env_folder` (one rule for empty
    and relative values): a scan of the source for ``environ`` reads of them; the scan finds a planted read."""
    import re

    root = Path(__file__).resolve().parents[2]
    pattern = re.compile(r"environ(?:\.get)?\(?\[?\s*['\"](MIXZOO_CACHE|MIXZOO_DATA_DIR|MIXZOO_ROBUSTBENCH_DIR)")
    files = [p for base in ("mixzoo", "plugins") for p in (root / base).rglob("*.py")]
    found = [f"{p.relative_to(root)}: {m.group(0)}" for p in files for m in pattern.finditer(p.read_text())]
    assert found == []
    assert pattern.search('os.environ.get("MIXZOO_CACHE", "x")') and pattern.search("os.environ['MIXZOO_DATA_DIR']")
