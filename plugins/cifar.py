"""CIFAR-10 and CIFAR-100 in torchvision's layout (see :mod:`mixzoo_plugins.datasets` for the rules): through
torchvision when its md5 check passes, else, in a folder the user names, every file checked whole and each batch
read as plain arrays without running pickled code."""

from __future__ import annotations

import functools
import pickle
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from mixzoo.core.errors import InputError, MissingFileError
from mixzoo.zoo.files import whole_pickle
from mixzoo_plugins.dataset_dirs import dir_problem, half_split, leave_out, offline, user_dir

if TYPE_CHECKING:
    from mixzoo.zoo.data import ImageDataset


def cifar(name: str, split: str, n: int | None = None, root: str | None = None) -> ImageDataset:
    """CIFAR-10 or CIFAR-100 (``name``) in torchvision's layout under ``root``; calibration/evaluation are seeded
    halves of the test set."""
    import torch

    from mixzoo.zoo.data import ImageDataset, check_split

    check_split(split)
    from torchvision import datasets as tvd

    cls = tvd.CIFAR10 if name == "cifar10" else tvd.CIFAR100
    user = user_dir(root)
    directory = user or Path.home() / ".cache" / "mixzoo" / "data"
    train = split == "train"
    try:
        ds = cls(str(directory), train=train, download=False)
    except RuntimeError:  # torchvision: "Dataset not found or corrupted"
        if user is not None:
            ds = _cifar_unchecked(name, cls, user, root, train)
        else:
            try:
                if offline():
                    raise OSError("MIXZOO_OFFLINE is set") from None
                ds = cls(str(directory), train=train, download=True)
            except Exception as exc:  # noqa: BLE001 - any download failure means: not available offline
                raise MissingFileError(
                    f"{name} not found in {directory} and could not be downloaded ({type(exc).__name__});"
                    f" pass --data-dir DIR holding torchvision's {cls.base_folder}/"
                ) from exc
    data, targets = torch.from_numpy(ds.data), torch.tensor(ds.targets, dtype=torch.int64)
    idx = torch.arange(data.shape[0]) if train else half_split(data.shape[0], split)
    idx = idx[:n] if n is not None else idx
    images = data[idx].permute(0, 3, 1, 2).float().div_(255.0).contiguous()
    part = "train" if train else "test"
    return ImageDataset(name, split, images, targets[idx].clone(), len(ds.classes), idx, f"{name}/{part}")


class _ArraysOnly(pickle.Unpickler):
    """Unpickles CIFAR batches (dicts of numpy arrays, lists, strings) and nothing that could run code."""

    ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
               ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
               ("numpy._core.multiarray", "scalar"), ("_codecs", "encode")}

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a CIFAR batch")
        return super().find_class(module, name)


def _cifar_unchecked(name: str, cls: Any, user: Path, root: str | None, train: bool) -> SimpleNamespace:
    """A CIFAR folder in torchvision's layout whose files fail torchvision's md5 check (a copy with other images
    than the published set): every file present and whole (:func:`~mixzoo.zoo.files.whole_pickle`), every batch,
    those of the other split too, a dict of a uint8 ``data`` array of N x 3072 and N labels, read without running
    pickled code; anything else raises the folder error. The split's batches are returned (``data``, ``targets``,
    ``classes``, as torchvision's data set has them)."""
    import numpy as np

    folder = user / cls.base_folder
    expected = [f for f, _ in cls.train_list + cls.test_list] + [cls.meta["filename"]]
    if not user.is_dir() or not all(whole_pickle(folder / f) for f in expected):  # what torchvision's loader lacks
        missing = [f for f in expected if not (folder / f).is_file()]
        broken = [f for f in expected if f not in missing and not whole_pickle(folder / f)]
        if not user.is_dir():
            state = ""
        elif not folder.is_dir():
            state = f" has no {cls.base_folder}/"
        elif missing:
            state = f" lacks {', '.join(f'{cls.base_folder}/{f}' for f in missing)}"
        elif broken:
            state = f" has {', '.join(f'{cls.base_folder}/{f}' for f in broken)} cut short (not a whole pickle)"
        else:
            state = f" has {cls.base_folder}/ but its files fail torchvision's md5 check (corrupt or partial)"
        raise MissingFileError(
            f"{name} not found: {dir_problem(user, root)}{state}; put torchvision's {cls.base_folder}/"
            f" ({', '.join(expected)}, from {cls.filename}) in it, or {leave_out(root)} to use (or download to)"
            " ~/.cache/mixzoo/data"
        )
    label_key = "labels" if name == "cifar10" else "fine_labels"
    own = {f for f, _ in (cls.train_list if train else cls.test_list)}
    data, targets = [], []
    for fname, _ in cls.train_list + cls.test_list:
        path = folder / fname
        try:
            with open(path, "rb") as fh:
                entry = _ArraysOnly(fh, encoding="latin1").load()
            arr = np.asarray(entry["data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
            labels = [int(v) for v in entry[label_key]]
        except (pickle.UnpicklingError, EOFError, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InputError(f"{name}: {path} is not a CIFAR batch in torchvision's format (a pickled dict with"
                             f" 'data' (N x 3072 uint8) and '{label_key}'): {exc}; re-create it") from None
        if len(labels) != arr.shape[0]:
            raise InputError(f"{name}: {path} has {arr.shape[0]} images but {len(labels)} labels; re-create it")
        if fname in own:
            data.append(arr)
            targets.extend(labels)
    images = np.concatenate(data).transpose(0, 2, 3, 1)
    classes = [str(i) for i in range(10 if name == "cifar10" else 100)]
    if targets and (min(targets) < 0 or max(targets) >= len(classes)):
        raise InputError(f"{name}: labels in {folder} lie outside [0, {len(classes)}); re-create the files")
    return SimpleNamespace(data=images, targets=targets, classes=classes)


cifar10 = functools.partial(cifar, "cifar10")
cifar100 = functools.partial(cifar, "cifar100")
