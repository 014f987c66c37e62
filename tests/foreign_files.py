"""Things a command must not overwrite at its output path (tests of the commands' refusal): a FIFO, a directory with
a file in it, a link to someone else's file, an unrelated JSON file; and the state of a tree to check that nothing
changed."""

from __future__ import annotations

import os
from pathlib import Path

KINDS = ("fifo", "directory", "link", "unrelated")


def put_foreign(path: Path, kind: str, tmp_path: Path) -> None:
    """Put a ``kind`` (one of :data:`KINDS`) at ``path`` (its folder made first)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
        (path / "keep.txt").write_text("mine\n")
    elif kind == "link":
        target = tmp_path / "elsewhere.json"
        target.write_text('{"name": "someone else\'s file"}\n')
        path.symlink_to(target)
    else:  # an unrelated JSON file, e.g. a package's
        path.write_text('{"name": "an unrelated file", "version": "1.0"}\n')


def tree_state(root: Path) -> list[tuple[str, object]]:
    """Every path under ``root`` with its bytes (``True`` for a link, a directory or a FIFO)."""
    return sorted((str(p.relative_to(root)), p.is_symlink() or not p.is_file() or p.read_bytes())
                  for p in root.rglob("*"))
