"""Stand-in data a user would bring, built in a test's tmp_path: a CIFAR-10 folder in torchvision's layout with
generated images (so it fails torchvision's md5 check), an ImageFolder tree and an ``.npz`` file."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path

import numpy as np

Labeller = Callable[[np.ndarray], np.ndarray]  # N x H x W x 3 uint8 images -> N labels


def write_cifar10(root: Path, n_train: int = 10, n_test: int = 16, seed: int = 0,
                  labeller: Labeller | None = None) -> Path:
    """``root/cifar-10-batches-py/`` as torchvision writes it: five training batches, a test batch and meta,
    each a pickled dict of ``data`` (N x 3072 uint8, CHW rows) and ``labels`` (random, or ``labeller``'s)."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    g = np.random.default_rng(seed)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for name in names:
        n = n_test if name == "test_batch" else n_train
        data = g.integers(0, 256, (n, 3072), dtype=np.uint8)
        labels = g.integers(0, 10, n) if labeller is None else labeller(
            data.reshape(n, 3, 32, 32).transpose(0, 2, 3, 1))
        entry = {"batch_label": name, "data": data, "labels": [int(v) for v in labels],
                 "filenames": [f"{i}.png" for i in range(n)]}
        with open(folder / name, "wb") as fh:
            pickle.dump(entry, fh)
    with open(folder / "batches.meta", "wb") as fh:
        pickle.dump({"label_names": [f"class{i}" for i in range(10)], "num_cases_per_batch": n_train}, fh)
    return root


def write_imagefolder(root: Path, classes: int = 10, per_class: int = 2, size: tuple[int, int] = (32, 32),
                      seed: int = 0, labeller: Labeller | None = None) -> Path:
    """``root/<k>/<i>.png`` for class folders ``0`` .. ``classes - 1`` (integer names: class index = name):
    ``per_class`` images each, or with ``labeller``, ``classes * per_class`` images in the folders it says."""
    from PIL import Image

    g = np.random.default_rng(seed)
    images = g.integers(0, 256, (classes * per_class, *size, 3), dtype=np.uint8)
    labels = np.repeat(np.arange(classes), per_class) if labeller is None else labeller(images)
    for i, (image, k) in enumerate(zip(images, labels, strict=True)):
        (root / str(int(k))).mkdir(parents=True, exist_ok=True)
        Image.fromarray(image).save(root / str(int(k)) / f"{i}.png")
    return root


def write_npz(path: Path, n: int = 16, classes: int = 10, size: int = 32, seed: int = 0,
              labeller: Labeller | None = None, **extra: np.ndarray) -> Path:
    """``images`` (N, H, W, 3 uint8) and ``labels`` (random, or ``labeller``'s) in ``path``, plus any ``extra``
    arrays."""
    g = np.random.default_rng(seed)
    images = g.integers(0, 256, (n, size, size, 3), dtype=np.uint8)
    labels = g.integers(0, classes, n) if labeller is None else labeller(images)
    np.savez(path, images=images, labels=labels, **extra)
    return path
