"""Built-in datasets: fashion-mnist, digits, cifar10, cifar100, imagenet (hook ``mixzoo_datasets``).

A data directory the user names (``--data-dir`` or ``$MIXZOO_DATA_DIR``) is the only place looked in, never bypassed
for a system copy nor downloaded into: one that lacks the files is a :class:`~mixzoo.core.errors.MissingFileError`
naming them. Without one, each set has its default below.

Split rules (calibration and evaluation never overlap; zoo models never see calibration images in training):

* ``fashion-mnist``: train = first 55,000 training images, calibration = last 5,000 training images,
  evaluation = the 10,000 test images. Files: the named directory (flat or torchvision's ``FashionMNIST/raw``),
  else the Debian package ``dataset-fashion-mnist`` (``/usr/share/datasets/fashion-mnist``), else torchvision's
  download to ``~/.cache/mixzoo/data`` (unless ``MIXZOO_OFFLINE=1``).
* ``digits``: scikit-learn's 8x8 digits (values / 16) in a fixed permutation (seed 0): train 1,000,
  calibration 300, evaluation 497. It ships with scikit-learn and reads no files: an explicit ``root`` is refused,
  ``$MIXZOO_DATA_DIR`` (a default for the other sets) is ignored.
* ``cifar10`` / ``cifar100``: train = the training set; calibration = a seeded (seed 0) half of the test set,
  evaluation = the other half. Files: torchvision's layout in the named directory, else ``~/.cache/mixzoo/data``
  (downloaded there unless ``MIXZOO_OFFLINE=1``). A named directory whose files fail torchvision's md5 check
  (other images in the same layout) is read when its structure holds (:mod:`mixzoo_plugins.cifar`): every file
  present and whole, every batch of both splits a dict of ``data`` (N x 3072 uint8) and labels, unpickled without
  running code.
* ``imagenet``: an ImageFolder ``root/val``, resized to ``size * 256 / 224`` and centre-cropped to ``size``
  (default 224). Evaluation = RobustBench's 5,000-image subset when robustbench is installed and all of those
  images are in the folder, calibration = the rest in seeded order; otherwise seeded halves of the folder.
  Only the first ``n`` images of a split are decoded.
"""

from __future__ import annotations

import functools
import gzip
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mixzoo.core.errors import InputError, MissingFileError, MixzooError
from mixzoo.core.plugins import hookimpl
from mixzoo.core.reading import read_data
from mixzoo_plugins.cifar import cifar10, cifar100
from mixzoo_plugins.dataset_dirs import dir_problem, half_split, leave_out, offline, seeded_permutation, user_dir

PROVIDES = {  # what `mixzoo plugins` lists
    "datasets": ["cifar10", "cifar100", "digits", "fashion-mnist", "imagefolder", "imagenet", "npz"]}

if TYPE_CHECKING:
    import numpy as np
    import torch

    from mixzoo.zoo.data import ImageDataset

DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
FMNIST_FILES = {("train", "images"): "train-images-idx3-ubyte.gz", ("train", "labels"): "train-labels-idx1-ubyte.gz",
                ("t10k", "images"): "t10k-images-idx3-ubyte.gz", ("t10k", "labels"): "t10k-labels-idx1-ubyte.gz"}
FMNIST_TRAIN, FMNIST_CALIBRATION = 55_000, 5_000
DIGITS_SPLITS = {"train": (0, 1000), "calibration": (1000, 1300), "evaluation": (1300, 1797)}


# ----------------------------------------------------------------------------------------------- Fashion-MNIST
def _read_idx(path: Path) -> np.ndarray:
    """Parse a (gzipped) IDX file: magic (0, 0, dtype 0x08, ndim), big-endian dims, uint8 payload."""
    import numpy as np

    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as fh:
            data = fh.read()
    except EOFError:
        raise InputError(f"{path} ends inside its gzip stream: the file is truncated; re-download it") from None
    except (gzip.BadGzipFile, zlib.error) as exc:
        raise InputError(f"{path} is not a valid gzip file ({exc}); re-download it, or gunzip it and drop the .gz"
                         " suffix if it is a plain IDX file") from None
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise InputError(f"{path} is not an unsigned-byte IDX file; re-download it")
    ndim = data[3]
    if len(data) < 4 + 4 * ndim:
        raise InputError(f"{path} ends inside its IDX header; the file is truncated, re-download it")
    dims = tuple(int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    arr = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if arr.size != int(np.prod(dims)):
        what = "truncated" if arr.size < int(np.prod(dims)) else "longer than its header says"
        raise InputError(f"{path} holds {arr.size} bytes for shape {dims}; the file is {what}, re-download it")
    return arr.reshape(dims)


def _fmnist_dir_has_files(d: Path) -> Path | None:
    """``d`` or its torchvision layout ``d/FashionMNIST/raw`` if it holds all four IDX files (gzipped or not)."""
    for cand in (d, d / "FashionMNIST" / "raw", d / "fashion-mnist"):
        if all((cand / f).exists() or (cand / f[:-3]).exists() for f in FMNIST_FILES.values()):
            return cand
    return None


def find_fashion_mnist(root: str | None = None) -> Path:
    """The directory holding the Fashion-MNIST IDX files: the named one (or an error), else the Debian copy,
    else torchvision's download."""
    user = user_dir(root)
    if user is not None:
        found = _fmnist_dir_has_files(user) if user.is_dir() else None
        if found is None:
            missing = min(([f for f in FMNIST_FILES.values() if not (d / f).exists() and not (d / f[:-3]).exists()]
                           for d in (user, user / "FashionMNIST" / "raw", user / "fashion-mnist")), key=len)
            lacks = "" if not user.is_dir() else " holds no Fashion-MNIST files" if len(missing) == len(
                FMNIST_FILES) else f" lacks {', '.join(missing)}"
            raise MissingFileError(
                f"Fashion-MNIST: {dir_problem(user, root)}{lacks}; put {', '.join(FMNIST_FILES.values())}"
                f" (gzipped or not) in it or in its FashionMNIST/raw/, or {leave_out(root)} to use the Debian"
                " package (apt-get install dataset-fashion-mnist) or torchvision's download"
            )
        return found
    found = _fmnist_dir_has_files(DEBIAN_FASHION_MNIST)
    if found is not None:
        return found
    try:
        if offline():
            raise OSError("MIXZOO_OFFLINE is set")
        from torchvision.datasets import FashionMNIST

        target = Path.home() / ".cache" / "mixzoo" / "data"
        for train in (True, False):
            FashionMNIST(str(target), train=train, download=True)
        return target / "FashionMNIST" / "raw"
    except Exception as exc:  # noqa: BLE001 - any download failure means: not available offline
        raise MissingFileError(
            f"Fashion-MNIST not found and could not be downloaded ({type(exc).__name__}); run"
            " `apt-get install dataset-fashion-mnist` or pass --data-dir DIR holding"
            " train/t10k-{images-idx3,labels-idx1}-ubyte.gz"
        ) from exc


@functools.cache
def _fmnist_arrays(directory: str, part: str) -> tuple[torch.Tensor, torch.Tensor]:
    import numpy as np
    import torch

    d = Path(directory)

    def path(kind: str) -> Path:
        f = d / FMNIST_FILES[(part, kind)]
        return f if f.exists() else f.with_suffix("")

    images = torch.from_numpy(_read_idx(path("images")).copy())
    labels = torch.from_numpy(_read_idx(path("labels")).astype(np.int64))
    return images, labels


def fashion_mnist(split: str, n: int | None = None, root: str | None = None) -> ImageDataset:
    """Fashion-MNIST (Xiao et al. 2017), 1x28x28, 10 classes; see the module docstring for the splits."""
    import torch

    from mixzoo.zoo.data import ImageDataset, check_split

    check_split(split)
    directory = find_fashion_mnist(root)
    part = "t10k" if split == "evaluation" else "train"
    images, labels = _fmnist_arrays(str(directory), part)
    if split == "train":
        idx = torch.arange(FMNIST_TRAIN)
    elif split == "calibration":
        idx = torch.arange(FMNIST_TRAIN, FMNIST_TRAIN + FMNIST_CALIBRATION)
    else:
        idx = torch.arange(images.shape[0])
    idx = idx[:n] if n is not None else idx
    return ImageDataset("fashion-mnist", split, images[idx].unsqueeze(1).float().div_(255.0), labels[idx].clone(),
                        10, idx, f"fashion-mnist/{part}")


# ------------------------------------------------------------------------------------------------------ digits
@functools.cache
def _digits_arrays() -> tuple[torch.Tensor, torch.Tensor]:
    import numpy as np
    import torch
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = torch.from_numpy(bunch.images.astype(np.float32) / 16.0).unsqueeze(1)
    return images, torch.from_numpy(bunch.target.astype(np.int64))


def digits(split: str, n: int | None = None, root: str | None = None) -> ImageDataset:
    """scikit-learn digits, 1x8x8 in [0, 1], 10 classes, split 1000/300/497 (see the module docstring); a ``root``
    raises :class:`InputError` rather than being ignored."""
    from mixzoo.zoo.data import ImageDataset, check_split

    check_split(split)
    if root:
        raise InputError(f"digits ships with scikit-learn and reads no data directory, so --data-dir {root} would"
                         " be ignored; leave out --data-dir")
    images, labels = _digits_arrays()
    start, stop = DIGITS_SPLITS[split]
    idx = seeded_permutation(images.shape[0])[start:stop]
    idx = idx[:n] if n is not None else idx
    return ImageDataset("digits", split, images[idx].clone(), labels[idx].clone(), 10, idx, "sklearn/digits")


# -------------------------------------------------------------------------------------------------- ImageNet
def _robustbench_subset() -> tuple[list[str], dict[str, int]] | None:
    """RobustBench's 5,000 evaluation image ids and its wnid -> class-index map, if robustbench is importable."""
    try:
        from mixzoo.core.compat import import_robustbench

        rb = import_robustbench()
    except Exception:  # noqa: BLE001 - robustbench is optional here
        return None
    helper = Path(rb.__file__).parent / "helper_files"
    try:
        ids = [line.strip() for line in (helper / "imagenet_test_image_ids.txt").read_text().splitlines()
               if line.strip()]
        wnids = read_data(helper / "imagenet_class_to_id_map.json", "json")
    except (OSError, MixzooError):
        return None
    return ids, wnids


def imagenet(split: str, n: int | None = None, root: str | None = None, size: int = 224) -> ImageDataset:
    """ImageNet validation images from the ImageFolder ``root/val`` (see the module docstring for the splits)."""
    import torch

    from mixzoo.zoo.data import ImageDataset, check_split

    check_split(split)
    if split == "train":
        raise InputError("imagenet has no train split in mixzoo; use split 'calibration' or 'evaluation'")
    user = user_dir(root)
    if user is None:
        raise MissingFileError("ImageNet cannot be downloaded; pass --data-dir ROOT where ROOT/val/<wnid>/*.JPEG is"
                               " the ImageNet validation set")
    val = user / "val"
    if not val.is_dir():
        where = dir_problem(user, root) if not user.is_dir() else f"{dir_problem(user, root)} has no val/"
        raise MissingFileError(f"ImageNet: {where}; pass --data-dir ROOT where ROOT/val/<wnid>/*.JPEG is the"
                               " ImageNet validation set")
    from torchvision.datasets.folder import IMG_EXTENSIONS

    files = sorted(str(p.relative_to(val)) for p in val.rglob("*")
                   if p.is_file() and p.suffix.lower() in IMG_EXTENSIONS and p.parent != val)
    if not files:
        raise MissingFileError(f"no images under {val}/<class>/; pass --data-dir ROOT with ROOT/val/<wnid>/*.JPEG")
    classes = sorted({f.split("/")[0] for f in files})
    rb = _robustbench_subset()
    class_index = rb[1] if rb is not None and set(classes) <= set(rb[1]) else {c: i for i, c in enumerate(classes)}
    num_classes = len(class_index)
    position = {f: i for i, f in enumerate(files)}
    if rb is not None and all(f in position for f in rb[0]):
        eval_idx = torch.tensor([position[f] for f in rb[0]])
        rest = torch.ones(len(files), dtype=torch.bool)
        rest[eval_idx] = False
        others = torch.nonzero(rest).flatten()
        calib_idx = others[seeded_permutation(others.numel())]
        idx, source = (eval_idx if split == "evaluation" else calib_idx), "imagenet/val (robustbench 5000 subset)"
    else:
        idx, source = half_split(len(files), split), "imagenet/val"
    idx = idx[:n] if n is not None else idx
    images = _decode_images([val / files[i] for i in idx.tolist()], size)
    labels = torch.tensor([class_index[files[i].split("/")[0]] for i in idx.tolist()], dtype=torch.int64)
    return ImageDataset("imagenet", split, images, labels, num_classes, idx, source)


def _decode_images(paths: list[Path], size: int) -> torch.Tensor:
    """Resize the short side to ``size * 256 / 224`` and centre-crop ``size`` (RobustBench's Res256Crop224)."""
    import torch
    from PIL import Image
    from torchvision.transforms import functional as TF

    out = torch.empty(len(paths), 3, size, size)
    resize = round(size * 256 / 224)
    for i, p in enumerate(paths):
        with Image.open(p) as im:
            img = TF.center_crop(TF.resize(im.convert("RGB"), resize), size)
            out[i] = TF.to_tensor(img)
    return out


@hookimpl
def mixzoo_datasets() -> dict[str, Any]:
    from mixzoo_plugins.own_data import imagefolder, npz

    return {"fashion-mnist": fashion_mnist, "digits": digits, "cifar10": cifar10, "cifar100": cifar100,
            "imagenet": imagenet, "imagefolder": imagefolder, "npz": npz}
