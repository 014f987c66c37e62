"""The real loading paths of the published-model plugins, offline, on small stand-ins.

Nothing here mocks timm, RobustBench or huggingface_hub: each test builds (in tmp_path) a Hugging Face cache in the
standard layout or a RobustBench model directory holding randomly initialised weights of a small architecture that
travels the same code path as the big one (``convnextv2_atto`` for ConvNeXt V2-L, ``Ding2020MMA`` for the
RobustBench WideResNets, a 1-1-1-1 BiT ResNetV2 for BiT-M-R152x2), then loads it BY NAME with the network off.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
import torch
from hub_cache import put_hf_file
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import mixzoo
import mixzoo.attacks.runner
import mixzoo.zoo.pairs
from mixzoo.core.compat import import_timm
from mixzoo.core.errors import InputError, MissingFileError, MixzooError, RegistryError
from mixzoo.core.plugins import clear_caches, provider, table
from mixzoo.core.registry import ModelSpec
from mixzoo.zoo import hub as _hub
from mixzoo.zoo import loading as _loading
from mixzoo.zoo import robustbench_loading as _rb_loading
from mixzoo.zoo import timm_hub as _timm_hub
from mixzoo.zoo.loading import ChecksumError, NormalizationInside, UnsafeCheckpointError
from mixzoo_plugins import bit, bit_arch

ATTO_REPO = "timm/convnextv2_atto.fcmae_ft_in1k"


class NotATensor:
    """A custom class inside a checkpoint: loading it needs arbitrary unpickling."""

    def __init__(self, note: str = "x"):
        self.note = note


# ---------------------------------------------------------------------------------------------------- fixtures
@pytest.fixture()
def registry_file(tmp_path, monkeypatch):
    """Write a test registry (MIXZOO_REGISTRY) and rebuild the merged registry; restored afterwards."""
    path = tmp_path / "registry.toml"

    def write(text: str) -> None:
        path.write_text(text)
        monkeypatch.setenv("MIXZOO_REGISTRY", str(path))
        clear_caches()

    yield write
    clear_caches()


@pytest.fixture(scope="module")
def atto(tmp_path_factory):
    """A random convnextv2_atto (10 classes) saved by timm's save_for_hf: (model, directory)."""
    import_timm()
    import timm
    from timm.models._hub import save_for_hf

    torch.manual_seed(0)
    model = timm.create_model("convnextv2_atto.fcmae_ft_in1k", pretrained=False, num_classes=10).eval()
    out = tmp_path_factory.mktemp("atto")
    save_for_hf(model, out, safe_serialization=True)
    return model, out


def put_atto(cache: Path, atto_dir: Path, repo: str = ATTO_REPO) -> None:
    for name in ("config.json", "model.safetensors"):
        put_hf_file(cache, repo, name, (atto_dir / name).read_bytes())


@pytest.fixture(scope="module")
def ding():
    """A random Ding2020MMA network built by RobustBench's own constructor."""
    torch.manual_seed(1)
    return _loading.robustbench_entry("cifar10", "Linf", "Ding2020MMA")["model"]().eval()


def save_ding(rb_dir: Path, net: torch.nn.Module, wrap: bool = False, extra: object | None = None) -> Path:
    path = rb_dir / "cifar10" / "Linf" / "Ding2020MMA.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    sd = net.state_dict()
    obj: object = {"state_dict": {f"module.{k}": v for k, v in sd.items()}} if wrap else sd
    if extra is not None:
        obj = {"state_dict": sd, "extra": extra}
    torch.save(obj, path)
    return path


def assert_same_weights(loaded: torch.nn.Module, reference: dict[str, torch.Tensor]) -> None:
    got = loaded.state_dict()
    assert set(got) == set(reference)
    for key, value in reference.items():
        assert torch.equal(got[key], value), key


# -------------------------------------------------------------------------------------------- registry entries
def test_paper_pairs_resolve_from_the_shipped_registry():
    clear_caches()
    abc, rbc = mixzoo.get_spec("convnextv2-l"), mixzoo.get_spec("liu2023-swin-l")
    assert (abc.role, abc.dataset, abc.input_size, abc.source["kind"]) == ("accurate", "imagenet", (3, 224, 224),
                                                                          "timm")
    assert (rbc.role, rbc.threat_model, rbc.source["name"]) == ("robust", "Linf", "Liu2023Comprehensive_Swin-L")
    assert rbc.epsilon == pytest.approx(4 / 255) and rbc.mean == (0.0,) and rbc.std == (1.0,)
    for name in ("convnextv2-l-384", "swin-l", "bit-r152-cifar10", "bit-r152-cifar100", "peng2023-rawrn-70-16",
                 "wang2023-wrn-70-16", "gowal2020-wrn-70-16-cifar100", "bit-r152x2-imagenet"):
        spec = mixzoo.get_spec(name)
        assert spec.citation and spec.license, name
        rep = spec.reported
        assert not rep or isinstance(rep.get("source"), str), f"{name}: reported figures need a source"


def test_every_registry_entry_has_its_loader_in_the_sources_table():
    sources = table("source")
    owners = {kind: provider("source", kind)[0] for kind in ("timm", "bit-hf", "robustbench", "zoo")}
    assert owners == {"timm": "timm-hub", "bit-hf": "bit", "robustbench": "robustbench", "zoo": "zoo"}
    for spec in mixzoo.list_models():
        assert spec.source["kind"] in sources, f"{spec.name}: no loader for source kind {spec.source['kind']!r}"


# ------------------------------------------------------------------------------------------------ timm hub path
def test_hub_cache_patch_takes_effect(hf_cache, atto):
    put_atto(hf_cache, atto[1])
    path = _loading.hub_download(ATTO_REPO, "config.json")
    assert hf_cache in path.parents


def test_hf_hub_name_loads_without_registry_entry(hf_cache, atto):
    reference, atto_dir = atto
    put_atto(hf_cache, atto_dir)
    spec = mixzoo.get_spec(f"hf-hub:{ATTO_REPO}")
    cfg = reference.pretrained_cfg
    assert spec.input_size == tuple(cfg["input_size"]) and spec.mean == tuple(cfg["mean"])
    assert (spec.num_classes, spec.role, spec.plugin) == (10, "accurate", "timm-hub")
    model = mixzoo.load_model(f"hf-hub:{ATTO_REPO}")
    assert_same_weights(model.network, reference.state_dict())
    x = torch.rand(2, *spec.input_size, generator=torch.Generator().manual_seed(0))
    mean, std = torch.tensor(cfg["mean"]).view(1, 3, 1, 1), torch.tensor(cfg["std"]).view(1, 3, 1, 1)
    with torch.no_grad():
        out, manual, unnormalized = model(x), reference((x - mean) / std), reference(x)
    assert out.shape == (2, 10)
    torch.testing.assert_close(out, manual, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(out, unnormalized, atol=1e-4), "normalization must change the output"
    assert "mean=[0.485" in repr(model)


def test_timm_kind_registry_entry_with_checksum(hf_cache, atto, registry_file):
    reference, atto_dir = atto
    put_atto(hf_cache, atto_dir)
    good = _loading.sha256_file(atto_dir / "model.safetensors")
    entry = """
[models.tiny-convnextv2]
role = "accurate"
dataset = "imagenet-subset"
num_classes = 10
input_size = [3, 224, 224]
mean = [0.485, 0.456, 0.406]
std = [0.229, 0.224, 0.225]
source = {{ kind = "timm", model = "hf-hub:{repo}" }}
sha256 = "{sha}"
"""
    registry_file(entry.format(repo=ATTO_REPO, sha=good))
    model = mixzoo.load_model("tiny-convnextv2")
    assert_same_weights(model.network, reference.state_dict())
    registry_file(entry.format(repo=ATTO_REPO, sha="0" * 64))
    with pytest.raises(ChecksumError, match="expects 0000"):
        mixzoo.load_model("tiny-convnextv2")
    registry_file(entry.format(repo=ATTO_REPO, sha=good).replace("0.485, 0.456, 0.406", "0.5, 0.5, 0.5"))
    with pytest.raises(RegistryError, match="mean"):
        mixzoo.load_model("tiny-convnextv2")


def test_timm_pickle_weights_refused_unless_allowed(hf_cache, atto):
    reference, atto_dir = atto
    repo = "someone/atto-pickled"
    put_hf_file(hf_cache, repo, "config.json", (atto_dir / "config.json").read_bytes())
    bin_path = hf_cache / "pickled.bin"
    torch.save({"state_dict": reference.state_dict(), "meta": NotATensor()}, bin_path)
    put_hf_file(hf_cache, repo, "pytorch_model.bin", bin_path.read_bytes())
    with pytest.raises(UnsafeCheckpointError, match="NotATensor.*allow_unsafe") as err:
        mixzoo.load_model(f"hf-hub:{repo}")
    assert "\n" not in str(err.value)
    model = mixzoo.load_model(f"hf-hub:{repo}", allow_unsafe=True)
    assert_same_weights(model.network, reference.state_dict())


def test_hub_file_missing_offline_names_the_cache_path(hf_cache):
    with pytest.raises(MissingFileError) as err:
        mixzoo.load_model("hf-hub:timm/not_cached_model.x")
    msg = str(err.value)
    assert "config.json" in msg and str(hf_cache / "models--timm--not_cached_model.x") in msg
    assert "HF_HUB_OFFLINE" in msg and "\n" not in msg


def test_published_bit_entry_offline_says_which_file(hf_cache):
    with pytest.raises(MissingFileError, match="bit-r152x2-cifar10.pt.*Bai-YT/MixedNUTS"):
        mixzoo.load_model("bit-r152-cifar10")


# ---------------------------------------------------------------------------------------------------- BiT path
def _tiny_authors_bit(num_classes: int = 10) -> torch.nn.Module:
    """The MixedNUTS authors' BiT architecture (RobustBench's bit_rn_v2: Google BiT layout, resize to 128 and
    (x - 0.5) / 0.5 inside), with one unit per stage."""
    from mixzoo.core.compat import import_robustbench

    import_robustbench()
    from robustbench.model_zoo.architectures.bit_rn_v2 import ResNetV2

    torch.manual_seed(2)
    net = ResNetV2([1, 1, 1, 1], 1, head_size=num_classes, zero_head=False)
    with torch.no_grad():  # the BiT head starts at zero in the authors' code; make logits informative
        net.head.conv.weight.normal_(0, 0.05)
        net.head.conv.bias.normal_(0, 0.05)
    return net.eval()


BIT_ENTRY = """
[models.tiny-bit]
role = "accurate"
dataset = "cifar10"
num_classes = 10
input_size = [3, 32, 32]
mean = [{m}, {m}, {m}]
std = [0.5, 0.5, 0.5]

[models.tiny-bit.source]
kind = "bit-hf"
repo = "Bai-YT/MixedNUTS"
filename = "bit-tiny-cifar10.pt"
layers = [1, 1, 1, 1]
width_factor = 1
resize = 128
std_conv_eps = 1e-10
"""


def test_bit_hf_checkpoint_in_authors_layout_loads_and_matches(hf_cache, registry_file, tmp_path):
    authors = _tiny_authors_bit()
    raw = tmp_path / "bit.pt"
    torch.save({"model": authors.state_dict()}, raw)
    put_hf_file(hf_cache, "Bai-YT/MixedNUTS", "bit-tiny-cifar10.pt", raw.read_bytes())
    registry_file(BIT_ENTRY.format(m=0.5))
    model = mixzoo.load_model("tiny-bit")
    resize, network = model.network
    assert isinstance(resize, _loading.InputResize) and resize.size == 128
    converted, norm = bit_arch.bit_to_timm(authors.state_dict())
    assert set(norm) == {"mean", "std"}
    assert_same_weights(network, converted)
    x = torch.rand(3, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        out, expected = model(x), authors(x)
    assert out.shape == (3, 10)
    torch.testing.assert_close(out, expected, rtol=1e-3, atol=1e-4)
    # a registry whose normalization disagrees with the checkpoint's is refused
    registry_file(BIT_ENTRY.format(m=0.4))
    with pytest.raises(RegistryError, match="mean"):
        mixzoo.load_model("tiny-bit")


def test_bit_builder_matches_timm_registered_architecture():
    import_timm()
    import timm

    ours = bit_arch.build_bit(*bit_arch.bit_layers({"arch": "resnetv2_50x1_bit"}, "t"), num_classes=10)
    theirs = timm.create_model("resnetv2_50x1_bit", num_classes=10)
    shapes = {k: tuple(v.shape) for k, v in ours.state_dict().items()}
    assert shapes == {k: tuple(v.shape) for k, v in theirs.state_dict().items()}
    assert bit_arch.bit_layers({"arch": "resnetv2_152x2_bit"}, "t") == ([3, 8, 36, 3], 2)
    with pytest.raises(RegistryError, match="arch"):
        bit_arch.bit_layers({"arch": "resnet152"}, "t")


def test_bit_unsafe_checkpoint_refused_then_allowed(hf_cache, registry_file, tmp_path):
    authors = _tiny_authors_bit()
    raw = tmp_path / "bit.pt"
    torch.save({"state_dict": authors.state_dict(), "args": NotATensor("lr=0.1")}, raw)
    put_hf_file(hf_cache, "Bai-YT/MixedNUTS", "bit-tiny-cifar10.pt", raw.read_bytes())
    registry_file(BIT_ENTRY.format(m=0.5))
    with pytest.raises(UnsafeCheckpointError, match="NotATensor"):
        mixzoo.load_model("tiny-bit")
    model = mixzoo.load_model("tiny-bit", allow_unsafe=True)
    assert_same_weights(model.network[1], bit_arch.bit_to_timm(authors.state_dict())[0])


# --------------------------------------------------------------------------------------------- RobustBench path
@pytest.mark.parametrize("wrap", [False, True], ids=["plain", "state_dict-module-prefix"])
def test_robustbench_name_loads_without_registry_entry(rb_dir, ding, wrap):
    save_ding(rb_dir, ding, wrap=wrap)
    model = mixzoo.load_model("cifar10/Linf/Ding2020MMA")
    spec = model.spec
    assert (spec.role, spec.threat_model, spec.num_classes, spec.input_size) == ("robust", "Linf", 10, (3, 32, 32))
    assert spec.epsilon == pytest.approx(8 / 255)
    assert isinstance(model.normalize, NormalizationInside) and "inside the network" in repr(model)
    assert_same_weights(model.network, ding.state_dict())
    x = torch.rand(4, 3, 32, 32, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        torch.testing.assert_close(model(x), ding(x))
    assert model(x).shape == (4, 10)


def test_robustbench_missing_file_offline_names_the_path(rb_dir):
    with pytest.raises(MissingFileError) as err:
        mixzoo.load_model("cifar10/Linf/Ding2020MMA")
    assert str(rb_dir / "cifar10" / "Linf" / "Ding2020MMA.pt") in str(err.value)
    with pytest.raises(MissingFileError, match="imagenet/Linf/Liu2023Comprehensive_Swin-L.pt"):
        mixzoo.load_model("liu2023-swin-l")


def test_robustbench_unsafe_checkpoint_refused_then_allowed(rb_dir, ding):
    save_ding(rb_dir, ding, extra=NotATensor())
    with pytest.raises(UnsafeCheckpointError, match="NotATensor"):
        mixzoo.load_model("cifar10/Linf/Ding2020MMA")
    model = mixzoo.load_model("cifar10/Linf/Ding2020MMA", allow_unsafe=True)
    assert_same_weights(model.network, ding.state_dict())


def test_robustbench_registry_entry_checksum(rb_dir, ding, registry_file):
    path = save_ding(rb_dir, ding)
    entry = """
[models.tiny-rb]
role = "robust"
dataset = "cifar10"
num_classes = 10
input_size = [3, 32, 32]
threat_model = "Linf"
epsilon = 0.03137254901960784
source = {{ kind = "robustbench", name = "Ding2020MMA", dataset = "cifar10", threat_model = "Linf" }}
sha256 = "{sha}"
"""
    registry_file(entry.format(sha=_loading.sha256_file(path)))
    assert_same_weights(mixzoo.load_model("tiny-rb").network, ding.state_dict())
    registry_file(entry.format(sha="f" * 64))
    with pytest.raises(ChecksumError, match="tiny-rb"):
        mixzoo.load_model("tiny-rb")


def test_robustbench_imagenet_names_resolve_at_224(rb_dir):
    spec = mixzoo.get_spec("imagenet/Linf/Liu2023Comprehensive_Swin-L")
    assert (spec.plugin, spec.input_size, spec.num_classes) == ("robustbench", (3, 224, 224), 1000)
    assert spec.epsilon == pytest.approx(4 / 255)
    assert mixzoo.get_spec("cifar10/L2/Wang2023Better_WRN-70-16").epsilon == 0.5
    with pytest.raises(RegistryError, match="224"):
        mixzoo.load_model(dataclasses.replace(spec, input_size=(3, 256, 256)))
    with pytest.raises(mixzoo.UnknownNameError, match="Liu2023Comprehensive_Swin-L"):
        mixzoo.get_spec("imagenet/Linf/Liu2023Comprehensive_Swin-XL")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the error is about the absence of CUDA")
def test_robustbench_entry_needing_cuda_fails_clearly_on_cpu(rb_dir):
    with pytest.raises(MixzooError, match="needs a CUDA GPU") as err:
        mixzoo.load_model("cifar10/Linf/Bai2023Improving_edm")
    assert "\n" not in str(err.value)


# ----------------------------------------------------------------------------------------------- safe loading
def test_load_checkpoint_variants(tmp_path):
    from safetensors.torch import save_file

    sd = {"w": torch.arange(6.0).view(2, 3)}
    save_file(sd, tmp_path / "a.safetensors")
    torch.save(sd, tmp_path / "b.pt")
    torch.save(sd, tmp_path / "c.pt", _use_new_zipfile_serialization=False)  # legacy: cannot be mmapped
    for name in ("a.safetensors", "b.pt", "c.pt"):
        assert torch.equal(_loading.load_checkpoint(tmp_path / name, mmap=True)["w"], sd["w"])
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(UnsafeCheckpointError, match="not plain weights .*corrupt"):
        _loading.load_checkpoint(tmp_path / "junk.pt")
    with pytest.raises(MixzooError, match="not a readable PyTorch checkpoint"):
        _loading.load_checkpoint(tmp_path / "junk.pt", allow_unsafe=True)
    with pytest.raises(MixzooError, match="no state dict"):
        _loading.state_dict_from({"epoch": 3}, "x.pt")


@settings(max_examples=30, deadline=None)
@given(keys=st.lists(st.from_regex(r"[a-z]{1,6}(\.[a-z0-9]{1,4}){0,3}", fullmatch=True)
                     .filter(lambda k: not k.startswith("module.")), min_size=1, max_size=6, unique=True),
       wrapper=st.sampled_from([None, "state_dict", "model", "model_state_dict"]), prefix=st.booleans())
def test_state_dict_from_undoes_wrapping_and_dataparallel_prefix(keys, wrapper, prefix):
    sd = {k: torch.full((2,), float(i)) for i, k in enumerate(keys)}
    obj: object = {f"module.{k}" if prefix else k: v for k, v in sd.items()}
    if wrapper is not None:
        obj = {wrapper: obj, "epoch": 7}
    out = _loading.state_dict_from(obj, "ckpt")
    assert list(out) == keys and all(torch.equal(out[k], sd[k]) for k in keys)


def test_robustbench_spec_with_outside_normalization_is_refused(rb_dir):
    spec = mixzoo.get_spec("cifar10/Linf/Ding2020MMA")
    with pytest.raises(RegistryError, match="normalize internally"):
        mixzoo.load_model(dataclasses.replace(spec, mean=(0.5,), std=(0.25,)))


# ------------------------------------------------------------------------------------------------- helpers
def spec(**kw) -> ModelSpec:
    base = dict(name="t", role="accurate", dataset="cifar10", num_classes=10, input_size=(3, 32, 32), source={})
    return ModelSpec(**{**base, **kw})


# -------------------------------------------------------------------------------------- safe loading, keys
def test_sha256_check_ignores_the_case_of_the_hex_digest(tmp_path):
    """A hex digest names the same bytes in upper or lower case; a registry may write either."""
    import hashlib

    path = tmp_path / "w.bin"
    path.write_bytes(b"weights")
    digest = hashlib.sha256(b"weights").hexdigest()
    _loading.verify_sha256(path, digest.upper(), "entry")
    _loading.verify_sha256(path, digest, "entry")
    with pytest.raises(_loading.ChecksumError):
        _loading.verify_sha256(path, "0" * 64, "entry")


def test_module_prefix_is_stripped_only_when_every_key_carries_it():
    """A network with a submodule named ``module`` is not a DataParallel wrapper: its keys stay as they are."""
    t = torch.zeros(1)
    own = {"module.weight": t, "head.bias": t}
    assert list(_loading.state_dict_from(own, "x")) == ["module.weight", "head.bias"]
    assert list(_loading.state_dict_from({"module.a.w": t, "module.b": t}, "x")) == ["a.w", "b"]


@pytest.mark.parametrize("obj", [{}, {"state_dict": {}}], ids=["empty", "empty-wrapped"])
def test_an_empty_state_dict_is_refused(obj):
    with pytest.raises(MixzooError, match="no state dict of tensors"):
        _loading.state_dict_from(obj, "empty.pt")


def test_a_wrong_shape_is_reported_in_one_line_like_missing_keys():
    net = nn.Linear(3, 2)
    bad = {"weight": torch.zeros(2, 4), "bias": torch.zeros(2)}
    with pytest.raises(MixzooError, match=r"does not fit the architecture \(wrong shape weight\)") as err:
        _loading.load_state_dict_strict(net, bad, "ckpt.pt")
    assert "\n" not in str(err.value)
    good = {"weight": torch.ones(2, 3), "bias": torch.zeros(2)}
    _loading.load_state_dict_strict(net, good, "ckpt.pt")
    assert torch.equal(net.weight, good["weight"])


# ------------------------------------------------------------------------------------------ Hugging Face hub
def test_cache_location_names_the_requested_revision():
    from huggingface_hub import constants

    where = _loading.hf_cache_location("org/name", "model.safetensors", "v1.0")
    folder = Path(constants.HF_HUB_CACHE) / "models--org--name"
    assert where == f"{folder}/snapshots/<commit>/model.safetensors (with {folder}/refs/v1.0 holding <commit>)"
    assert "refs/main holding" in _loading.hf_cache_location("org/name", "model.safetensors")


def test_mixzoo_offline_never_downloads_even_when_the_hub_answers(tmp_path, monkeypatch):
    """MIXZOO_OFFLINE=1 turns downloads off on its own (huggingface_hub's own switch left on)."""
    import huggingface_hub
    from huggingface_hub import constants
    from huggingface_hub.errors import LocalEntryNotFoundError

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("MIXZOO_OFFLINE", "1")
    calls: list[bool] = []

    def fake_download(repo_id, filename, revision=None, local_files_only=False):
        calls.append(local_files_only)
        if local_files_only:
            raise LocalEntryNotFoundError("not cached")
        return str(tmp_path / "downloaded")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    monkeypatch.setattr(_hub, "hub_reachable", lambda: True)
    with pytest.raises(MissingFileError, match="downloads are off"):
        _loading.hub_download("foo/bar", "config.json")
    assert calls == [True]


@pytest.mark.parametrize("name", ["hf-hub:a/b/c", "hf-hub:abc", "hf-hub:/b", "hf-hub:a/"])
def test_hub_names_need_exactly_org_and_name(name):
    with pytest.raises(InputError, match="hf-hub:ORG/NAME"):
        _loading.parse_hf_hub(name)
    assert _loading.parse_hf_hub("hf-hub:a/b@v2") == ("a/b", "v2")


def test_safetensors_weights_win_over_a_pickle_in_the_same_repo(hf_cache):
    """timm pushes both; the safe file is the one to load (``model.safetensors`` first)."""
    put_hf_file(hf_cache, "org/both", "pytorch_model.bin", b"pickle")
    safe = put_hf_file(hf_cache, "org/both", "model.safetensors", b"safe")
    assert _loading.hub_weights("org/both") == safe
    only_bin = put_hf_file(hf_cache, "org/bin", "pytorch_model.bin", b"pickle")
    assert _loading.hub_weights("org/bin") == only_bin


def test_old_form_hub_config_is_read_like_timm_reads_it(hf_cache):
    """Old timm hub configs are the pretrained cfg itself, architecture and ``labels`` included."""
    old = {"architecture": "convnextv2_atto", "num_classes": 7, "input_size": [3, 64, 64], "mean": [0.5, 0.5, 0.5],
           "std": [0.25, 0.25, 0.25], "labels": ["c0", "c1", "c2", "c3", "c4", "c5", "c6"]}
    put_hf_file(hf_cache, "org/old", "config.json", json.dumps(old).encode())
    arch, cfg, model_args = _loading.timm_hub_config("org/old")
    assert arch == "convnextv2_atto" and model_args == {}
    assert cfg["num_classes"] == 7 and cfg["label_names"] == old["labels"] and "labels" not in cfg
    assert cfg["input_size"] == [3, 64, 64] and cfg["hf_hub_id"] == "org/old"
    got = _loading.timm_hub_spec("hf-hub:org/old", plugin="timm-hub")
    assert (got.num_classes, got.input_size, got.mean, got.std) == (7, (3, 64, 64), (0.5,) * 3, (0.25,) * 3)


@pytest.mark.parametrize(("classes", "dataset"), [(1000, "imagenet"), (10, "unknown")])
def test_hub_spec_calls_only_1000_class_models_imagenet(hf_cache, classes, dataset):
    config = {"architecture": "convnextv2_atto", "num_classes": classes,
              "pretrained_cfg": {"input_size": [3, 224, 224], "mean": [0.5] * 3, "std": [0.5] * 3}}
    put_hf_file(hf_cache, "org/m", "config.json", json.dumps(config).encode())
    got = _loading.timm_hub_spec("hf-hub:org/m", plugin="timm-hub")
    assert (got.num_classes, got.dataset) == (classes, dataset)


def test_normalization_check_broadcasts_one_value_and_checks_std_too():
    cfg = {"mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]}
    _timm_hub.check_normalization(spec(mean=(0.5,), std=(0.25,)), cfg)  # one value stands for every channel
    _timm_hub.check_normalization(spec(mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25)), cfg)
    with pytest.raises(RegistryError, match=r"std \[0\.2\] differs"):
        _timm_hub.check_normalization(spec(mean=(0.5,), std=(0.2,)), cfg)
    with pytest.raises(RegistryError, match="mean"):
        _timm_hub.check_normalization(spec(mean=(0.4,), std=(0.25,)), cfg)


# ---------------------------------------------------------------------------------------------- RobustBench
def test_ensemble_checkpoints_are_numbered_from_zero_as_robustbench_reads_them(rb_dir, monkeypatch):
    """RobustBench's load_model reads member i of an ensemble from ``'{}_m{}.pt'.format(model_path, i)`` with i
    from ``enumerate`` over its gdrive ids."""
    entry = _loading.robustbench_entry("cifar10", "Linf", "Chen2020Adversarial")
    files = _loading.robustbench_files("cifar10", "Linf", "Chen2020Adversarial", entry)
    base = rb_dir / "cifar10" / "Linf" / "Chen2020Adversarial.pt"
    assert files == [Path(f"{base}_m{i}.pt") for i, _ in enumerate(entry["gdrive_id"])]
    monkeypatch.setenv("MIXZOO_OFFLINE", "1")
    with pytest.raises(MissingFileError, match=r"Chen2020Adversarial\.pt_m0\.pt is missing"):
        mixzoo.load_model("cifar10/Linf/Chen2020Adversarial")


@pytest.mark.parametrize("unpickling", [False, True])
@pytest.mark.parametrize("before", [None, "1"], ids=["unset", "set"])
def test_torch_load_switches_are_restored_after_a_robustbench_load(monkeypatch, unpickling, before):
    keys = ("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD")
    for k in keys:
        monkeypatch.delenv(k, raising=False)
    if before is not None:
        monkeypatch.setenv(keys[unpickling], before)
    with _rb_loading._torch_load_mode(unpickling):
        assert os.environ.get(keys[unpickling]) == "1" and keys[not unpickling] not in os.environ
    assert os.environ.get(keys[unpickling]) == before and keys[not unpickling] not in os.environ


def test_robustbench_spec_with_a_std_other_than_one_is_refused(rb_dir):
    base = mixzoo.get_spec("cifar10/Linf/Ding2020MMA")
    with pytest.raises(RegistryError, match="normalize internally"):
        mixzoo.load_model(dataclasses.replace(base, std=(0.5,)))


def test_a_freshly_downloaded_checkpoint_is_checked_against_the_registry(rb_dir, monkeypatch):
    """Online, a missing checkpoint is downloaded by RobustBench; what arrives must still match sha256."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("MIXZOO_OFFLINE", raising=False)

    def fake_build(name, dataset, threat, files, unsafe, allow_unsafe):
        files[0].parent.mkdir(parents=True, exist_ok=True)
        files[0].write_bytes(b"what the download delivered")
        return nn.Identity()

    monkeypatch.setattr(_rb_loading, "_robustbench_build", fake_build)
    wanted = dataclasses.replace(mixzoo.get_spec("cifar10/Linf/Ding2020MMA"), sha256="ab" * 32)
    with pytest.raises(_loading.ChecksumError, match="expects abababab"):
        mixzoo.load_model(wanted)


def test_robustbench_names_of_every_dataset_resolve_through_one_plugin(rb_dir):
    for name in ("cifar10/Linf/Ding2020MMA", "imagenet/Linf/Liu2023Comprehensive_Swin-L"):
        assert mixzoo.get_spec(name).plugin == "robustbench"
    c100 = mixzoo.get_spec("cifar100/Linf/Wang2023Better_WRN-70-16")
    assert (c100.plugin, c100.num_classes, c100.dataset) == ("robustbench", 100, "cifar100")
    assert c100.epsilon == pytest.approx(8 / 255)


# ------------------------------------------------------------------------------------------------------ BiT
def test_bit_checkpoint_normalization_compares_each_key_and_broadcasts_one_value():
    norm = {"mean": torch.full((1, 3, 1, 1), 0.5), "std": torch.full((1, 3, 1, 1), 0.5)}
    bit._check_checkpoint_normalization(norm, spec(mean=(0.5,), std=(0.5,)), "c.pt")
    bit._check_checkpoint_normalization(norm, spec(mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5)), "c.pt")
    with pytest.raises(RegistryError, match="std"):
        bit._check_checkpoint_normalization(norm, spec(mean=(0.5,), std=(0.25,)), "c.pt")
    with pytest.raises(RegistryError, match="mean"):
        bit._check_checkpoint_normalization(norm, spec(mean=(0.25,), std=(0.5,)), "c.pt")


def test_bit_depths_are_the_resnet_stage_counts():
    """ResNet-50/101/152 (He et al. 2016, Table 1): 3-4-6-3, 3-4-23-3 and 3-8-36-3 bottleneck blocks."""
    assert bit_arch.bit_layers({"arch": "resnetv2_50x1_bit"}, "t") == ([3, 4, 6, 3], 1)
    assert bit_arch.bit_layers({"arch": "resnetv2_101x3_bit"}, "t") == ([3, 4, 23, 3], 3)
    assert bit_arch.bit_layers({"arch": "resnetv2_152x4_bit"}, "t") == ([3, 8, 36, 3], 4)


def _tiny_bit_file(tmp_path: Path) -> tuple[Path, nn.Module]:
    torch.manual_seed(5)
    net = bit_arch.build_bit([1, 1, 1, 1], 1, num_classes=10).eval()
    path = tmp_path / "tiny-bit.pt"
    torch.save(net.state_dict(), path)
    return path, net


def test_bit_local_path_wins_over_the_hub_and_missing_paths_are_named(hf_cache, tmp_path):
    path, _ = _tiny_bit_file(tmp_path)
    src = {"kind": "bit-hf", "repo": "Bai-YT/MixedNUTS", "filename": "not-cached.pt", "path": str(path)}
    assert bit.checkpoint_path(spec(source=src)) == path
    gone = tmp_path / "gone.pt"
    with pytest.raises(MissingFileError, match=f"checkpoint {gone} of registry entry 't' does not exist"):
        bit.checkpoint_path(spec(source={**src, "path": str(gone)}))


def test_bit_std_conv_eps_of_the_entry_reaches_every_standardised_conv(tmp_path):
    from timm.layers import StdConv2d

    path, reference = _tiny_bit_file(tmp_path)
    src = {"kind": "bit-hf", "path": str(path), "layers": [1, 1, 1, 1], "width_factor": 1, "std_conv_eps": 1e-10}
    net = bit.load_bit(spec(source=src))
    convs = [m for m in net.modules() if isinstance(m, StdConv2d)]
    assert convs and all(m.eps == 1e-10 for m in convs)
    default = bit.load_bit(spec(source={k: v for k, v in src.items() if k != "std_conv_eps"}))
    assert all(m.eps == 1e-8 for m in default.modules() if isinstance(m, StdConv2d))
    x = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(default(x), reference(x))


# ---------------------------------------------------------------------------------------- damaged files in caches
@pytest.mark.parametrize("damage", ["truncated", "not safetensors"])
def test_a_damaged_hub_weights_file_is_the_users_file_not_a_plugin_fault(hf_cache, atto, cache_dir, damage):
    from mixzoo.core.plugins import runtime_failures

    put_atto(hf_cache, atto[1])
    blob = (atto[1] / "model.safetensors").read_bytes()
    bad = blob[: len(blob) // 2] if damage == "truncated" else b"<html>rate limited</html>" * 10
    path = put_hf_file(hf_cache, ATTO_REPO, "model.safetensors", bad)
    before = runtime_failures()
    with pytest.raises(MixzooError) as err:
        mixzoo.load_model(f"hf-hub:{ATTO_REPO}")
    message = str(err.value)
    assert err.type.__name__ == "FileProblemError", message  # the user's file problem, not a PluginError
    assert "\n" not in message and str(path) in message
    assert f"huggingface-cli download {ATTO_REPO} --force-download" in message
    assert "report it" not in message and runtime_failures() == before  # never recorded against a plugin
