"""A content-addressed cache for expensive results (RBC logits, MMAA perturbations), with atomic writes.

Keys are sha256 digests of a canonical JSON of everything that determines the result (model weight hash, data
fingerprint, attack settings, code version of the attack). Every file is written to a temporary name in the same
directory, fsynced and renamed, so an interrupted run never leaves a corrupt entry; per-batch partial results let
the next run recompute only what is missing.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save

from mixzoo.core.errors import InputError, MixzooError
from mixzoo.core.paths import cache_folder, check_name_fits


def check_writable(path: str | os.PathLike[str], *, directory: bool = False, what: str = "output") -> Path:
    """Refuse, before any work, a path that cannot be written: a directory where a file is meant (or the reverse),
    below an existing file, in a directory a temporary file cannot be written to, or with a name too long
    (:func:`~mixzoo.core.paths.check_name_fits`); one-line :class:`InputError`. Creates nothing."""
    path = check_name_fits(path, what)
    if path.exists() and path.is_dir() != directory:
        kind, want = ("a file", "directory") if directory else ("a directory", "file")
        raise InputError(f"{what} {path} is {kind}; pass a {want} path")
    probe = path if path.exists() and directory else path.parent
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise InputError(f"cannot create {what} {path}: {probe} is a file, not a directory; pass another path")
    if path.is_file() and not os.access(path, os.W_OK):  # it would be replaced, but the user made it read-only
        raise InputError(f"{what} {path} exists and is not writable; make it writable (chmod u+w) or pass another"
                         " path")
    try:  # a real write, not os.access: root passes permission bits, and /proc or a read-only mount can look fine
        fd, tmp = tempfile.mkstemp(prefix=".mixzoo-probe.", dir=probe)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise InputError(f"cannot write {what} {path}: {probe} is not writable ({exc.strerror}); pass another"
                         " path") from None
    return path


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (temp file in the same directory, fsync, rename), with the permissions
    an ordinary ``open(path, "w")`` would give (the temp file is created 0600)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:  # name the file the caller asked for, not the temp file
        Path(tmp).unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


@contextmanager
def staged_directory(out: str | os.PathLike[str], names: tuple[str, ...] = ()) -> Iterator[Path]:
    """A fresh directory next to ``out`` to write a set of files into. When the block completes, each file is
    renamed into ``out`` and any of ``names`` (the files such a set can hold) it did not write this time is removed
    from ``out``, so no file of an older run passes for this one's; when the block fails, ``out`` stays as it was."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        yield stage
        out.mkdir(exist_ok=True)
        written = {f.name for f in stage.iterdir()}
        for name in sorted(written):
            os.replace(stage / name, out / name)
        for name in set(names) - written:
            (out / name).unlink(missing_ok=True)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _umask() -> int:
    mask = os.umask(0)  # reading the umask means setting it; put it back at once
    os.umask(mask)
    return mask


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write text atomically (UTF-8)."""
    return atomic_write_bytes(path, text.encode())


def atomic_save_tensors(path: str | os.PathLike[str], tensors: Mapping[str, torch.Tensor],
                        metadata: Mapping[str, str] | None = None) -> Path:
    """Save tensors as safetensors atomically."""
    blob = save({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, metadata=dict(metadata or {}))
    return atomic_write_bytes(path, blob)


def content_key(parts: Mapping[str, Any]) -> str:
    """sha256 (first 24 hex digits) of the canonical JSON of ``parts``."""
    blob = json.dumps(parts, sort_keys=True, default=str, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:24]


class CacheWarning(UserWarning):
    """A cache entry that does not match its request (wrong digest, shape or types): it is recomputed."""


def stale_entry(path: str | os.PathLike[str], why: str) -> None:
    """Warn once that the cache entry at ``path`` is not used (``why``) and is computed again."""
    warnings.warn(f"cache entry {path} is not used: {why}; computing it again", CacheWarning, stacklevel=3)


class Cache:
    """Tensor results stored as ``ROOT/KIND/KEY.safetensors`` with ``KEY.json`` describing what made them."""

    def __init__(self, root: str | os.PathLike[str] | None = None, enabled: bool = True):
        self.root = Path(root) if root is not None else cache_folder()
        self.enabled = enabled
        if enabled:
            check_writable(self.root, directory=True, what="cache directory (--cache-dir)")
        self.hits: list[str] = []  # "KIND/KEY" of every complete entry served from disk

    def path(self, kind: str, key: str) -> Path:
        return self.root / kind / f"{key}.safetensors"

    def _read(self, path: Path, warn: bool) -> tuple[dict[str, str], dict[str, torch.Tensor]] | None:
        """``(metadata, tensors)`` of the file at ``path``, or ``None`` when caching is off or it is absent; a file
        that cannot be read is deleted (with a :func:`stale_entry` warning when ``warn``) and is ``None``."""
        if not self.enabled or not path.exists():
            return None
        try:
            with safe_open(path, "pt") as f:
                return f.metadata() or {}, {name: f.get_tensor(name) for name in f.keys()}
        except Exception:  # noqa: BLE001 - a damaged entry is recomputed, never trusted
            if warn:
                stale_entry(path, "it cannot be read as safetensors")
            path.unlink(missing_ok=True)
            return None

    def load(self, kind: str, key: str, rows: int | None = None) -> dict[str, torch.Tensor] | None:
        """The cached tensors, or ``None`` when absent, unreadable or not this request's entry: an entry carries
        its key (``digest`` in its metadata) and, with ``rows``, must hold that many rows in every tensor. A
        mismatch is a miss, with one warning naming the file (:func:`stale_entry`); it is recomputed."""
        path = self.path(kind, key)
        read = self._read(path, warn=True)
        if read is None:
            return None
        metadata, tensors = read
        if metadata.get("digest") != key:
            stale_entry(path, "it does not carry this request's digest (written by an older mixzoo, or edited)")
            return None
        if not tensors or (rows is not None and any(t.ndim == 0 or t.shape[0] != rows for t in tensors.values())):
            got = sorted({t.shape[0] if t.ndim else 0 for t in tensors.values()})
            stale_entry(path, f"it holds {', '.join(map(str, got)) or 'no'} rows where {rows} were asked")
            return None
        self.hits.append(f"{kind}/{key}")
        return tensors

    def save(self, kind: str, key: str, tensors: Mapping[str, torch.Tensor], describe: Mapping[str, Any]) -> None:
        """Save an entry with its description (``KEY.json``); the tensors carry ``key`` as their digest."""
        if not self.enabled:
            return
        atomic_write_text(self.path(kind, key).with_suffix(".json"), json.dumps(describe, indent=2, default=str))
        atomic_save_tensors(self.path(kind, key), tensors, {"digest": key})

    # -- per-batch progress, so that an interrupted computation resumes ---------------------------------------
    def partial_dir(self, kind: str, key: str) -> Path:
        return self.root / kind / f"{key}.partial"

    def load_batch(self, kind: str, key: str, index: int,
                   rows: tuple[int, int] | None = None) -> dict[str, torch.Tensor] | None:
        """Saved batch ``index``, or ``None`` when absent, unreadable or not the batch of ``rows`` = (start, stop)
        (one saved with another batch size: recomputed, never concatenated out of place)."""
        read = self._read(self.partial_dir(kind, key) / f"{index:06d}.safetensors", warn=False)
        if read is None:
            return None
        metadata, tensors = read
        if rows is not None:
            start, stop = rows
            if metadata.get("rows") not in (None, f"{start}:{stop}") or any(t.shape[0] != stop - start
                                                                           for t in tensors.values()):
                return None
        return tensors

    def save_batch(self, kind: str, key: str, index: int, tensors: Mapping[str, torch.Tensor],
                   rows: tuple[int, int] | None = None) -> None:
        """Save batch ``index``; ``rows`` = (start, stop) is recorded so that a resume can check it."""
        if self.enabled:
            metadata = {"rows": f"{rows[0]}:{rows[1]}"} if rows is not None else None
            atomic_save_tensors(self.partial_dir(kind, key) / f"{index:06d}.safetensors", tensors, metadata)

    def drop_partial(self, kind: str, key: str) -> None:
        shutil.rmtree(self.partial_dir(kind, key), ignore_errors=True)

    def clear(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def batched_cached(cache: Cache, kind: str, key: str, n: int, batch_size: int, compute, describe: Mapping[str, Any],
                   progress=None) -> dict[str, torch.Tensor]:
    """``compute(start, stop) -> dict of tensors`` over ``[0, n)`` in batches, resuming from saved batches, the
    concatenation cached under ``(kind, key)`` (a complete entry is returned without computing); ``progress``:
    an optional ``advance(k)`` called with the examples each batch did."""
    from mixzoo.core.distributed import check_shards, gather, world

    w = world()
    done = cache.load(kind, key, rows=n)
    # under torchrun every rank takes the same path (the batches below are shared out and gathered): a complete
    # entry is used only when every rank has it
    if done is not None and (w.size == 1 or all(gather(True))):
        if progress is not None:
            progress(n)
        return done
    if w.size > 1 and done is None:
        gather(False)
    if n == 0:
        raise MixzooError(f"nothing to compute for {kind}: the data set is empty")
    found: dict[int, dict[str, torch.Tensor]] = {}
    for index, start in enumerate(range(0, n, batch_size)):
        stop = min(n, start + batch_size)
        part = cache.load_batch(kind, key, index, rows=(start, stop))
        if part is None and w.owns(index):  # batch k is computed by rank k mod size, as in one process
            part = compute(start, stop)
            cache.save_batch(kind, key, index, part, rows=(start, stop))
        if part is not None:
            found[index] = part
            if progress is not None:
                progress(stop - start)
    if w.size > 1:
        for other in gather(found):
            for index, part in other.items():
                if index not in found and progress is not None:
                    progress(len(next(iter(part.values()))))
                found.setdefault(index, part)
    check_shards(found, n, batch_size, f"{kind} {key}")
    parts = [found[i] for i in range(-(-n // batch_size))]
    result = {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
    cache.save(kind, key, result, describe)
    cache.drop_partial(kind, key)
    return result
