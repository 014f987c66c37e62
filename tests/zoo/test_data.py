"""mixzoo.data and the built-in dataset plugin: splits, disjointness, determinism, offline errors."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mixzoo.data import ImageDataset, load_dataset
from mixzoo.errors import InputError, MissingFileError, UnknownNameError
from mixzoo_plugins import datasets as ds

HAVE_FMNIST = ds._fmnist_dir_has_files(ds.DEBIAN_FASHION_MNIST) is not None
needs_fmnist = pytest.mark.skipif(not HAVE_FMNIST, reason="apt-get install dataset-fashion-mnist")


@pytest.fixture()
def offline(monkeypatch, tmp_path):
    """No download attempts, no Debian files, no MIXZOO_DATA_DIR."""
    monkeypatch.setenv("MIXZOO_OFFLINE", "1")
    monkeypatch.delenv("MIXZOO_DATA_DIR", raising=False)
    monkeypatch.setattr(ds, "DEBIAN_FASHION_MNIST", tmp_path / "no-such-dir")


def test_digits_split_sizes_disjoint_and_cover_everything():
    splits = {s: load_dataset("digits", s) for s in ("train", "calibration", "evaluation")}
    assert {s: len(d) for s, d in splits.items()} == {"train": 1000, "calibration": 300, "evaluation": 497}
    idx = [set(d.indices.tolist()) for d in splits.values()]
    assert not (idx[0] & idx[1]) and not (idx[0] & idx[2]) and not (idx[1] & idx[2])
    assert set().union(*idx) == set(range(1797))
    for d in splits.values():
        assert d.images.dtype == torch.float32 and d.images.shape[1:] == (1, 8, 8)
        assert d.labels.dtype == torch.int64 and d.num_classes == 10
        assert 0.0 <= d.images.min() and d.images.max() <= 1.0


def test_digits_is_deterministic_and_matches_sklearn():
    from sklearn.datasets import load_digits

    a, b = load_dataset("digits", "calibration"), load_dataset("digits", "calibration")
    assert a.fingerprint == b.fingerprint and torch.equal(a.images, b.images)
    raw = load_digits()
    i = int(a.indices[7])
    assert torch.allclose(a.images[7, 0], torch.from_numpy(raw.images[i] / 16.0).float())
    assert int(a.labels[7]) == int(raw.target[i])


@settings(max_examples=20, deadline=None)
@given(n=st.integers(0, 1100))
def test_n_takes_the_first_n_of_the_split(n):
    full, part = load_dataset("digits", "train"), load_dataset("digits", "train", n=n)
    assert len(part) == min(n, len(full))
    assert torch.equal(part.indices, full.indices[:n]) and torch.equal(part.images, full.images[:n])
    if n < len(full):
        assert part.fingerprint != full.fingerprint


def test_fingerprint_differs_between_splits():
    prints = {load_dataset("digits", s, n=50).fingerprint for s in ("train", "calibration", "evaluation")}
    assert len(prints) == 3


def test_unknown_dataset_suggests_and_bad_split_is_named():
    with pytest.raises(UnknownNameError, match="fashion-mnist"):
        load_dataset("fashion-mnst", "evaluation")
    with pytest.raises(InputError, match="unknown split 'test'"):
        load_dataset("digits", "test")
    with pytest.raises(InputError, match="non-negative"):
        load_dataset("digits", "train", n=-1)


def test_image_dataset_validates_lengths():
    with pytest.raises(InputError, match="must match"):
        ImageDataset("x", "train", torch.zeros(3, 1, 2, 2), torch.zeros(2, dtype=torch.long), 2,
                     torch.arange(3), "x")


@needs_fmnist
def test_fashion_mnist_splits_never_overlap():
    train = load_dataset("fashion-mnist", "train")
    calib = load_dataset("fashion-mnist", "calibration")
    evaluation = load_dataset("fashion-mnist", "evaluation", n=1000)
    assert (len(train), len(calib)) == (55_000, 5_000)
    assert train.source == calib.source != evaluation.source  # test images come from the t10k file
    assert int(train.indices.max()) < int(calib.indices.min())
    assert evaluation.images.shape == (1000, 1, 28, 28) and evaluation.num_classes == 10
    assert torch.equal(torch.bincount(load_dataset("fashion-mnist", "evaluation").labels), torch.full((10,), 1000))


@needs_fmnist
@pytest.mark.parametrize("layout", ["flat", "torchvision"])
def test_fashion_mnist_from_a_named_directory(tmp_path, monkeypatch, offline, layout):
    d = tmp_path / "data"
    target = d if layout == "flat" else d / "FashionMNIST" / "raw"
    target.mkdir(parents=True)
    for f in ds.FMNIST_FILES.values():
        (target / f).symlink_to(Path("/usr/share/datasets/fashion-mnist") / f)
    got = load_dataset("fashion-mnist", "calibration", n=20, root=str(d))
    monkeypatch.setenv("MIXZOO_DATA_DIR", str(d))
    via_env = load_dataset("fashion-mnist", "calibration", n=20)
    assert torch.equal(got.images, via_env.images) and got.fingerprint == via_env.fingerprint
    assert int(got.indices[0]) == 55_000


def test_fashion_mnist_missing_offline_names_the_fix(offline, tmp_path):
    with pytest.raises(MissingFileError, match="apt-get install dataset-fashion-mnist") as err:
        load_dataset("fashion-mnist", "evaluation", root=str(tmp_path / "empty"))
    assert "\n" not in str(err.value) and "--data-dir" in str(err.value)


def test_corrupt_idx_file_is_reported(tmp_path):
    bad = tmp_path / "x-idx1-ubyte.gz"
    with gzip.open(bad, "wb") as fh:
        fh.write(bytes([0, 0, 8, 1, 0, 0, 0, 10, 1, 2, 3]))  # says 10 items, holds 3
    with pytest.raises(InputError, match="truncated"):
        ds._read_idx(bad)


def test_cifar10_missing_offline_is_a_clear_error(offline, tmp_path):
    with pytest.raises(MissingFileError, match="cifar10 not found") as err:
        load_dataset("cifar10", "calibration", n=5, root=str(tmp_path))
    assert "\n" not in str(err.value)


def _tiny_imagenet(root: Path, classes=("n01440764", "n01443537"), per_class=5) -> None:
    from PIL import Image

    g = torch.Generator().manual_seed(0)
    for c in classes:
        (root / "val" / c).mkdir(parents=True)
        for i in range(per_class):
            h, w = 40 + 7 * i, 60 - 3 * i
            arr = (torch.rand(h, w, 3, generator=g) * 255).to(torch.uint8).numpy()
            Image.fromarray(arr).save(root / "val" / c / f"ILSVRC2012_val_{c[-3:]}{i:05d}.JPEG")


def test_imagenet_folder_halves_are_disjoint_and_resized(tmp_path):
    _tiny_imagenet(tmp_path)
    calib = load_dataset("imagenet", "calibration", root=str(tmp_path), size=32)
    evaluation = load_dataset("imagenet", "evaluation", root=str(tmp_path), size=32)
    assert len(calib) == len(evaluation) == 5
    assert set(calib.indices.tolist()).isdisjoint(evaluation.indices.tolist())
    assert calib.images.shape == (5, 3, 32, 32) and calib.images.dtype == torch.float32
    assert 0.0 <= float(calib.images.min()) and float(calib.images.max()) <= 1.0
    # wnid folders map to the ImageNet class index (n01440764 = 0, n01443537 = 1) when robustbench is present
    assert set(calib.labels.tolist() + evaluation.labels.tolist()) == {0, 1}
    first = load_dataset("imagenet", "evaluation", n=2, root=str(tmp_path), size=32)
    assert torch.equal(first.images, evaluation.images[:2])


def test_imagenet_without_folder_names_the_fix(tmp_path):
    with pytest.raises(MissingFileError, match="--data-dir"):
        load_dataset("imagenet", "evaluation", root=str(tmp_path))
    with pytest.raises(InputError, match="no train split"):
        load_dataset("imagenet", "train", root=str(tmp_path))


def test_offline_flag_default_is_off():
    assert ds._offline() == (os.environ.get("MIXZOO_OFFLINE", "") not in ("", "0"))
