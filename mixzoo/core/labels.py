"""How mixzoo writes a result's row and a radius, the same in the terminal, report.md, report.json, the Hub
model card and RobustBench's ``model_info`` footnote.

- :func:`row_label`: ``ABC fmnist-std``, ``RBC fmnist-pgd``, ``MixedNUTS, alpha 0.978``, ``Linear mix, alpha 0.870``.
- :func:`eps_text`: the decimal, with k/255 beside it where the radius is exactly k/255: ``0.0314 (8/255)``,
  ``0.2 (51/255)``, ``0.5``.
"""

from __future__ import annotations

import re
from typing import Any

_ALPHA_SUFFIX = re.compile(r"\s*\(alpha\s*=\s*[0-9.]+\)\s*$")


def eps_fraction(eps: float | None) -> str | None:
    """``"8/255"`` when ``eps`` is exactly k/255 for an integer k >= 1, else None."""
    if eps is None:
        return None
    k = float(eps) * 255
    return f"{round(k)}/255" if round(k) >= 1 and abs(k - round(k)) < 1e-6 else None


def eps_text(eps: float | None) -> str:
    """A radius as mixzoo prints it everywhere: three significant digits, and ``(k/255)`` beside it when the radius
    is exactly k/255 for an integer k (``0.0314 (8/255)``); ``?`` when unknown."""
    if eps is None:
        return "?"
    fraction = eps_fraction(eps)
    return f"{float(eps):.3g}" + (f" ({fraction})" if fraction else "")


def row_label(row: Any) -> str:
    """A result row's one label: the base models by role and name (``ABC fmnist-std``), a mixed classifier by its
    name and its alpha to three decimals (``MixedNUTS, alpha 0.978``). ``row`` is a bench, sanity or verify row, or
    a row of a ``report.json`` (a dict with ``name``, ``kind``, ``alpha``)."""
    get = row.get if isinstance(row, dict) else lambda key: getattr(row, key, None)
    name, kind, alpha = str(get("name")), get("kind"), get("alpha")
    if kind in ("abc", "rbc"):
        return f"{kind.upper()} {name}"
    name = _ALPHA_SUFFIX.sub("", name)
    return name if alpha is None else f"{name}, alpha {float(alpha):.3f}"


__all__ = ["eps_fraction", "eps_text", "row_label"]
