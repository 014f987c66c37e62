"""mixzoo.zoo.data and the built-in dataset plugin: splits, disjointness, determinism, offline errors."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mixzoo.core.errors import InputError, MissingFileError, PluginError, UnknownNameError
from mixzoo.core.plugins import hookimpl, register_plugin, unregister_plugin
from mixzoo.zoo.data import ImageDataset, load_dataset, shortfall_note
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
    from mixzoo_plugins.dataset_dirs import offline

    assert offline() == (os.environ.get("MIXZOO_OFFLINE", "") not in ("", "0"))


# ------------------------------------------------------------------------------------------------- IDX files
def _write_idx(path: Path, header: bytes, payload: bytes) -> Path:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wb") as fh:
        fh.write(header + payload)
    return path


@pytest.mark.parametrize("suffix", [".gz", ""])
def test_read_idx_parses_big_endian_dims_after_the_magic(tmp_path, suffix):
    arr = (np.arange(2 * 3 * 300) % 251).astype(np.uint8).reshape(2, 3, 300)  # 300 = 0x012c: byte order matters
    header = bytes([0, 0, 0x08, 3]) + b"".join(d.to_bytes(4, "big") for d in arr.shape)
    got = ds._read_idx(_write_idx(tmp_path / f"x-idx3-ubyte{suffix}", header, arr.tobytes()))
    assert got.dtype == np.uint8 and got.shape == (2, 3, 300) and np.array_equal(got, arr)


def test_read_idx_refuses_other_element_types_and_extra_bytes(tmp_path):
    """Only unsigned bytes (type 0x08) are read: signed bytes (0x09) would be misread; a payload longer than the
    header's shape is as wrong as a shorter one."""
    signed = _write_idx(tmp_path / "s-idx1-ubyte.gz", bytes([0, 0, 0x09, 1, 0, 0, 0, 3]), bytes([1, 255, 3]))
    with pytest.raises(InputError, match="not an unsigned-byte IDX file"):
        ds._read_idx(signed)
    bad_magic = _write_idx(tmp_path / "m-idx1-ubyte.gz", bytes([1, 0, 0x08, 1, 0, 0, 0, 3]), bytes([1, 2, 3]))
    with pytest.raises(InputError, match="not an unsigned-byte IDX file"):
        ds._read_idx(bad_magic)
    longer = _write_idx(tmp_path / "l-idx1-ubyte.gz", bytes([0, 0, 0x08, 1, 0, 0, 0, 3]), bytes(range(5)))
    with pytest.raises(InputError, match="holds 5 bytes for shape .*longer than its header says"):
        ds._read_idx(longer)
    shorter = _write_idx(tmp_path / "t-idx1-ubyte.gz", bytes([0, 0, 0x08, 1, 0, 0, 0, 3]), bytes(range(2)))
    with pytest.raises(InputError, match="holds 2 bytes for shape .*truncated"):
        ds._read_idx(shorter)
    # A file cut inside its header (3 dims announced, one given) is truncated too, not a numpy error.
    cut = _write_idx(tmp_path / "h-idx3-ubyte.gz", bytes([0, 0, 0x08, 3, 0, 0, 0, 3]), b"")
    with pytest.raises(InputError, match="ends inside its IDX header"):
        ds._read_idx(cut)


# ----------------------------------------------------------------------------------------------- digits splits
def test_digits_splits_are_slices_of_the_seed_0_permutation():
    """The module docstring's split: a fixed permutation with seed 0, train 1,000 / calibration 300 / rest."""
    perm = torch.randperm(1797, generator=torch.Generator().manual_seed(0))
    for split, (start, stop) in (("train", (0, 1000)), ("calibration", (1000, 1300)), ("evaluation", (1300, 1797))):
        assert torch.equal(load_dataset("digits", split).indices, perm[start:stop])


# ------------------------------------------------------------------------------------------------------ CIFAR
@pytest.fixture()
def fake_cifar10(monkeypatch):
    """torchvision's CIFAR10 replaced by 6 training and 7 test images of distinct, non-symmetric HWC pixels."""
    from torchvision import datasets as tvd

    class Fake(tvd.CIFAR10):
        def __init__(self, root: str, train: bool = True, download: bool = False):
            n = 6 if train else 7
            g = np.random.default_rng(0 if train else 1)
            self.data = g.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
            self.targets, self.classes = [int(t) for t in g.integers(0, 10, n)], [str(i) for i in range(10)]

    monkeypatch.setattr(tvd, "CIFAR10", Fake)
    return Fake


def test_cifar_images_are_chw_and_the_test_set_halves_are_disjoint(fake_cifar10, tmp_path):
    test = fake_cifar10(str(tmp_path), train=False)
    calib = load_dataset("cifar10", "calibration", root=str(tmp_path))
    evaluation = load_dataset("cifar10", "evaluation", root=str(tmp_path))
    perm = torch.randperm(7, generator=torch.Generator().manual_seed(0))
    assert torch.equal(calib.indices, perm[:3]) and torch.equal(evaluation.indices, perm[3:])
    for d in (calib, evaluation):
        assert d.images.shape == (len(d), 3, 32, 32)
        for i, j in enumerate(d.indices.tolist()):
            want = torch.from_numpy(test.data[j]).float() / 255  # H, W, C
            for c in range(3):
                torch.testing.assert_close(d.images[i, c], want[:, :, c])
            assert int(d.labels[i]) == test.targets[j]
    train = load_dataset("cifar10", "train", root=str(tmp_path))
    assert torch.equal(train.indices, torch.arange(6))
    # the fingerprint's source names the file the indices point into: both halves index the test set
    assert calib.source == evaluation.source == "cifar10/test" != train.source == "cifar10/train"


# --------------------------------------------------------------------------------------------------- ImageNet
def _tiny_imagenet_folders(root: Path, classes=("n01440764", "n01443537"), per_class=5) -> list[str]:
    from PIL import Image

    g = np.random.default_rng(0)
    files = []
    for c in classes:
        (root / "val" / c).mkdir(parents=True)
        for i in range(per_class):
            name = f"{c}/ILSVRC2012_val_{c[-3:]}{i:05d}.JPEG"
            Image.fromarray(g.integers(0, 256, (36, 44, 3), dtype=np.uint8)).save(root / "val" / name)
            files.append(name)
    return sorted(files)


def test_imagenet_robustbench_subset_is_the_evaluation_split(tmp_path, monkeypatch):
    """With RobustBench's list available and all of its images present: evaluation = those images in the list's
    order, labelled by RobustBench's wnid -> index map; calibration = every other image, in seeded order."""
    files = _tiny_imagenet_folders(tmp_path)
    ids = [files[7], files[2], files[4]]
    wnids = {"n01440764": 7, "n01443537": 3, "n09999999": 0}
    monkeypatch.setattr(ds, "_robustbench_subset", lambda: (ids, wnids))
    evaluation = load_dataset("imagenet", "evaluation", root=str(tmp_path), size=16)
    calib = load_dataset("imagenet", "calibration", root=str(tmp_path), size=16)
    assert evaluation.indices.tolist() == [7, 2, 4]
    others = torch.tensor([i for i in range(10) if i not in (7, 2, 4)])
    assert torch.equal(calib.indices, others[torch.randperm(7, generator=torch.Generator().manual_seed(0))])
    assert evaluation.num_classes == calib.num_classes == 3
    for d in (evaluation, calib):
        assert d.labels.tolist() == [wnids[files[i].split("/")[0]] for i in d.indices.tolist()]


def test_imagenet_ignores_images_outside_the_class_folders(tmp_path):
    """As torchvision's ImageFolder: only val/<class>/ images count; a stray image in val/ itself is no class."""
    from PIL import Image

    files = _tiny_imagenet_folders(tmp_path, per_class=2)
    Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(tmp_path / "val" / "stray.JPEG")
    calib = load_dataset("imagenet", "calibration", root=str(tmp_path), size=8)
    evaluation = load_dataset("imagenet", "evaluation", root=str(tmp_path), size=8)
    assert len(calib) + len(evaluation) == len(files) == 4
    assert sorted(calib.indices.tolist() + evaluation.indices.tolist()) == [0, 1, 2, 3]


def test_imagenet_images_are_resized_to_256_224_and_centre_cropped(tmp_path):
    """RobustBench's Res256Crop224 at size 16: short side to round(16 * 256 / 224) = 18, then the centre 16x16."""
    from PIL import Image

    img = Image.fromarray(np.random.default_rng(3).integers(0, 256, (40, 60, 3), dtype=np.uint8))  # h 40, w 60
    img.save(tmp_path / "a.png")
    got = ds._decode_images([tmp_path / "a.png"], 16)
    short, long_ = 18, int(18 * 60 / 40)
    resized = Image.open(tmp_path / "a.png").convert("RGB").resize((long_, short), Image.BILINEAR)
    left, top = int(round((long_ - 16) / 2)), int(round((short - 16) / 2))
    want = np.asarray(resized.crop((left, top, left + 16, top + 16)), dtype=np.float32) / 255
    np.testing.assert_allclose(got[0].permute(1, 2, 0).numpy(), want, atol=1e-6)


# ------------------------------------------------------------------------------------------------ data
def _dataset(split: str = "calibration", n: int = 5, **changes) -> ImageDataset:
    kw = dict(name="toy", split=split, images=torch.zeros(n, 1, 2, 2), labels=torch.zeros(n, dtype=torch.long),
              num_classes=2, indices=torch.arange(n), source="toy/all")
    kw.update(changes)
    return ImageDataset(**kw)


def test_fingerprint_depends_on_the_split_name_and_source_too():
    ref = _dataset()
    assert _dataset().fingerprint == ref.fingerprint
    assert _dataset(split="evaluation").fingerprint != ref.fingerprint
    assert _dataset(name="other").fingerprint != ref.fingerprint
    assert _dataset(source="toy/other").fingerprint != ref.fingerprint
    assert _dataset(indices=torch.arange(1, 6)).fingerprint != ref.fingerprint


def test_image_dataset_checks_indices_and_dtype():
    with pytest.raises(InputError, match="must match"):
        _dataset(indices=torch.arange(4))
    with pytest.raises(InputError, match="float32"):
        _dataset(images=torch.zeros(5, 1, 2, 2, dtype=torch.float64))


@settings(max_examples=40, deadline=None)
@given(held=st.integers(0, 50), requested=st.integers(0, 60))
def test_shortfall_note_only_when_fewer_images_than_asked(held, requested):
    note = shortfall_note(_dataset(n=held), requested, "--n")
    if held >= requested:
        assert note is None
    else:
        assert note is not None and f"--n {requested}" in note and f"all {held} were used" in note
    assert shortfall_note(_dataset(n=held), None, "--n") is None


class _PlainDatasets:
    """A third party's datasets: one factory without a ``root`` parameter, one returning the wrong type."""

    @hookimpl
    def mixzoo_datasets(self):
        def flipped(split, n=None):
            base = load_dataset("digits", split, n)
            return ImageDataset("test-flipped", split, base.images.flip(-1), base.labels, base.num_classes,
                                base.indices, "digits/flipped")

        return {"test-flipped": flipped, "test-not-a-dataset": lambda split, n=None, root=None: [1, 2]}


def test_a_dataset_without_root_loads_and_a_wrong_return_type_is_named():
    name = register_plugin(_PlainDatasets(), name="test-plain-datasets")
    try:
        data = load_dataset("test-flipped", "calibration", n=5)
        assert len(data) == 5 and torch.equal(data.images, load_dataset("digits", "calibration", 5).images.flip(-1))
        with pytest.raises(InputError, match="reads no data directory"):
            load_dataset("test-flipped", "calibration", root="/tmp")
        with pytest.raises(PluginError, match="returned list; its factory must return mixzoo.zoo.data.ImageDataset"):
            load_dataset("test-not-a-dataset", "evaluation")
    finally:
        unregister_plugin(name)
