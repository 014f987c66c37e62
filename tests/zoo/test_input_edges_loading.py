"""Input edges of loading: a named data directory is used or refused, offline hub misses fail fast and quietly,
and `mixzoo train` never replaces shipped, sha256-pinned weights with different bytes."""

from __future__ import annotations

import gzip
import hashlib
import logging
import time
from pathlib import Path

import numpy as np
import pytest
import requests
import torch
from hub_cache import put_hf_file

import mixzoo.training.train as training
from mixzoo.core.errors import InputError, MissingFileError
from mixzoo.core.plugins import clear_caches
from mixzoo.zoo import hub as _hub
from mixzoo.zoo import loading as _loading
from mixzoo.zoo.data import load_dataset
from mixzoo_plugins import datasets as ds


# ------------------------------------------------------------------------------------------- data directories
def write_idx(path: Path, arr: np.ndarray) -> None:
    """A gzipped unsigned-byte IDX file (magic 0, 0, 0x08, ndim; big-endian dims; payload)."""
    header = bytes([0, 0, 0x08, arr.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in arr.shape)
    with gzip.open(path, "wb") as fh:
        fh.write(header + arr.astype(np.uint8).tobytes())


def tiny_fmnist(directory: Path, fill: int) -> Path:
    """Four valid IDX files: 30 training and 20 test images, every pixel ``fill``."""
    directory.mkdir(parents=True, exist_ok=True)
    for part, n in (("train", 30), ("t10k", 20)):
        write_idx(directory / ds.FMNIST_FILES[(part, "images")], np.full((n, 28, 28), fill))
        write_idx(directory / ds.FMNIST_FILES[(part, "labels")], np.arange(n) % 10)
    return directory


@pytest.fixture()
def system_fmnist(tmp_path, monkeypatch):
    """A stand-in system copy (pixels 200) that the loader could fall back to; no downloads, no $MIXZOO_DATA_DIR."""
    monkeypatch.setattr(ds, "DEBIAN_FASHION_MNIST", tiny_fmnist(tmp_path / "system", fill=200))
    monkeypatch.setenv("MIXZOO_OFFLINE", "1")
    monkeypatch.delenv("MIXZOO_DATA_DIR", raising=False)
    return ds.DEBIAN_FASHION_MNIST


def test_fashion_mnist_named_dir_that_does_not_exist_is_refused(system_fmnist, tmp_path):
    gone = tmp_path / "nonexist"
    with pytest.raises(MissingFileError) as err:
        load_dataset("fashion-mnist", "evaluation", root=str(gone))
    msg = str(err.value)
    assert f"{gone} (--data-dir) does not exist" in msg and "t10k-images-idx3-ubyte.gz" in msg
    assert "leave out --data-dir" in msg and "dataset-fashion-mnist" in msg and "\n" not in msg


def test_fashion_mnist_named_dir_without_the_files_is_refused(system_fmnist, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(MissingFileError, match="holds no Fashion-MNIST files"):
        load_dataset("fashion-mnist", "evaluation", root=str(empty))
    partial = tiny_fmnist(tmp_path / "partial", fill=1)
    for kind in ("images", "labels"):
        (partial / ds.FMNIST_FILES[("t10k", kind)]).unlink()
    with pytest.raises(MissingFileError) as err:
        load_dataset("fashion-mnist", "evaluation", root=str(partial))
    assert "lacks t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz;" in str(err.value)


def test_fashion_mnist_dir_from_environment_is_refused_naming_it(system_fmnist, tmp_path, monkeypatch):
    monkeypatch.setenv("MIXZOO_DATA_DIR", str(tmp_path / "nonexist"))
    with pytest.raises(MissingFileError, match=r"\(\$MIXZOO_DATA_DIR\) does not exist.*unset MIXZOO_DATA_DIR"):
        load_dataset("fashion-mnist", "evaluation")


@pytest.mark.parametrize("layout", ["flat", "torchvision"])
def test_fashion_mnist_named_dir_with_the_files_is_used(system_fmnist, tmp_path, layout):
    root = tmp_path / "mine"
    tiny_fmnist(root if layout == "flat" else root / "FashionMNIST" / "raw", fill=51)
    got = load_dataset("fashion-mnist", "evaluation", root=str(root))
    assert len(got) == 20 and torch.allclose(got.images, torch.full_like(got.images, 51 / 255))
    fallback = load_dataset("fashion-mnist", "evaluation")
    assert torch.allclose(fallback.images, torch.full_like(fallback.images, 200 / 255))


def test_digits_refuses_a_named_dir_but_ignores_the_environment(tmp_path, monkeypatch):
    with pytest.raises(InputError, match="reads no data directory.*leave out --data-dir"):
        load_dataset("digits", "calibration", root=str(tmp_path))
    monkeypatch.setenv("MIXZOO_DATA_DIR", str(tmp_path / "nonexist"))
    assert len(load_dataset("digits", "calibration", n=5)) == 5


@pytest.fixture()
def fake_cifar10(monkeypatch):
    """torchvision's CIFAR10 with its file names, recording (root, download); "finds" the data when test_batch
    exists and "downloads" successfully."""
    from torchvision import datasets as tvd

    calls: list[tuple[str, bool]] = []

    class Recording(tvd.CIFAR10):
        def __init__(self, root: str, train: bool = True, download: bool = False):
            calls.append((root, download))
            if not download and not (Path(root) / self.base_folder / "test_batch").is_file():
                raise RuntimeError("Dataset not found or corrupted.")
            self.data = np.zeros((6, 32, 32, 3), dtype=np.uint8)
            self.targets, self.classes = list(range(6)), [str(i) for i in range(10)]

    monkeypatch.setattr(tvd, "CIFAR10", Recording)
    monkeypatch.delenv("MIXZOO_OFFLINE", raising=False)
    monkeypatch.delenv("MIXZOO_DATA_DIR", raising=False)
    return calls


def test_cifar_named_dir_missing_or_empty_is_refused_without_download(fake_cifar10, tmp_path):
    gone = tmp_path / "nonexist"
    with pytest.raises(MissingFileError) as err:
        load_dataset("cifar10", "calibration", root=str(gone))
    msg = str(err.value)
    assert f"{gone} (--data-dir) does not exist" in msg and "cifar-10-batches-py/" in msg and "test_batch" in msg
    assert "\n" not in msg
    with pytest.raises(MissingFileError, match="has no cifar-10-batches-py/"):
        load_dataset("cifar10", "calibration", root=str(tmp_path))
    (tmp_path / "cifar-10-batches-py").mkdir()
    (tmp_path / "cifar-10-batches-py" / "data_batch_1").touch()
    with pytest.raises(MissingFileError, match="lacks cifar-10-batches-py/data_batch_2,"):
        load_dataset("cifar10", "calibration", root=str(tmp_path))
    assert not [c for c in fake_cifar10 if c[1]], "a named directory must not be downloaded into"


def test_cifar_named_dir_with_the_files_is_used(fake_cifar10, tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    (folder / "test_batch").touch()
    got = load_dataset("cifar10", "calibration", root=str(tmp_path))
    assert len(got) == 3 and fake_cifar10 == [(str(tmp_path), False)]


def test_imagenet_named_dir_missing_or_without_val_is_named(tmp_path, monkeypatch):
    monkeypatch.delenv("MIXZOO_DATA_DIR", raising=False)
    with pytest.raises(MissingFileError, match="nonexist \\(--data-dir\\) does not exist"):
        load_dataset("imagenet", "evaluation", root=str(tmp_path / "nonexist"))
    with pytest.raises(MissingFileError, match="has no val/; pass --data-dir ROOT"):
        load_dataset("imagenet", "evaluation", root=str(tmp_path))
    with pytest.raises(MissingFileError, match="cannot be downloaded"):
        load_dataset("imagenet", "evaluation")


# ------------------------------------------------------------------------------------------- Hugging Face hub
@pytest.fixture()
def online_hf_cache(tmp_path, monkeypatch):
    """An empty Hugging Face cache with downloads ON (as for a user without MIXZOO_OFFLINE), probes forgotten."""
    from huggingface_hub import constants

    cache = tmp_path / "hf"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("MIXZOO_OFFLINE", raising=False)
    monkeypatch.setattr(_hub, "_HUB_PROBES", {}, raising=False)
    return cache


def test_cached_hub_file_is_used_without_touching_the_network(online_hf_cache, monkeypatch):
    put_hf_file(online_hf_cache, "foo/bar", "config.json", b"{}")

    def no_network(*args, **kwargs):
        raise AssertionError("network used although the file is cached")

    monkeypatch.setattr(requests.Session, "request", no_network)
    assert _loading.hub_download("foo/bar", "config.json").read_bytes() == b"{}"


def test_unreachable_hub_fails_fast_with_one_request_and_no_retry_noise(online_hf_cache, monkeypatch, caplog):
    calls: list[str] = []

    def unreachable(self, method, url, *args, **kwargs):
        calls.append(url)
        if len(calls) > 1:
            raise AssertionError(f"retried: {calls}")
        raise requests.ConnectionError("Failed to resolve 'huggingface.co'")

    monkeypatch.setattr(requests.Session, "request", unreachable)
    start = time.monotonic()
    with caplog.at_level(logging.DEBUG), pytest.raises(MissingFileError) as err:
        _loading.hub_download("foo/bar", "config.json")
    assert time.monotonic() - start < 5 and len(calls) == 1
    msg = str(err.value)
    assert "is unreachable" in msg and "MIXZOO_OFFLINE=1" in msg and "HF_HOME" in msg and "\n" not in msg
    assert str(online_hf_cache / "models--foo--bar") in msg
    assert not [r for r in caplog.records if "Retrying" in r.getMessage()]
    # a second missing file does not probe again
    with pytest.raises(MissingFileError):
        _loading.hub_download("foo/bar", "model.safetensors")
    assert len(calls) == 1


def test_reachable_hub_still_downloads(online_hf_cache, monkeypatch, tmp_path):
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    fetched = tmp_path / "fetched.json"
    calls: list[bool] = []

    def fake_download(repo_id, filename, revision=None, local_files_only=False):
        calls.append(local_files_only)
        if local_files_only:
            raise LocalEntryNotFoundError("not cached")
        fetched.write_text("{}")
        return str(fetched)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    monkeypatch.setattr(_hub, "hub_reachable", lambda: True)
    assert _loading.hub_download("foo/bar", "config.json") == fetched and calls == [True, False]


def test_hub_reachable_probes_once_and_any_answer_counts(monkeypatch):
    import huggingface_hub.utils

    heads: list[float] = []

    class Session:
        def __init__(self, fail: bool):
            self.fail = fail

        def head(self, url, timeout):
            heads.append(timeout)
            if self.fail:
                raise requests.ConnectTimeout(url)
            return object()

    for fail in (True, False):
        monkeypatch.setattr(_hub, "_HUB_PROBES", {})
        monkeypatch.setattr(huggingface_hub.utils, "get_session", lambda fail=fail: Session(fail))
        assert _loading.hub_reachable() is (not fail) and _loading.hub_reachable() is (not fail)
    assert heads == [_loading.HUB_PROBE_TIMEOUT] * 2


# ----------------------------------------------------------------------------------------------- mixzoo train
DIGITS_STD_ENTRY = """
[models.digits-std]
role = "accurate"
dataset = "digits"
num_classes = 10
input_size = [1, 8, 8]
mean = [0.3]
std = [0.4]
sha256 = "{sha}"

[models.digits-std.source]
kind = "zoo"
arch = "convnet"
file = "digits-std.safetensors"
kwargs = {{ widths = [16, 32], hidden = 64, input_hw = 8 }}
"""


@pytest.fixture()
def shipped(tmp_path, monkeypatch):
    """A stand-in plugins/weights holding a copy of the shipped digits-std file; returns (dir, its bytes)."""
    weights = tmp_path / "weights"
    weights.mkdir()
    blob = (training.default_weights_dir() / "digits-std.safetensors").read_bytes()
    (weights / "digits-std.safetensors").write_bytes(blob)
    monkeypatch.setattr(training, "default_weights_dir", lambda: weights)
    monkeypatch.setenv("MIXZOO_CACHE", str(tmp_path / "cache"))
    return weights, blob


@pytest.fixture()
def pin(tmp_path, monkeypatch):
    """Pin digits-std to a given sha256 through a test registry (MIXZOO_REGISTRY)."""
    path = tmp_path / "registry.toml"

    def write(sha: str) -> None:
        path.write_text(DIGITS_STD_ENTRY.format(sha=sha))
        monkeypatch.setenv("MIXZOO_REGISTRY", str(path))
        clear_caches()

    yield write
    clear_caches()


def test_train_refuses_a_changed_seed_or_recipe_before_training(shipped, monkeypatch):
    weights, blob = shipped

    def no_training(*args, **kwargs):
        raise AssertionError("training started")

    monkeypatch.setattr(training, "load_dataset", no_training)
    with pytest.raises(InputError, match="digits-std with seed 1 would not reproduce.*pass --out DIR") as err:
        training.train_model("digits-std", seed=1, progress=False)
    assert "\n" not in str(err.value)
    with pytest.raises(InputError, match="changed epochs, lr"):
        training.train_model(training.RECIPES["digits-std"].replace(epochs=1.0, lr=1e-2), progress=False)
    assert (weights / "digits-std.safetensors").read_bytes() == blob


@pytest.mark.slow
def test_train_with_a_seed_writes_to_the_given_out_dir(shipped, tmp_path):
    weights, blob = shipped
    res = training.train_model("digits-std", tmp_path / "out", seed=1, evaluate=False, progress=False)
    assert res.path == tmp_path / "out" / "digits-std.safetensors"
    assert hashlib.sha256(res.path.read_bytes()).hexdigest() == res.sha256 != hashlib.sha256(blob).hexdigest()
    assert (weights / "digits-std.safetensors").read_bytes() == blob


@pytest.mark.slow
def test_train_result_not_matching_the_pin_leaves_the_shipped_file(shipped, pin, tmp_path):
    weights, blob = shipped
    pin("0" * 64)
    with pytest.raises(InputError, match="left alone.*pass --out DIR") as err:
        training.train_model("digits-std", evaluate=False, progress=False)
    assert "\n" not in str(err.value)
    assert (weights / "digits-std.safetensors").read_bytes() == blob
    assert not (weights / "digits-std.sha256").exists()
    kept = list((tmp_path / "cache" / "trained").glob("*/digits-std.safetensors"))
    assert len(kept) == 1 and str(kept[0]) in str(err.value)
    assert hashlib.sha256(kept[0].read_bytes()).hexdigest().startswith(kept[0].parent.name)


@pytest.mark.slow
def test_train_reproducing_the_pin_writes_the_shipped_path(shipped, pin):
    weights, _ = shipped
    (weights / "digits-std.safetensors").unlink()
    sha = training.train_model("digits-std", save=False, evaluate=False, progress=False).sha256
    pin(sha)
    res = training.train_model("digits-std", evaluate=False, progress=False)
    assert res.path == weights / "digits-std.safetensors" and res.sha256 == sha
    assert hashlib.sha256(res.path.read_bytes()).hexdigest() == sha


def test_train_checks_the_out_dir_before_training(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setattr(training, "load_dataset", lambda *a, **k: pytest.fail("training started"))
    with pytest.raises(InputError, match="is a file"):
        training.train_model("digits-std", blocker, progress=False)
