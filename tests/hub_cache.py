"""A Hugging Face hub cache in the standard layout, built in a test's tmp_path (no network)."""

from __future__ import annotations

from pathlib import Path

REV = "0123456789abcdef0123456789abcdef01234567"


def put_hf_file(cache: Path, repo_id: str, filename: str, data: bytes) -> Path:
    """Write one file into the standard cache layout (plain files, refs/main -> REV)."""
    root = cache / f"models--{repo_id.replace('/', '--')}"
    (root / "snapshots" / REV).mkdir(parents=True, exist_ok=True)
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / "main").write_text(REV)
    path = root / "snapshots" / REV / filename
    path.write_bytes(data)
    return path
