"""The real loading paths of the published-model plugins, offline, on small stand-ins.

Nothing here mocks timm, RobustBench or huggingface_hub: each test builds (in tmp_path) a Hugging Face cache in the
standard layout or a RobustBench model directory holding randomly initialised weights of a small architecture that
travels the same code path as the big one (``convnextv2_atto`` for ConvNeXt V2-L, ``Ding2020MMA`` for the
RobustBench WideResNets, a 1-1-1-1 BiT ResNetV2 for BiT-M-R152x2), then loads it BY NAME with the network off.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from hub_cache import put_hf_file
from hypothesis import given, settings
from hypothesis import strategies as st

import mixzoo
from mixzoo.compat import import_timm
from mixzoo.errors import MissingFileError, MixzooError, RegistryError
from mixzoo.plugins import clear_caches, get_plugin_manager
from mixzoo_plugins import _loading, bit
from mixzoo_plugins._loading import ChecksumError, NormalizationInside, UnsafeCheckpointError

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


def test_every_published_entry_has_a_loader_plugin():
    kinds = {"timm": "convnextv2", "bit-hf": "bit", "robustbench": None}
    pm = get_plugin_manager()
    for spec in mixzoo.list_models():
        kind = spec.source["kind"]
        if kind not in kinds:
            continue
        owner = kinds[kind] or ("swin" if spec.source["dataset"] == "imagenet" else "wideresnet")
        assert pm.get_plugin(owner) is not None, f"{spec.name}: plugin {owner} not loaded"


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
    assert (spec.num_classes, spec.role, spec.plugin) == (10, "accurate", "convnextv2")
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
    from mixzoo.compat import import_robustbench

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
    assert isinstance(resize, bit.InputResize) and resize.size == 128
    converted, norm = bit.bit_to_timm(authors.state_dict())
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

    ours = bit.build_bit(*bit.bit_layers({"arch": "resnetv2_50x1_bit"}, "t"), num_classes=10)
    theirs = timm.create_model("resnetv2_50x1_bit", num_classes=10)
    shapes = {k: tuple(v.shape) for k, v in ours.state_dict().items()}
    assert shapes == {k: tuple(v.shape) for k, v in theirs.state_dict().items()}
    assert bit.bit_layers({"arch": "resnetv2_152x2_bit"}, "t") == ([3, 8, 36, 3], 2)
    with pytest.raises(RegistryError, match="arch"):
        bit.bit_layers({"arch": "resnet152"}, "t")


def test_bit_unsafe_checkpoint_refused_then_allowed(hf_cache, registry_file, tmp_path):
    authors = _tiny_authors_bit()
    raw = tmp_path / "bit.pt"
    torch.save({"state_dict": authors.state_dict(), "args": NotATensor("lr=0.1")}, raw)
    put_hf_file(hf_cache, "Bai-YT/MixedNUTS", "bit-tiny-cifar10.pt", raw.read_bytes())
    registry_file(BIT_ENTRY.format(m=0.5))
    with pytest.raises(UnsafeCheckpointError, match="NotATensor"):
        mixzoo.load_model("tiny-bit")
    model = mixzoo.load_model("tiny-bit", allow_unsafe=True)
    assert_same_weights(model.network[1], bit.bit_to_timm(authors.state_dict())[0])


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


def test_robustbench_imagenet_names_resolve_through_swin_plugin(rb_dir):
    spec = mixzoo.get_spec("imagenet/Linf/Liu2023Comprehensive_Swin-L")
    assert (spec.plugin, spec.input_size, spec.num_classes) == ("swin", (3, 224, 224), 1000)
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
