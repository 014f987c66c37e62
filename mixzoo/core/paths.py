"""Paths built from data stay in their folder, and outputs never replace what mixzoo did not write.

Names read from files (:func:`plain_name`, :func:`inside`) and values joined into output paths
(:func:`safe_component`, :func:`below`) cannot leave their folder; folder variables (:func:`env_folder`), name
lengths (:func:`check_name_fits`), safetensors files (:func:`read_safetensors`) and existing outputs
(:func:`check_output`) are checked before any work. Each refusal is a one-line
:class:`~mixzoo.core.errors.InputError` naming the file or field and the fix.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from mixzoo.core.errors import InputError, damaged_file

_UNSAFE = re.compile(r"[^A-Za-z0-9._+=-]+")


def plain_name(name: object, what: str, beside: str = "the card") -> str:
    """``name`` if it is a plain file name (no folder, not ``.`` / ``..``, not absolute, no NUL, no backslash),
    else a one-line :class:`InputError` naming ``what`` (e.g. ``"card.toml: field 'weights'"``) and the file it
    must lie ``beside``."""
    if (not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\\" in name
            or "\0" in name or os.sep in name or (os.altsep and os.altsep in name)):
        raise InputError(f"{what} must be a plain file name in {beside}'s folder (no folder part), got {name!r};"
                         f" keep the file next to {beside} and write its bare name")
    return name


def inside(folder: str | os.PathLike[str], name: object, what: str, beside: str = "the card") -> Path:
    """``folder / name`` for a plain file name (:func:`plain_name`) that, with symbolic links resolved, is still in
    ``folder`` (or, for a Hugging Face cache snapshot, in that repository's ``blobs``); a one-line
    :class:`InputError` otherwise."""
    folder = Path(folder)
    path = folder / plain_name(name, what, beside)
    try:
        real, base = path.resolve(), folder.resolve()
    except (OSError, RuntimeError):  # a symbolic link loop
        raise InputError(f"{what}: {path} cannot be resolved (a symbolic link loop?); replace it with the file")\
            from None
    hub_blob = base.parent.name == "snapshots" and real.parent == base.parent.parent / "blobs"  # ../../blobs/SHA
    if real.parent != base and not hub_blob:
        raise InputError(f"{what}: {path} is a symbolic link out of {folder}; replace it with the file itself")
    return path


def safe_component(value: object, what: str) -> str:
    """``value`` (a data set name, a threat model, a row name read from a report) as one path component that cannot
    leave the folder it is joined to: characters other than letters, digits and ``._+=-`` become ``_``, leading dots
    and underscores are dropped (``../../x`` -> ``x``, ``/etc`` -> ``etc``); nothing left is a one-line error."""
    text = _UNSAFE.sub("_", str(value) if value is not None else "").lstrip("._")
    if not text or text.strip("._") == "":
        raise InputError(f"{what} {value!r} gives no usable file or folder name; correct it in the file")
    return text[:200]


def below(folder: str | os.PathLike[str], *parts: str, what: str) -> Path:
    """``folder / parts[0] / parts[1] ...``, each part one component (:func:`safe_component`), checked component by
    component: one that exists and is a symbolic link (or resolves outside ``folder``) is a one-line
    :class:`InputError` naming it, so a file written there stays in ``folder``. Creates nothing."""
    folder = Path(folder)
    path = folder
    for part in parts:
        if part in ("", ".", "..") or "/" in part or "\\" in part or "\0" in part:
            raise InputError(f"{what}: {part!r} is not one plain folder or file name")
        path = path / part
        if path.is_symlink():
            raise InputError(f"{what}: {path} is a symbolic link (it could point out of {folder}); remove it or"
                             " pass another folder")
    if os.path.lexists(path) and folder.exists() and not path.resolve().is_relative_to(folder.resolve()):
        raise InputError(f"{what}: {path} resolves outside {folder}; pass another folder")
    return path


def env_folder(name: str, default: str | os.PathLike[str] | None) -> Path | None:
    """The folder the variable ``name`` names (``MIXZOO_CACHE``, ``MIXZOO_ROBUSTBENCH_DIR``, ``MIXZOO_DATA_DIR``):
    unset, empty or blank is ``default`` (the XDG rule; ``None``: no folder), ``~`` expanded; a relative value
    (it would move with the current folder) is a one-line :class:`InputError` naming the variable and the fix."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return None if default is None else Path(default).expanduser()
    path = Path(raw).expanduser()
    if not path.is_absolute():
        raise InputError(f"{name}={raw!r} is not an absolute folder path; set it to a full path (e.g."
                         f" {name}=$PWD/{raw.strip().lstrip('./') or 'cache'}) or unset it for {default}")
    return path


DEFAULT_CACHE_DIR = "~/.cache/mixzoo"


def cache_folder() -> Path:
    """mixzoo's cache folder: ``$MIXZOO_CACHE`` (read by :func:`env_folder`), else :data:`DEFAULT_CACHE_DIR`."""
    folder = env_folder("MIXZOO_CACHE", DEFAULT_CACHE_DIR)
    assert folder is not None  # a default is given
    return folder


TEMP_NAME_EXTRA = 14  # what the temporary names beside a file add: ``.`` + name + ``.`` + 8 random + ``.tmp``


def name_max(path: Path) -> int:
    """The longest file name (bytes) the file system holding ``path`` (or its nearest existing folder) takes."""
    probe = path
    while not os.path.isdir(probe) and probe != probe.parent:  # os.path: a name too long reads as absent
        probe = probe.parent
    try:
        return int(os.pathconf(probe, "PC_NAME_MAX"))
    except (OSError, ValueError, AttributeError):
        return 255


def check_name_fits(path: str | os.PathLike[str], option: str = "--out", *, extra: int = TEMP_NAME_EXTRA) -> Path:
    """Refuse, before any work, an output path with a component longer than the file system takes (``NAME_MAX``
    bytes); the last component must leave room for ``extra`` bytes more (the temporary name a write goes
    through). A one-line :class:`InputError` naming the option and the limit; returns ``Path(path)``."""
    path = Path(path)
    limit = name_max(path)
    parts = path.parts
    for i, part in enumerate(parts):
        room = limit - (extra if i == len(parts) - 1 else 0)
        size = len(os.fsencode(part))
        if size > room:
            raise InputError(f"{option} {path}: the name {part[:40]!r}... is {size} bytes, more than this file"
                             f" system takes ({room} bytes here); pass a shorter name")
    return path


def read_safetensors(path: str | os.PathLike[str], device: str = "cpu", fix: str | None = None) -> dict[str, Any]:
    """The tensors of a safetensors file; a file that is truncated or not safetensors at all is a one-line
    :class:`~mixzoo.core.errors.FileProblemError` naming it and how to fetch it again (``fix``, else
    :func:`~mixzoo.core.errors.damaged_file`'s default), never a plugin fault."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(os.fspath(path), device=device)
    except (SafetensorError, ValueError, RuntimeError, OSError, OverflowError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise damaged_file(path, f"not a readable safetensors file ({exc})", fix) from None


def _kind(mode: int) -> str | None:
    """What a non-regular file is, in words; ``None`` for a regular file."""
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return None if stat.S_ISREG(mode) else "not a regular file"


def _check_file(path: Path, option: str, ours: Callable[[Path], bool] | None, what: str) -> None:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise InputError(f"{option} {path} cannot be examined ({exc.strerror}); pass another path") from None
    kind = _kind(mode)
    if kind is not None:
        raise InputError(f"{option} {path} is {kind}, not {what}; pass a new file path, or move it away")
    if ours is not None and os.path.getsize(path) > 0 and not ours(path):
        raise InputError(f"{option} {path} exists and is not {what}; pass another {option} (a new file or one"
                         " mixzoo wrote), or move that file away")


def json_with(*keys: str) -> Callable[[Path], bool]:
    """A recogniser for :func:`check_output`: a JSON object holding every one of ``keys`` (a file mixzoo wrote)."""

    def ours(path: Path) -> bool:
        from mixzoo.core.errors import MixzooError
        from mixzoo.core.reading import read_data

        try:
            data = read_data(path, "json")
        except (OSError, MixzooError):
            return False
        return isinstance(data, dict) and set(keys) <= set(data)

    return ours


def is_safetensors(path: Path) -> bool:
    """A recogniser for :func:`check_output`: a file whose header parses as safetensors'."""
    from safetensors import safe_open

    try:
        with safe_open(os.fspath(path), framework="pt"):
            return True
    except Exception:  # noqa: BLE001 - any refusal means: not a safetensors file
        return False


def holding(marker: bytes) -> Callable[[Path], bool]:
    """A recogniser for :func:`check_output`: a file that contains ``marker`` (e.g. the metadata key mixzoo writes
    into an artifact)."""

    def ours(path: Path) -> bool:
        try:
            return marker in path.read_bytes()
        except OSError:
            return False

    return ours


def check_output(path: str | os.PathLike[str], *, option: str = "--out", what: str = "a file mixzoo wrote",
                 ours: Callable[[Path], bool] | None = None, directory: bool = False,
                 files: Mapping[str, Callable[[Path], bool] | None] | None = None) -> Path:
    """Refuse an output path a command would replace although mixzoo did not write it: anything that is not a
    regular file (a FIFO, a device, a directory, a symbolic link) or, with ``ours``, a non-empty file ``ours`` does
    not recognise; with ``directory``, anything that is not a directory, and those checks on each of ``files``
    (name -> ``ours`` or ``None``) in it. Creates and changes nothing; returns ``Path(path)``."""
    path = check_name_fits(path, option)
    if not directory:
        _check_file(path, option, ours, what)
        return path
    if path.exists() and not path.is_dir():
        raise InputError(f"{option} {path} is not a directory; pass a directory path")
    for name in files or {}:
        check_name_fits(path / name, option)
    if path.is_dir():
        for name, check in (files or {}).items():
            _check_file(path / name, option, check, f"a file mixzoo wrote ({name})")
    return path


__all__ = ["below", "cache_folder", "check_name_fits", "check_output", "env_folder", "holding", "inside",
           "is_safetensors", "json_with", "plain_name", "read_safetensors", "safe_component"]
