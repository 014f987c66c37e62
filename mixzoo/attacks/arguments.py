"""An attack function's arguments: options given as a settings object or as keywords (:func:`settings_from`), and
the checks every attack makes before its first query."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import torch

from mixzoo.attacks.ball import NORMS
from mixzoo.core.errors import InputError


def settings_from(kind: type, settings: Any, given: dict[str, Any]) -> Any:
    """The settings of a public attack function: ``settings`` (an :class:`~mixzoo.attacks.apgd.ApgdSettings` or
    :class:`~mixzoo.attacks.square.SquareSettings`) as given, else a ``kind`` built from the function's keywords
    named after its fields (``given``: the function's arguments), whose defaults are the fields' own. Options are
    given one way: ``settings`` with such a keyword changed from its default is an :class:`InputError`."""
    options = {f.name: given[f.name] for f in fields(kind) if f.name in given}
    if settings is None:
        if options.get("eps") is None:
            raise InputError("pass the radius eps=... (or settings=...)")
        return kind(**options)
    changed = sorted(k for k, v in options.items() if v is not None and v != getattr(kind, k, None))
    if changed:
        raise InputError(f"pass the attack's options either as settings or as keywords, not both (got settings and"
                         f" {', '.join(changed)})")
    return settings


def check_attack_settings(eps: float, norm: str, n_iter: int = 1, n_restarts: int = 1,
                          n_target_classes: int = 0) -> None:
    """Raise :class:`InputError` for a non-positive eps, an unknown norm, non-positive iteration counts or a negative
    number of target classes."""
    if not isinstance(eps, int | float) or not eps > 0:
        raise InputError(f"epsilon must be positive, got {eps}")
    if norm not in NORMS:
        raise InputError(f"unknown norm {norm!r}; use one of {', '.join(NORMS)}")
    if n_iter < 1:
        raise InputError(f"n_iter must be at least 1, got {n_iter}")
    if n_restarts < 1:
        raise InputError(f"n_restarts must be at least 1, got {n_restarts}")
    if n_target_classes < 0:
        raise InputError(f"n_target_classes must be non-negative, got {n_target_classes}")


def check_batches(n: int, batch_size: int, index: torch.Tensor | None) -> None:
    """Raise :class:`InputError` unless there are images (``n``), ``batch_size`` is positive and ``index`` is None
    or one index per image."""
    if batch_size < 1:
        raise InputError(f"batch_size must be at least 1, got {batch_size}")
    if n == 0:
        raise InputError("no images to attack; pass at least one example")
    if index is not None and len(index) != n:
        raise InputError(f"index has {len(index)} entries for {n} images; pass one index per image")
