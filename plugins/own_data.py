"""A user's own data through the ``mixzoo_datasets`` hook: an ImageFolder tree (``imagefolder``) and arrays in an
``.npz`` file (``npz``).

Both are named with their path: ``--dataset imagefolder:/data/pets`` or ``--dataset /data/pets.npz`` (or ``npz:PATH``,
or ``--dataset imagefolder --data-dir PATH``). Images come out in [0, 1] (each model normalizes inside); the input
size and class count come from the models (``input_size`` / ``num_classes`` of
:func:`mixzoo.zoo.data.load_dataset`), or the data declares them.

``imagefolder``: ``ROOT/<class>/<image>`` (any format PIL reads). Class indices: ``ROOT/classes.txt`` (one class
folder name a line, in the models' class order) when present, else the folder names themselves when all are
integers (``0`` .. ``9``), else the sorted folder names (torchvision's ImageFolder order). Splits:
``ROOT/calibration/`` and ``ROOT/evaluation/`` (and ``ROOT/train/``) when ROOT has them, each an ImageFolder tree;
otherwise calibration = the first half of a seeded (seed 0) permutation of all images and evaluation = the
other half. Images are resized (short side to ``size * 256 / 224``) and centre-cropped to the models' size, or
taken as they are when they already have it; RGB unless the models take one channel.

``npz``: ``images`` (N, H, W[, C] uint8 0-255, or float in [0, 1]; NCHW accepted too) and ``labels`` (N
integers), split into seeded halves as above; or ``calibration_images`` / ``calibration_labels`` and
``evaluation_images`` / ``evaluation_labels`` (and ``train_*``) for a split of your own. An optional
``num_classes`` scalar declares the class count. Loaded with ``allow_pickle=False``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from mixzoo.core.errors import InputError, MissingFileError
from mixzoo_plugins.dataset_dirs import half_split

if TYPE_CHECKING:
    import numpy as np
    import torch

    from mixzoo.zoo.data import ImageDataset

SPLIT_DIRS = ("train", "calibration", "evaluation")


def _root(kind: str, root: str | None) -> Path:
    if not root:
        raise InputError(f"dataset {kind!r} needs a path: --dataset {kind}:PATH (or --data-dir PATH)")
    return Path(root).expanduser()


def _no_train(kind: str, path: Path) -> InputError:
    what = "a train/ folder" if kind == "imagefolder" else "train_images and train_labels"
    return InputError(f"{kind} {path} has no train split; give it {what}, or use a method that needs only"
                      " calibration data")


def _class_count(kind: str, path: Path, found: int, num_classes: int | None) -> int:
    if num_classes is None:
        return found
    if found > num_classes:
        raise InputError(f"{kind} {path} has labels up to {found - 1} but the models have {num_classes} classes;"
                         " give data of the models' task")
    return int(num_classes)


# ------------------------------------------------------------------------------------------------ ImageFolder
def _folder_classes(tree: Path, listed: list[str] | None) -> dict[str, int]:
    names = sorted(p.name for p in tree.iterdir() if p.is_dir())
    if listed is not None:
        unknown = [n for n in names if n not in listed]
        if unknown:
            raise InputError(f"imagefolder {tree}: folder(s) {', '.join(unknown[:3])} are not in classes.txt;"
                             " list every class folder there, in the models' class order")
        return {n: i for i, n in enumerate(listed)}
    if names and all(n.isdigit() for n in names):
        return {n: int(n) for n in names}
    return {n: i for i, n in enumerate(names)}


def _folder_files(tree: Path, classes: dict[str, int]) -> tuple[list[Path], list[int]]:
    from torchvision.datasets.folder import IMG_EXTENSIONS

    files = sorted(p for p in tree.glob("*/*") if p.is_file() and p.suffix.lower() in IMG_EXTENSIONS
                   and p.parent.name in classes)
    return files, [classes[p.parent.name] for p in files]


def _decode(paths: list[Path], size: int | None, channels: int) -> torch.Tensor:
    """Decode to [0, 1] NCHW: as they are when every image has ``size`` (or no size is asked), else resized
    (short side ``size * 256 / 224``) and centre-cropped to ``size``."""
    import torch
    from PIL import Image
    from torchvision.transforms import functional as TF

    mode = "L" if channels == 1 else "RGB"
    out: list[torch.Tensor] = []
    for p in paths:
        try:
            with Image.open(p) as im:
                img = im.convert(mode)
        except OSError as exc:
            raise InputError(f"imagefolder: {p} is not a readable image ({exc}); remove or replace it") from None
        if size is not None and img.size != (size, size):
            img = TF.center_crop(TF.resize(img, round(size * 256 / 224)), size)
        out.append(TF.to_tensor(img))
    shapes = {tuple(t.shape) for t in out}
    if len(shapes) > 1:
        raise InputError(f"imagefolder: images of {len(shapes)} sizes ({', '.join(map(str, sorted(shapes)[:3]))});"
                         " name a model (its input size is used) or resize them to one size")
    return torch.stack(out) if out else torch.empty(0, channels, size or 0, size or 0)


def imagefolder(split: str, n: int | None = None, root: str | None = None, input_size: Any = None,
                num_classes: int | None = None) -> ImageDataset:
    """A user's ImageFolder tree (see the module docstring for classes and splits)."""
    import torch

    from mixzoo.zoo.data import ImageDataset, check_split

    check_split(split)
    path = _root("imagefolder", root)
    if not path.is_dir():
        raise MissingFileError(f"imagefolder {path} is not a directory; pass --dataset imagefolder:DIR where"
                               " DIR/<class>/<image> are your images")
    listed_file = path / "classes.txt"
    listed = ([ln.strip() for ln in listed_file.read_text(encoding="utf-8").splitlines() if ln.strip()]
              if listed_file.is_file() else None)
    split_dirs = [d for d in SPLIT_DIRS if (path / d).is_dir()]
    tree = path / split if split_dirs else path
    if split == "train" and (not split_dirs or not tree.is_dir()):
        raise _no_train("imagefolder", path)
    if not tree.is_dir():
        raise MissingFileError(f"imagefolder {path} has {', '.join(split_dirs)}/ but no {split}/; add it (a"
                               " tree of <class>/<image>) or drop the split folders to get seeded halves")
    classes = _folder_classes(tree, listed)
    files, labels = _folder_files(tree, classes)
    idx = torch.arange(len(files)) if split_dirs else half_split(len(files), split)
    source = f"imagefolder:{path.resolve()}" + (f"/{split}" if split_dirs else "")
    if not files:
        raise MissingFileError(f"imagefolder {path}: no images under {tree}/<class>/; put your images in one folder"
                               " per class")
    idx = idx[:n] if n is not None else idx
    channels, size = (int(input_size[0]), int(input_size[-1])) if input_size is not None else (3, None)
    images = _decode([files[i] for i in idx.tolist()], size, channels)
    label_t = torch.tensor([labels[i] for i in idx.tolist()], dtype=torch.int64)
    count = _class_count("imagefolder", path, max(classes.values()) + 1, num_classes)
    return ImageDataset("imagefolder", split, images, label_t, count, idx, source)


# -------------------------------------------------------------------------------------------------------- npz
def _as_images(arr: np.ndarray, key: str, path: Path) -> torch.Tensor:
    import numpy as np
    import torch

    if arr.ndim == 3:
        arr = arr[:, None]
    if arr.ndim != 4:
        raise InputError(f"npz {path}: {key} has shape {arr.shape}; expected N x H x W [x C] images")
    if arr.shape[1] not in (1, 3) and arr.shape[-1] in (1, 3):
        arr = arr.transpose(0, 3, 1, 2)
    if arr.dtype == np.uint8:
        t = torch.from_numpy(np.ascontiguousarray(arr)).float().div_(255.0)
    elif np.issubdtype(arr.dtype, np.floating):
        t = torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float32))
        if t.numel() and (not torch.isfinite(t).all() or t.min() < 0 or t.max() > 1):
            raise InputError(f"npz {path}: float {key} must lie in [0, 1]; store uint8 0-255 or divide by 255")
    else:
        raise InputError(f"npz {path}: {key} has dtype {arr.dtype}; store uint8 (0-255) or float in [0, 1]")
    return t


def npz(split: str, n: int | None = None, root: str | None = None, input_size: Any = None,
        num_classes: int | None = None) -> ImageDataset:
    """Arrays in a user's ``.npz`` file (see the module docstring for keys and splits)."""
    import numpy as np
    import torch

    from mixzoo.zoo.data import ImageDataset, check_split

    check_split(split)
    path = _root("npz", root)
    if not path.is_file():
        raise MissingFileError(f"npz file {path} does not exist; pass --dataset PATH.npz holding images and labels")
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError) as exc:
        raise InputError(f"npz {path} is not a readable .npz of plain arrays ({exc}); save it with numpy.savez"
                         " (no object arrays)") from None
    if f"{split}_images" in arrays or (split != "train" and "images" not in arrays):
        img_key, lab_key = f"{split}_images", f"{split}_labels"
        idx = None
    else:
        if split == "train":
            raise _no_train("npz", path)
        img_key, lab_key = "images", "labels"
        idx = half_split(len(arrays.get("images", ())), split)
    missing = [k for k in (img_key, lab_key) if k not in arrays]
    if missing:
        raise InputError(f"npz {path} lacks {', '.join(missing)} (it has {', '.join(sorted(arrays)) or 'nothing'});"
                         " store images and labels, or calibration_/evaluation_ images and labels")
    labels_np = arrays[lab_key]
    if labels_np.ndim != 1 or not np.issubdtype(labels_np.dtype, np.integer) or (
            labels_np.size and labels_np.min() < 0):
        raise InputError(f"npz {path}: {lab_key} must be a 1-D array of non-negative integers")
    images = _as_images(arrays[img_key], img_key, path)
    labels = torch.from_numpy(labels_np.astype(np.int64))
    if images.shape[0] != labels.shape[0]:
        raise InputError(f"npz {path}: {images.shape[0]} {img_key} but {labels.shape[0]} {lab_key}; they must match")
    idx = torch.arange(images.shape[0]) if idx is None else idx
    idx = idx[:n] if n is not None else idx
    declared = int(arrays["num_classes"]) if "num_classes" in arrays else None
    every = [arrays[k] for k in arrays if k.endswith("labels") and arrays[k].size]
    found = max(int(a.max()) for a in every) + 1 if every else 0
    count = _class_count("npz", path, found, num_classes if num_classes is not None else declared)
    if declared is not None and num_classes is not None and declared != num_classes:
        raise InputError(f"npz {path} declares num_classes {declared} but the models have {num_classes}")
    return ImageDataset("npz", split, images[idx].contiguous(), labels[idx].clone(), count, idx,
                        f"npz:{path.resolve()}:{img_key}")
