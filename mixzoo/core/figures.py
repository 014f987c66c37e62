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


def keep_within(ax: Any, low: float = 0.0, high: float = 100.0) -> None:
    """Clip both axes' limits to ``[low, high]`` (percentages: no axis beyond 100 % or below 0 %), keeping
    matplotlib's margin inside them; markers on the edge stay drawn whole (their clipping is turned off)."""
    for get, put in ((ax.get_xlim, ax.set_xlim), (ax.get_ylim, ax.set_ylim)):
        lo, hi = get()
        put(max(low, lo), min(high, hi))
    for line in ax.lines:
        line.set_clip_on(False)


# candidate offsets (points) of a label from its point, tried in order: right/up, right/down, left, above, below,
# then further out (drawn with a leader line)
_OFFSETS = [(5, 4), (5, -11), (-5, 4), (-5, -11), (0, 9), (0, -15), (12, 14), (12, -20), (-12, 14), (-12, -20),
            (22, 2), (-22, 2), (18, 26), (18, -32), (-18, 26), (-18, -32), (30, 40), (30, -46)]


def place_labels(ax: Any, points: list[tuple[float, float, str]], *, avoid: list[tuple[float, float]] = (),
                 fontsize: float = 7, color: str | None = None) -> list[Any]:
    """Annotate each ``(x, y, text)`` of ``points`` (data coordinates) where its text overlaps no text already in
    the axes or placed before it, no point of ``points`` or ``avoid`` and stays inside the axes: the first free
    offset of a fixed list (nearest first; a leader line beyond the nearest ones), else the least crowded. Points
    drawn at the same spot share one label (``"0.985, 0.99"``). Returns the annotations."""
    fig = ax.figure
    renderer = renderer_of(fig)  # drawn once: final limits, so that extents are measured as they will be drawn
    to_px = ax.transData.transform
    merged: dict[tuple[int, int], list[Any]] = {}
    for x, y, text in points:
        px = to_px((x, y))
        merged.setdefault((round(px[0] / 2), round(px[1] / 2)), [x, y, []])[2].append(text)
    points = [(x, y, ", ".join(texts)) for x, y, texts in merged.values()]
    marker_px = [to_px((x, y)) for x, y, _ in points] + [to_px(p) for p in avoid]
    frame = ax.get_window_extent(renderer)
    placed: list[Any] = [_text_extent(t, renderer) for t in ax.texts if t.get_visible() and t.get_text()]
    out = []
    radius = fontsize * fig.dpi / 72 * 0.6  # a marker's half size, in pixels

    def cost(box: Any) -> float:
        hits = sum(box.overlaps(p) for p in placed)
        hits += sum(box.x0 - radius < mx < box.x1 + radius and box.y0 - radius < my < box.y1 + radius
                    for mx, my in marker_px)
        outside = box.x0 < frame.x0 or box.x1 > frame.x1 or box.y0 < frame.y0 or box.y1 > frame.y1
        return hits + 10 * outside

    for x, y, text in points:
        best = None
        for k, (dx, dy) in enumerate(_OFFSETS):
            far = k >= 6
            ann = ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=fontsize,
                              color=color, ha="left" if dx >= 0 else "right", va="center",
                              arrowprops={"arrowstyle": "-", "lw": 0.5, "color": "0.5"} if far else None)
            box = _text_extent(ann, renderer)
            c = cost(box)
            if best is None or c < best[0]:
                if best is not None:
                    best[1].remove()
                best = (c, ann, box)
            else:
                ann.remove()
            if c == 0:
                break
        placed.append(best[2])
        out.append(best[1])
    return out


def renderer_of(fig: Any) -> Any:
    """``fig`` drawn on an Agg canvas (also a figure pyplot has closed) and that canvas's renderer."""
    if not hasattr(fig.canvas, "get_renderer"):
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        FigureCanvasAgg(fig)
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def _text_extent(text: Any, renderer: Any) -> Any:
    """The drawn extent of a text or annotation's text alone (an annotation's own extent includes its leader line)."""
    from matplotlib.text import Annotation, Text

    if isinstance(text, Annotation):
        text.update_positions(renderer)
    return Text.get_window_extent(text, renderer)
