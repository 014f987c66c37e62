"""Reading weight files safely: safetensors, or ``torch.load(weights_only=True)``; a checkpoint that needs arbitrary
unpickling is refused (:class:`UnsafeCheckpointError`) unless the user passed ``allow_unsafe`` (``--allow-unsafe``).
Checksums of files a registry entry pins (``sha256``), and the state dict inside a checkpoint, loaded with a strict
key match. Each problem with a file is one :class:`~mixzoo.core.errors.MixzooError` line naming the fix.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mixzoo.core.errors import MixzooError


class UnsafeCheckpointError(MixzooError):
    """A checkpoint that only loads by unpickling arbitrary objects, refused without ``allow_unsafe``."""


class ChecksumError(MixzooError):
    """A file whose sha256 differs from the registry's."""


def sha256_file(path: str | os.PathLike[str], chunk: int = 1 << 22) -> str:
    """Hex sha256 of a file, read in 4 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def verify_sha256(path: str | os.PathLike[str], expected: str | None, entry: str) -> None:
    """Raise :class:`ChecksumError` unless ``path`` hashes to ``expected`` (no-op when ``expected`` is None)."""
    if expected is None:
        return
    actual = sha256_file(path)
    if actual.lower() != expected.lower():
        raise ChecksumError(
            f"{path} has sha256 {actual[:16]}..., but registry entry {entry!r} expects {expected[:16]}...;"
            " delete the file to fetch it again, or correct sha256 in the registry"
        )


_GLOBAL_RE = re.compile(r"GLOBAL ([\w.]+)")


def load_checkpoint(path: str | os.PathLike[str], allow_unsafe: bool = False, mmap: bool = False) -> Any:
    """A checkpoint loaded safely: safetensors, else ``torch.load(weights_only=True)``; a pickle that needs arbitrary
    classes raises :class:`UnsafeCheckpointError` naming the class unless ``allow_unsafe`` (``weights_only=False``).
    ``mmap`` maps tensor storages of zip-format checkpoints instead of reading them (a cheap safety check)."""
    path = Path(path)
    if path.suffix == ".safetensors":
        from mixzoo.core.paths import read_safetensors

        return read_safetensors(path)
    try:
        return _torch_load(path, weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as exc:
        if not allow_unsafe:
            raise _unsafe_error(path, str(exc)) from None
    try:
        return _torch_load(path, weights_only=False, mmap=mmap)
    except pickle.UnpicklingError as exc:
        raise MixzooError(f"{path} is not a readable PyTorch checkpoint ({exc}); delete it and fetch it"
                          " again") from None


def _unsafe_error(path: Path, reason: str) -> UnsafeCheckpointError:
    """The one-line refusal, naming the offending class when torch's weights-only unpickler reported one."""
    found = _GLOBAL_RE.search(reason)
    if found:
        return UnsafeCheckpointError(
            f"checkpoint {path} holds an object of class {found.group(1)} and loading it would run arbitrary"
            " code; re-save it as a state dict or safetensors, or pass allow_unsafe=True (CLI: --allow-unsafe)"
            " if you trust its source"
        )
    lines = [ln.strip() for ln in reason.split("WeightsUnpickler error:")[-1].splitlines() if ln.strip()]
    return UnsafeCheckpointError(
        f"checkpoint {path} is not plain weights ({lines[0] if lines else 'weights-only load failed'}); it is"
        " corrupt (delete it and fetch it again) or a pickle that loads only with allow_unsafe=True"
        " (CLI: --allow-unsafe), which runs arbitrary code: use it only if you trust the source"
    )


def _torch_load(path: Path, weights_only: bool, mmap: bool) -> Any:
    try:
        return torch.load(path, map_location="cpu", weights_only=weights_only, mmap=mmap)
    except pickle.UnpicklingError:
        raise
    except RuntimeError as exc:
        if mmap and "mmap" in str(exc):  # legacy (non-zip) format cannot be mapped: read it instead
            return _torch_load(path, weights_only, mmap=False)
        raise MixzooError(f"{path} is not a readable PyTorch checkpoint ({str(exc).splitlines()[0]});"
                          " delete it and fetch it again") from None


def needs_unpickling(path: str | os.PathLike[str]) -> bool:
    """Whether a checkpoint only loads with ``weights_only=False`` (storages memory-mapped, so this is cheap)."""
    try:
        load_checkpoint(path, allow_unsafe=False, mmap=True)
    except UnsafeCheckpointError:
        return True
    return False


WRAPPER_KEYS = ("state_dict", "model_state_dict", "model", "net")  # what checkpoints wrap a state dict in


def state_dict_from(obj: Any, source: str) -> dict[str, torch.Tensor]:
    """The tensor dict inside a checkpoint: unwraps ``{'state_dict': ...}`` / ``{'model': ...}``, takes the
    ``state_dict()`` of a pickled :class:`torch.nn.Module` (a checkpoint loaded with ``allow_unsafe``) and strips a
    ``module.`` prefix (DataParallel) carried by every key."""
    if isinstance(obj, nn.Module):  # a pickled module (loaded with allow_unsafe): its weights
        obj = obj.state_dict()
    for key in WRAPPER_KEYS:
        if isinstance(obj, Mapping) and isinstance(obj.get(key), nn.Module):
            obj = obj[key].state_dict()
            break
        if isinstance(obj, Mapping) and isinstance(obj.get(key), Mapping):
            obj = obj[key]
            break
    if not isinstance(obj, Mapping) or not obj or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise MixzooError(f"{source} holds no state dict of tensors (got {type(obj).__name__}); save"
                          " model.state_dict() instead")
    sd = dict(obj)
    if all(k.startswith("module.") for k in sd):
        sd = {k[len("module."):]: v for k, v in sd.items()}
    return sd


def load_state_dict_strict(network: nn.Module, state_dict: Mapping[str, torch.Tensor], source: str) -> None:
    """``load_state_dict(strict=True)`` with a one-line error listing the first mismatching keys."""
    own = network.state_dict()
    missing = [k for k in own if k not in state_dict]
    unexpected = [k for k in state_dict if k not in own]
    shapes = [k for k in own if k in state_dict and tuple(own[k].shape) != tuple(state_dict[k].shape)]
    if missing or unexpected or shapes:
        parts = [f"{label} {', '.join(keys[:3])}{' ...' if len(keys) > 3 else ''}"
                 for label, keys in (("missing", missing), ("unexpected", unexpected), ("wrong shape", shapes))
                 if keys]
        raise MixzooError(f"{source} does not fit the architecture ({'; '.join(parts)}); check arch and"
                          " num_classes in the registry entry")
    network.load_state_dict(state_dict, strict=True)

