"""Specs from hub config.json files, the pair refused on its specs before any weights load, hand-written refs and
pickled-module checkpoints; offline, on small stand-ins written by timm and RobustBench's own code."""

from __future__ import annotations

import json
import time

import pytest
import torch
from hub_cache import REV, put_hf_file, put_timm_model

import mixzoo
from mixzoo.core.errors import InputError
from mixzoo.methods import fit
from mixzoo.zoo import loading as _loading


def test_a_10_class_32px_hub_model_is_cifar10_and_a_named_dataset_wins(hf_cache):
    put_timm_model(hf_cache, "org/r18-c10", files=("config.json",))
    spec = _loading.timm_hub_spec("hf-hub:org/r18-c10", plugin="timm-hub")
    assert (spec.num_classes, spec.input_size, spec.dataset) == (10, (3, 32, 32), "cifar10")
    config = json.loads((hf_cache / "models--org--r18-c10" / "snapshots" / REV / "config.json").read_text())
    assert spec.mean == tuple(config["pretrained_cfg"]["mean"]) and spec.std == tuple(config["pretrained_cfg"]["std"])
    put_hf_file(hf_cache, "org/svhn", "config.json", json.dumps({**config, "dataset": "svhn"}).encode())
    assert _loading.timm_hub_spec("hf-hub:org/svhn", plugin="timm-hub").dataset == "svhn"


def test_a_hand_written_ref_with_a_trailing_newline_is_read(hf_cache):
    put_timm_model(hf_cache, "org/r18", files=("config.json",))
    (hf_cache / "models--org--r18" / "refs" / "main").write_text(REV + "\n")
    path, present = _loading.hub_cached_file("org/r18", "config.json")
    assert present and path.parent.name == REV
    assert _loading.timm_hub_spec("hf-hub:org/r18", plugin="timm-hub").num_classes == 10


@pytest.mark.usefixtures("rb_dir")
def test_a_mismatched_pair_is_refused_from_specs_before_any_weights_load(hf_cache, tmp_path):
    # only config.json is in the cache and no RobustBench checkpoint exists: loading either would fail on files
    put_timm_model(hf_cache, "org/in1k", num_classes=1000, size=224, files=("config.json",))
    t0 = time.perf_counter()
    with pytest.raises(InputError, match="has 1000 classes but RBC 'cifar10/Linf/Wong2020Fast' has 10"):
        fit(abc="hf-hub:org/in1k", rbc="cifar10/Linf/Wong2020Fast", out=tmp_path / "c.toml")
    assert time.perf_counter() - t0 < 20  # generous for a loaded CI machine; benchmarks record the real time
    put_timm_model(hf_cache, "org/c10-64", num_classes=10, size=64, files=("config.json",))
    with pytest.raises(InputError, match=r"takes images of shape \(3, 64, 64\)"):
        fit(abc="hf-hub:org/c10-64", rbc="cifar10/Linf/Wong2020Fast")
    with pytest.raises(InputError, match="has 1000 classes but RBC 'fmnist-pgd' has 10"):
        fit(abc="hf-hub:org/in1k", rbc="fmnist-pgd")
    assert not (tmp_path / "c.toml").exists()


def test_a_pickled_robustbench_module_loads_with_allow_unsafe(rb_dir):
    torch.manual_seed(3)
    net = _loading.robustbench_entry("cifar10", "Linf", "Wong2020Fast")["model"]().eval()
    path = rb_dir / "cifar10" / "Linf" / "Wong2020Fast.pt"
    path.parent.mkdir(parents=True)
    torch.save(net, path)  # the whole module, pickled
    with pytest.raises(_loading.UnsafeCheckpointError):
        mixzoo.load_model("cifar10/Linf/Wong2020Fast")
    model = mixzoo.load_model("cifar10/Linf/Wong2020Fast", allow_unsafe=True)
    x = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(model(x), net(x))
    assert _loading.state_dict_from({"model": net}, "x").keys() == net.state_dict().keys()
