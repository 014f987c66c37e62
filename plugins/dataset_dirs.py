"""Where the built-in data sets look for their files and how their splits are drawn, shared by
:mod:`mixzoo_plugins.datasets` and :mod:`mixzoo_plugins.cifar` (the rules are in the former's docstring)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

SPLIT_SEED = 0


def offline() -> bool:
    return os.environ.get("MIXZOO_OFFLINE", "") not in ("", "0")


def user_dir(root: str | None) -> Path | None:
    from mixzoo.core.paths import env_folder

    return Path(root).expanduser() if root else env_folder("MIXZOO_DATA_DIR", None)


def named_by(root: str | None) -> str:
    """How the user named the data directory, for error messages."""
    return "--data-dir" if root else "$MIXZOO_DATA_DIR"


def leave_out(root: str | None) -> str:
    return "leave out --data-dir" if root else "unset MIXZOO_DATA_DIR"


def dir_problem(directory: Path, root: str | None) -> str:
    """``data directory D (--data-dir) does not exist`` / ``... is not a directory`` / ``data directory D (...)``."""
    state = "" if directory.is_dir() else " is not a directory" if directory.exists() else " does not exist"
    return f"data directory {directory} ({named_by(root)}){state}"


def seeded_permutation(n: int, seed: int = SPLIT_SEED) -> torch.Tensor:
    import torch

    return torch.randperm(n, generator=torch.Generator().manual_seed(seed))


def half_split(num: int, split: str) -> torch.Tensor:
    """Calibration = first half of a seeded permutation of ``num`` test images, evaluation = second half."""
    perm = seeded_permutation(num)
    half = num // 2
    return perm[:half] if split == "calibration" else perm[half:]
