"""``mixzoo info`` and ``mixzoo fetch-list``: where each file of a model and its data belongs on this machine,
whether it is there and its size; offline, a pair missing files is refused naming every one of them."""

from __future__ import annotations

import json

import pytest
import torch
from hub_cache import put_timm_model
from own_data import write_cifar10
from typer.testing import CliRunner

from mixzoo.cli import app
from mixzoo.core.errors import MissingFileError
from mixzoo.methods import fit
from mixzoo.zoo import loading as _loading

WONG = "cifar10/Linf/Wong2020Fast"


def test_info_shows_reported_accuracies_of_a_robustbench_name_and_its_missing_file(rb_dir):
    result = CliRunner().invoke(app, ["info", "cifar10/Linf/Peng2023Robust", "--json"])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert (shown["reported"]["clean"], shown["reported"]["autoattack"]) == (0.9327, 0.7107)
    assert shown["files"] == [{"what": "cifar10/Linf/Peng2023Robust", "kind": "model", "present": False,
                               "path": str(rb_dir / "cifar10" / "Linf" / "Peng2023Robust.pt"), "size": None,
                               "fetch": shown["files"][0]["fetch"]}]


def test_info_and_fetch_list_give_path_presence_and_size(hf_cache, rb_dir, tmp_path):
    put_timm_model(hf_cache, "org/r18")
    weights = next((hf_cache / "models--org--r18").rglob("model.safetensors"))
    result = CliRunner().invoke(app, ["info", "hf-hub:org/r18", "--json"])
    files = json.loads(result.output)["files"]
    assert [(f["path"], f["present"], f["size"]) for f in files][1] == (str(weights), True, weights.stat().st_size)
    write_cifar10(tmp_path / "data")
    (tmp_path / "data" / "cifar-10-batches-py" / "data_batch_2").unlink()
    args = ["fetch-list", "hf-hub:org/r18", WONG, "--data-dir", str(tmp_path / "data"), "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1  # something is missing
    listed = {f["path"]: f for f in json.loads(result.output)}
    assert listed[str(weights)]["present"] and listed[str(weights)]["size"] == weights.stat().st_size
    missing = sorted(p for p, f in listed.items() if not f["present"])
    assert missing == sorted([str(rb_dir / "cifar10" / "Linf" / "Wong2020Fast.pt"),
                              str(tmp_path / "data" / "cifar-10-batches-py" / "data_batch_2")])
    assert len(listed) == 2 + 1 + 7  # config + weights, the checkpoint, the seven CIFAR files
    write_cifar10(tmp_path / "full")
    net = _loading.robustbench_entry("cifar10", "Linf", "Wong2020Fast")["model"]()
    (rb_dir / "cifar10" / "Linf").mkdir(parents=True)
    torch.save(net.state_dict(), rb_dir / "cifar10" / "Linf" / "Wong2020Fast.pt")
    args[-2] = str(tmp_path / "full")
    assert CliRunner().invoke(app, args).exit_code == 0


def test_offline_a_pair_missing_files_is_refused_naming_all_of_them(hf_cache, rb_dir, monkeypatch, tmp_path):
    monkeypatch.setenv("MIXZOO_OFFLINE", "1")
    put_timm_model(hf_cache, "org/r18", files=("config.json",))
    with pytest.raises(MissingFileError) as err:
        fit(abc="hf-hub:org/r18", rbc=WONG, data_dir=str(tmp_path / "nodata"))
    message = str(err.value)
    assert "\n" not in message and "9 file(s)" in message  # weights, the checkpoint, seven CIFAR files
    for needed in ("models--org--r18/snapshots", "model.safetensors", "cifar10/Linf/Wong2020Fast.pt",
                   "nodata/cifar-10-batches-py/test_batch"):
        assert needed in message
