"""A user's own data: ImageFolder trees, .npz arrays and CIFAR folders that fail torchvision's md5 check."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from own_data import write_cifar10, write_imagefolder, write_npz

from mixzoo.core.errors import InputError, MissingFileError
from mixzoo.zoo.data import load_dataset, split_dataset_name


def test_a_cifar_folder_with_other_images_is_read_not_refused_by_md5(tmp_path):
    write_cifar10(tmp_path, n_test=16)
    calib = load_dataset("cifar10", "calibration", root=str(tmp_path))
    evaluation = load_dataset("cifar10", "evaluation", root=str(tmp_path))
    with open(tmp_path / "cifar-10-batches-py" / "test_batch", "rb") as fh:
        test = pickle.load(fh)
    perm = torch.randperm(16, generator=torch.Generator().manual_seed(0))
    assert torch.equal(calib.indices, perm[:8]) and torch.equal(evaluation.indices, perm[8:])
    want = torch.from_numpy(test["data"].reshape(-1, 3, 32, 32)).float() / 255
    torch.testing.assert_close(evaluation.images, want[perm[8:]])
    assert evaluation.labels.tolist() == [test["labels"][i] for i in perm[8:].tolist()]
    assert len(load_dataset("cifar10", "train", root=str(tmp_path))) == 50


def test_a_cifar_folder_missing_a_batch_or_holding_code_is_refused(tmp_path):
    write_cifar10(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").unlink()
    with pytest.raises(MissingFileError, match="lacks cifar-10-batches-py/data_batch_3"):
        load_dataset("cifar10", "evaluation", root=str(tmp_path))

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    other = tmp_path / "other"
    write_cifar10(other)
    with open(other / "cifar-10-batches-py" / "test_batch", "wb") as fh:
        pickle.dump({"data": Evil(), "labels": [0]}, fh)
    with pytest.raises(InputError, match="builtins.print is not allowed"):
        load_dataset("cifar10", "evaluation", root=str(other))


def test_imagefolder_by_path_gives_seeded_disjoint_halves_resized_to_the_models(tmp_path):
    write_imagefolder(tmp_path / "pets", classes=10, per_class=2, size=(40, 48))
    name = f"imagefolder:{tmp_path / 'pets'}"
    calib = load_dataset(name, "calibration", input_size=(3, 32, 32), num_classes=10)
    evaluation = load_dataset(name, "evaluation", input_size=(3, 32, 32), num_classes=10)
    perm = torch.randperm(20, generator=torch.Generator().manual_seed(0))
    assert torch.equal(calib.indices, perm[:10]) and torch.equal(evaluation.indices, perm[10:])
    assert calib.images.shape == (10, 3, 32, 32) and calib.num_classes == 10
    files = sorted((tmp_path / "pets").glob("*/*"))
    assert calib.labels.tolist() == [int(files[i].parent.name) for i in perm[:10].tolist()]
    assert calib.fingerprint != evaluation.fingerprint
    # without a model's size, images of one size are taken as they are; of several sizes, refused
    assert load_dataset(name, "evaluation").images.shape[-2:] == (40, 48)
    write_imagefolder(tmp_path / "pets" / "10", classes=1, per_class=1, size=(20, 20), seed=1)
    (tmp_path / "pets" / "10" / "0" / "0.png").rename(tmp_path / "pets" / "10" / "x.png")
    with pytest.raises(InputError, match="name a model"):
        load_dataset(name, "evaluation")


def test_imagefolder_class_order_from_classes_txt_and_split_folders(tmp_path):
    root = tmp_path / "data"
    for split in ("calibration", "evaluation"):
        write_imagefolder(root / split, classes=3, per_class=1, size=(8, 8))
        for k, label in enumerate(("cat", "dog", "ant")):
            (root / split / str(k)).rename(root / split / label)
    (root / "classes.txt").write_text("dog\ncat\nant\n")
    calib = load_dataset("imagefolder", "calibration", root=str(root))
    assert calib.labels.tolist() == [2, 1, 0]  # sorted files: ant, cat, dog -> classes.txt order
    assert torch.equal(calib.indices, torch.arange(3)) and calib.source.endswith("/calibration")
    with pytest.raises(InputError, match="no train split"):
        load_dataset("imagefolder", "train", root=str(root))


def test_npz_by_path_halves_or_its_own_splits(tmp_path):
    path = write_npz(tmp_path / "mine.npz", n=16)
    assert split_dataset_name(str(path)) == ("npz", str(path))
    calib = load_dataset(str(path), "calibration", num_classes=10)
    evaluation = load_dataset(str(path), "evaluation", num_classes=10)
    assert set(calib.indices.tolist()).isdisjoint(evaluation.indices.tolist()) and len(calib) == 8
    raw = np.load(path)
    torch.testing.assert_close(evaluation.images, torch.from_numpy(raw["images"]).permute(0, 3, 1, 2).float()[
        evaluation.indices] / 255)
    assert calib.num_classes == 10
    g = np.random.default_rng(1)
    own = tmp_path / "own.npz"
    np.savez(own, calibration_images=g.random((4, 1, 8, 8), dtype=np.float32), calibration_labels=np.arange(4),
             evaluation_images=g.random((3, 1, 8, 8), dtype=np.float32), evaluation_labels=np.arange(3),
             num_classes=np.array(5))
    ev = load_dataset(f"npz:{own}", "evaluation")
    assert ev.labels.tolist() == [0, 1, 2] and ev.num_classes == 5 and ev.images.shape == (3, 1, 8, 8)


def test_npz_bad_input_is_one_line(tmp_path):
    bad = tmp_path / "bad.npz"
    np.savez(bad, images=np.zeros((2, 8, 8), np.uint8))
    with pytest.raises(InputError, match="lacks labels"):
        load_dataset(str(bad), "evaluation")
    np.savez(bad, images=np.full((2, 8, 8), 3.0), labels=np.arange(2))
    with pytest.raises(InputError, match=r"must lie in \[0, 1\]"):
        load_dataset(str(bad), "evaluation")
    with pytest.raises(InputError, match="give the path once"):
        load_dataset(f"npz:{bad}", "evaluation", root=str(tmp_path / "else.npz"))
    with pytest.raises(MissingFileError, match="does not exist"):
        load_dataset(str(tmp_path / "none.npz"), "evaluation")
    with pytest.raises(InputError, match="up to 9 but the models have 3"):
        load_dataset(str(write_npz(tmp_path / "ten.npz", n=40)), "evaluation", num_classes=3)


def test_certify_and_a_linear_mix_take_an_npz_by_path(tmp_path):
    """A user's 8x8 grey images as an .npz, by path, for the built-in digits models: classes from the models."""
    from mixzoo.certify.run import certify
    from mixzoo.core.card import MixCard
    from mixzoo.methods import fit

    g = np.random.default_rng(0)
    path = tmp_path / "digits-like.npz"
    np.savez(path, images=g.random((24, 8, 8), dtype=np.float32), labels=g.integers(0, 3, 24))
    result = certify(rbc="digits-lip", abc="digits-std", alphas=[0.8], n=12, radii=[0.0, 0.1], dataset=str(path),
                     progress=False)
    assert result.settings["dataset"] == str(path) and result.settings["n"] == 12
    fit("mixednuts", abc="digits-std", rbc="digits-pgd", dataset=str(path), n_calib=8, out=tmp_path / "m.toml",
        progress=False, options={"n_iter": 2, "n_restarts": 1, "n_target_classes": 1}, eps=0.001)
    card = MixCard.load(tmp_path / "m.toml")
    assert card.dataset == str(path) and card.data["n"] == 8 and card.data["source"].startswith("npz:")


@pytest.mark.parametrize("cut", ["data_batch_3", "batches.meta"])
def test_a_cifar_folder_with_a_truncated_file_is_refused_and_listed_missing(tmp_path, cut):
    """A file of the other split cut short: the evaluation split is refused, naming it, and `fetch-list` does not
    list it as present (every file of the folder is checked, not only the split's own batches)."""
    from mixzoo.zoo.files import dataset_files, whole_pickle

    write_cifar10(tmp_path)
    path = tmp_path / "cifar-10-batches-py" / cut
    assert whole_pickle(path)
    path.write_bytes(path.read_bytes()[:path.stat().st_size * 2 // 3])  # a download cut off
    assert not whole_pickle(path)
    with pytest.raises(MissingFileError, match=f"cifar-10-batches-py/{cut} cut short"):
        load_dataset("cifar10", "evaluation", root=str(tmp_path))
    listed = {Path(f.path).name: f.present for f in dataset_files("cifar10", root=str(tmp_path))}
    assert listed[cut] is False and listed["test_batch"] is True


def test_a_cifar_batch_of_the_other_split_that_is_not_a_batch_is_refused(tmp_path):
    write_cifar10(tmp_path)
    with open(tmp_path / "cifar-10-batches-py" / "data_batch_2", "wb") as fh:
        pickle.dump({"data": np.zeros((3, 5), dtype=np.uint8), "labels": [0, 1, 2]}, fh)
    with pytest.raises(InputError, match="data_batch_2 is not a CIFAR batch"):
        load_dataset("cifar10", "evaluation", root=str(tmp_path))
