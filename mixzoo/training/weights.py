"""The weight files of the built-in zoo: where they are read from, and writing ``NAME.safetensors`` (recipe JSON in
the metadata) with ``NAME.sha256``."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from mixzoo.training.recipes import Recipe


def default_weights_dir() -> Path:
    """Where the plugin that loads ``zoo`` sources reads relative weight files from (hook ``mixzoo_weights_dir``;
    the built-in zoo's is ``plugins/weights``)."""
    from mixzoo.core.errors import PluginError
    from mixzoo.core.plugins import first_result

    directory = first_result("mixzoo_weights_dir", "name its weights directory", kind="zoo")
    if directory is None:
        raise PluginError("no plugin loads source kind 'zoo' (mixzoo's built-in plugin 'zoo' does); reinstall mixzoo"
                          " or pass --out DIR")
    return Path(directory)


def _serialize(state: dict[str, torch.Tensor], recipe: Recipe) -> bytes:
    from safetensors.torch import save

    # one metadata key only: safetensors writes its metadata map in hash order, which varies between processes
    return save(state, metadata={"mixzoo_recipe": json.dumps(recipe.to_dict(), sort_keys=True)})


def _state_sha256(state: dict[str, torch.Tensor], recipe: Recipe) -> str:
    return hashlib.sha256(_serialize(state, recipe)).hexdigest()


def save_weights(state: dict[str, torch.Tensor], out_dir: Path, recipe: Recipe) -> tuple[Path, str]:
    """Write ``NAME.safetensors`` (recipe JSON in the metadata) and ``NAME.sha256`` atomically."""
    from mixzoo.core.cache import atomic_write_bytes, atomic_write_text

    blob = _serialize(state, recipe)
    sha = hashlib.sha256(blob).hexdigest()
    path = atomic_write_bytes(out_dir / recipe.file, blob)
    atomic_write_text(out_dir / f"{recipe.name}.sha256", f"{sha}  {recipe.file}\n")
    for written in (path, out_dir / f"{recipe.name}.sha256"):
        written.chmod(0o644)  # package data, readable by everyone (mkstemp creates 0600)
    return path, sha
