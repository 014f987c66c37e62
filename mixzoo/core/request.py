"""One evaluation asked for, passed whole: :class:`EvalRequest` (what :func:`mixzoo.attacks.runner.evaluate` runs
and a baseline method's :meth:`~mixzoo.methods.MixingMethod.match` searches with) and :class:`ReportRequest` (what a
method computes its report data with during the bench: :meth:`~mixzoo.methods.MixingMethod.tradeoff_curve`,
:meth:`~mixzoo.methods.MixingMethod.figure_data`). Variants (the matched baseline's attack, a curve point, an extra
attack on the examples still robust) are :meth:`EvalRequest.replace` d copies.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mixzoo.core.cache import Cache
from mixzoo.core.record import RunRecord

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class EvalRequest:
    """One evaluation: ``record`` (what decides its outcome) and how this call runs.

    ``cache``: where each batch's outcome is kept (default: none); ``key_parts``: what the cache key adds to the
    record (the model's weights, the data's fingerprint, ...); ``label``: the progress bar's and errors' name of
    the model; ``example_index``: the images' indices in their data set when they are a subset of it (default
    ``0 .. n-1``; per-example random draws follow them); ``save_adversarial``: keep the point that broke each
    broken example; ``progress``: show a progress bar.
    """

    record: RunRecord
    cache: Cache = field(default_factory=lambda: Cache(None, enabled=False))
    key_parts: dict[str, Any] = field(default_factory=dict)
    label: str = ""
    example_index: torch.Tensor | None = None
    save_adversarial: bool = False
    progress: bool = True

    def replace(self, **changes: Any) -> EvalRequest:
        """A copy with ``changes``: run record fields (``attack``, ``attack_options`` as a dict, ``eps``, ``seed``,
        ...) change the record, the others the request; an unknown name is a one-line error."""
        own = {f.name for f in dataclasses.fields(self)}
        mine = {k: v for k, v in changes.items() if k in own}
        theirs = {k: v for k, v in changes.items() if k not in own}
        if theirs:
            mine["record"] = mine.get("record", self.record).replace(**theirs)
        return dataclasses.replace(self, **mine)

    def options(self) -> dict[str, Any]:
        """The attack's options as a dict."""
        return self.record.options()


@dataclass(frozen=True)
class ReportRequest:
    """What a method computes the data of its report sections and figures with, during the bench (never while the
    report is written): ``evaluation`` (the trade-off curve's attack in its record, the cache, progress),
    ``data_dir`` (where the data sets are: a method's calibration split), ``device``, ``n`` (the curve's images,
    the first ``n`` evaluation images) and ``points`` (the most points per curve, the bench's budget; ``None``: the
    method's own)."""

    evaluation: EvalRequest
    data_dir: str | None = None
    device: str = "cpu"
    n: int = 300
    points: int | None = None


__all__ = ["EvalRequest", "ReportRequest"]
