"""PNG figures users keep: matplotlib without a screen (Agg), written atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mixzoo.core.cache import atomic_write_bytes


def figure_module() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (no screen needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig: Any, path: Path) -> None:
    """Write ``fig`` as a PNG at ``path``, atomically."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight")
    atomic_write_bytes(path, buf.getvalue())
