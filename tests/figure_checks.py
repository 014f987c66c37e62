"""What a figure test checks: the texts of an axes (annotations included) drawn without overlapping."""

from __future__ import annotations

from typing import Any

from mixzoo.core.figures import renderer_of


def overlapping_texts(ax: Any) -> list[tuple[str, str]]:
    """Pairs of the axes' texts whose drawn extents (an annotation's text alone, not its leader line) overlap."""
    from matplotlib.text import Annotation, Text

    renderer = renderer_of(ax.figure)
    texts = [t for t in ax.texts if t.get_visible() and t.get_text()]
    for t in texts:
        if isinstance(t, Annotation):
            t.update_positions(renderer)
    boxes = [Text.get_window_extent(t, renderer) for t in texts]
    return [(texts[i].get_text(), texts[j].get_text()) for i in range(len(texts)) for j in range(i + 1, len(texts))
            if boxes[i].overlaps(boxes[j])]
