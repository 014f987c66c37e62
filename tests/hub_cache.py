"""A Hugging Face hub cache in the standard layout, built in a test's tmp_path (no network)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


def put_timm_model(cache: Path, repo_id: str, arch: str = "resnet18", num_classes: int = 10, size: int = 32,
                   seed: int = 0, files: tuple[str, ...] = ("config.json", "model.safetensors")) -> Any:
    """A random timm ``arch`` of ``num_classes`` classes at ``size`` px, saved by timm's ``save_for_hf`` and put
    into the cache as ``repo_id`` (only ``files`` of it); returns the model."""
    import tempfile

    import torch

    from mixzoo.core.compat import import_timm

    timm = import_timm()
    from timm.models._hub import save_for_hf

    torch.manual_seed(seed)
    model = timm.create_model(arch, pretrained=False, num_classes=num_classes,
                              pretrained_cfg_overlay={"input_size": (3, size, size)}).eval()
    with tempfile.TemporaryDirectory() as out:
        save_for_hf(model, out, safe_serialization=True)
        for name in files:
            put_hf_file(cache, repo_id, name, (Path(out) / name).read_bytes())
    return model
