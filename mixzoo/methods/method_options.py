"""The command-line value parser methods use."""

from __future__ import annotations

from typing import Any

from mixzoo.core.options import parse_value as _parse_value


def parse_value(text: str) -> Any:
    """A command-line value, read by mixzoo's one parser (:func:`mixzoo.core.options.parse_value`)."""
    return _parse_value(text)
