"""Datasets through the ``mixzoo_datasets`` hook: :class:`ImageDataset` and :func:`load_dataset`.

MixedNUTS fits its four parameters on a *calibration* set and is judged on an *evaluation* set (Bai et al. 2024a, Sec.
4.3, Algorithm 1); the two must never overlap, and the built-in zoo models are never trained on calibration images.
Every dataset plugin returns an :class:`ImageDataset` for the splits ``"train"``, ``"calibration"`` and
``"evaluation"``, carrying the indices into its source set so that results can be traced to exact images.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace

import torch

from mixzoo.core.errors import InputError, PluginError

SPLITS: tuple[str, ...] = ("train", "calibration", "evaluation")


@dataclass(frozen=True, eq=False)
class ImageDataset:
    """Images in [0, 1] (NCHW float32) with integer labels; ``indices[i]`` is the position of example ``i`` in
    ``source`` (e.g. ``"fashion-mnist/t10k"``), so the :attr:`fingerprint` identifies exactly which images were used."""

    name: str
    split: str
    images: torch.Tensor
    labels: torch.Tensor
    num_classes: int
    indices: torch.Tensor
    source: str

    def __post_init__(self) -> None:
        n = self.images.shape[0]
        if self.images.ndim != 4 or self.images.dtype != torch.float32:
            raise InputError(f"dataset {self.name!r}: images must be NCHW float32, got {self.images.dtype}"
                             f" {tuple(self.images.shape)}")
        if self.labels.shape != (n,) or self.indices.shape != (n,):
            raise InputError(f"dataset {self.name!r}: {n} images but {tuple(self.labels.shape)} labels and"
                             f" {tuple(self.indices.shape)} indices; they must match")

    def __len__(self) -> int:
        return int(self.images.shape[0])

    @property
    def input_size(self) -> tuple[int, int, int]:
        return tuple(self.images.shape[1:])  # type: ignore[return-value]

    @property
    def fingerprint(self) -> str:
        """First 16 hex digits of sha256 over name, split, source and the source indices."""
        h = hashlib.sha256(f"{self.name}|{self.split}|{self.source}|".encode())
        h.update(self.indices.to(torch.int64).contiguous().numpy().tobytes())
        return h.hexdigest()[:16]

    def subset(self, n: int | None) -> ImageDataset:
        """The first ``n`` examples (deterministic); ``None`` or ``n >= len`` returns ``self``."""
        if n is None or n >= len(self):
            return self
        if n < 0:
            raise InputError(f"n must be non-negative, got {n}")
        return replace(self, images=self.images[:n], labels=self.labels[:n], indices=self.indices[:n])

    def __repr__(self) -> str:
        return (f"ImageDataset(name={self.name!r}, split={self.split!r}, n={len(self)},"
                f" input_size={self.input_size}, num_classes={self.num_classes}, source={self.source!r})")


def check_split(split: str) -> str:
    """Raise :class:`InputError` unless ``split`` is one of :data:`SPLITS`."""
    if split not in SPLITS:
        raise InputError(f"unknown split {split!r}; use one of {', '.join(SPLITS)}")
    return split


def split_dataset_name(name: str, root: str | None = None) -> tuple[str, str | None]:
    """``(dataset, root)`` for a dataset named with its path: ``KIND:PATH`` (``imagefolder:/data/pets``) where
    ``KIND`` is a dataset name, or a path ending in ``.npz`` (``npz``); other names are returned as they are. A
    path in the name and a different ``root`` (``--data-dir``) at once raise :class:`InputError`."""
    from mixzoo.core.plugins import table

    kind, sep, path = name.partition(":")
    if sep and path and kind in table("dataset"):
        named = path
    elif name.lower().endswith(".npz") and name not in table("dataset"):
        kind, named = "npz", name
    else:
        return name, root
    if root and root != named:
        raise InputError(f"--dataset {name} names its path and --data-dir {root} names another; give the path once")
    return kind, named


def load_dataset(name: str, split: str, n: int | None = None, root: str | None = None,
                 **options: object) -> ImageDataset:
    """Split ``split`` of dataset ``name`` (first ``n`` examples) through the ``mixzoo_datasets`` hook. ``root``: the
    data's directory, also given in the name (``imagefolder:PATH``, ``PATH.npz``: :func:`split_dataset_name`).
    ``options`` go to the factory (``size=224`` for ``imagenet``); ``input_size`` and ``num_classes`` (what the
    models take) only to factories whose signature names them. Unknown names raise
    :class:`~mixzoo.core.errors.UnknownNameError` with suggestions."""
    import inspect

    from mixzoo.core.plugins import lookup

    name, root = split_dataset_name(name, root)
    factory = lookup("dataset", name)
    check_split(split)
    if n is not None and (not isinstance(n, int) or n < 0):
        raise InputError(f"n must be a non-negative integer or None, got {n!r}")
    try:
        accepted = inspect.signature(getattr(factory, "_target", factory)).parameters
    except (TypeError, ValueError):
        accepted = {}
    for key in ("input_size", "num_classes"):
        if key in options and key not in accepted:
            options.pop(key)
    kinds = [p.kind for p in accepted.values()]  # a factory without a root parameter is called without one
    takes_root = not accepted or inspect.Parameter.VAR_POSITIONAL in kinds or sum(
        k in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD) for k in kinds) >= 3
    if not takes_root and root is not None:
        raise InputError(f"dataset {name!r} reads no data directory; leave out --data-dir / root")
    dataset = factory(split, n, root, **options) if takes_root else factory(split, n, **options)
    if not isinstance(dataset, ImageDataset):
        raise PluginError(f"dataset {name!r} returned {type(dataset).__name__}; its factory must return"
                          " mixzoo.zoo.data.ImageDataset(name, split, images, labels, num_classes, indices, source)")
    return dataset.subset(n)


def model_options(*models: object) -> dict[str, object]:
    """``input_size`` and ``num_classes`` of the first of ``models`` whose spec gives them (options for
    :func:`load_dataset`, used by datasets that do not declare their own)."""
    for model in models:
        spec = getattr(model, "spec", None)
        if spec is not None:
            return {"input_size": tuple(spec.input_size), "num_classes": int(spec.num_classes)}
    return {}


def shortfall_note(data: ImageDataset, requested: int | None, option: str) -> str | None:
    """A one-line note when ``requested`` examples were asked for (with ``option``) but the split holds fewer, so
    a user who asked for 100,000 calibration images learns that every image of the split was used instead."""
    if requested is None or len(data) >= requested:
        return None
    return (f"{option} {requested} asked for more images than the {data.name} {data.split} split holds;"
            f" all {len(data)} were used")
