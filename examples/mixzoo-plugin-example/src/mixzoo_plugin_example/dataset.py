"""A dataset: mixzoo's ``digits`` with inverted intensities (1 - x), split as ``digits`` is.

A dataset factory takes ``(split, n, root)`` and returns a :class:`mixzoo.zoo.data.ImageDataset` (images in [0, 1],
NCHW float32) for the splits ``train``, ``calibration`` and ``evaluation``, which must never overlap; ``indices``
are the examples' positions in ``source``, so the data set's fingerprint names exactly which images were used.
"""

from __future__ import annotations

from mixzoo.zoo.data import ImageDataset, load_dataset

NAME = "example-inverted-digits"


def inverted_digits(split: str, n: int | None = None, root: str | None = None) -> ImageDataset:
    """Split ``split`` of ``digits`` (its first ``n`` examples), every pixel x replaced by 1 - x."""
    base = load_dataset("digits", split, n)
    return ImageDataset(NAME, split, 1.0 - base.images, base.labels, base.num_classes, base.indices,
                        f"{base.source}/inverted")
