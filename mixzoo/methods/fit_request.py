"""What a method's fit is given and what it returns (:meth:`mixzoo.methods.base.MixingMethod.fit`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import nn


@dataclass
class FitRequest:
    """Everything a method's :meth:`~MixingMethod.fit` may use. ``options`` are the method's own, already checked
    and converted by :meth:`MixingMethod.check_options`; ``command`` is the command line to record in the card's
    provenance (``None`` for a library call: record ``"mixzoo.methods.fit()"``)."""

    abc: str | nn.Module | None = None
    rbc: str | nn.Module | None = None
    options: dict[str, Any] = field(default_factory=dict)
    dataset: str | None = None
    n_calib: int | None = None  # None: DEFAULT_N_CALIB, or all the calibration split holds when fewer
    eps: float | None = None
    norm: str | None = None
    seed: int = 0
    batch_size: int | None = None
    out: str | Path | None = None
    data_dir: str | None = None
    cache_dir: str | Path | None = None
    use_cache: bool = True
    device: str = "cpu"
    allow_unsafe: bool = False
    progress: bool = True
    command: str | None = None

    def __post_init__(self) -> None:
        if self.device == "auto":  # resolved here, so that the card records the device that ran
            from mixzoo.core.machine import resolve_device

            self.device = resolve_device(self.device)

    @property
    def provenance_command(self) -> str:
        """What a card's ``provenance.command`` records for this request."""
        return self.command or "mixzoo.methods.fit()"


@dataclass
class FitResult:
    """What :meth:`MixingMethod.fit` returns: the card, where it was written, a summary for the terminal (and
    ``mixzoo mix --json``), seconds per step and which steps came from the cache."""

    card: Any
    path: Path | None
    summary: dict[str, Any] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    cache_hits: dict[str, bool] = field(default_factory=dict)
