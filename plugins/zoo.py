"""The built-in zoo: small Fashion-MNIST and digits models trained by :mod:`mixzoo.training.train` (source kind
``zoo``, hook ``mixzoo_model_sources``).

A registry entry names the architecture (``source.arch``, see :mod:`mixzoo_plugins.zoo_arch`), its keyword
arguments (``source.kwargs``) and the safetensors file (``source.file``, relative to ``plugins/weights/`` or
absolute); ``sha256`` is the digest of that file and is verified before the weights are used.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mixzoo.core.errors import MissingFileError, RegistryError
from mixzoo.core.plugins import hookimpl

if TYPE_CHECKING:
    from torch import nn

    from mixzoo.core.registry import ModelSpec

SOURCE_KINDS = ["zoo"]
PROVIDES = {"architectures": ["convnet"]}  # what `mixzoo plugins` lists
WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"


@functools.cache
def _file_sha256(path: str, mtime_ns: int, size: int, ctime_ns: int, inode: int) -> str:
    from mixzoo.zoo.checkpoints import sha256_file

    return sha256_file(path)


def file_sha256(path: str | Path) -> str:
    """sha256 hex digest of a file (cached by path, modification and change times, size and inode: the change
    time moves on any write and cannot be set back like the modification time)."""
    st = Path(path).stat()
    return _file_sha256(str(path), st.st_mtime_ns, st.st_size, st.st_ctime_ns, st.st_ino)


def weights_path(spec: ModelSpec) -> Path:
    """Where the weights of a zoo entry live; a missing file raises :class:`MissingFileError`."""
    name = spec.source.get("file")
    if not isinstance(name, str) or not name:
        raise RegistryError(f"registry entry {spec.name!r}: field 'source.file' must name the weights file")
    path = Path(name).expanduser()
    path = path if path.is_absolute() else WEIGHTS_DIR / path
    if not path.exists():
        raise MissingFileError(f"weights of zoo model {spec.name!r} not found at {path};"
                               f" run `mixzoo train {spec.name}` to train them")
    return path


def load(spec: ModelSpec, device: str = "cpu", allow_unsafe: bool = False) -> nn.Module:
    """The loader of source kind ``zoo``: ``spec.source['arch']`` built, its verified safetensors weights loaded
    (strict key match; safetensors only, so ``allow_unsafe`` is not needed)."""
    from mixzoo.core.paths import read_safetensors
    from mixzoo_plugins.zoo_arch import build

    path = weights_path(spec)
    if spec.sha256 is not None:
        digest = file_sha256(path)
        if digest != spec.sha256:
            raise RegistryError(f"weights file {path} has sha256 {digest[:12]}..., registry entry {spec.name!r}"
                                f" expects {spec.sha256[:12]}...; re-train with `mixzoo train {spec.name}` or fix"
                                " the entry's sha256")
    network = build(str(spec.source.get("arch")), dict(spec.source.get("kwargs", {})))
    state = read_safetensors(path, device=device, fix=f"re-train it with `mixzoo train {spec.name}`")
    try:
        network.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        first = str(exc).splitlines()[0]
        raise RegistryError(f"weights {path.name} do not fit architecture {spec.source.get('arch')!r} with"
                            f" kwargs {dict(spec.source.get('kwargs', {}))} ({first}); fix source.kwargs") from exc
    return network.to(device)


@hookimpl
def mixzoo_architectures() -> dict[str, Any]:
    """The zoo's architectures (:data:`mixzoo_plugins.zoo_arch.ARCHS`), for training recipes."""
    from mixzoo_plugins.zoo_arch import ARCHS

    return dict(ARCHS)


@hookimpl
def mixzoo_weights_dir(kind: str) -> Path | None:
    """``plugins/weights`` (package data) for ``zoo`` sources."""
    return WEIGHTS_DIR if kind in SOURCE_KINDS else None


@hookimpl
def mixzoo_model_sources() -> dict[str, Any]:
    """``zoo``: :func:`load`."""
    return {"zoo": load}
