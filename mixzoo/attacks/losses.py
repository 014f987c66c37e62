"""APGD's per-example losses (Croce & Hein 2020) on a model output that is one logits tensor or a pair
``(judged, loss)`` of logits (:func:`pair`)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

Forward = Callable[[torch.Tensor], "torch.Tensor | tuple[torch.Tensor, torch.Tensor]"]
LossFn = Callable[[torch.Tensor, torch.Tensor, "torch.Tensor | None"], torch.Tensor]


def pair(out: torch.Tensor | tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(judged, loss)`` logits from a model output that is one tensor or a pair."""
    return (out[0], out[1]) if isinstance(out, tuple | list) else (out, out)


def ce_loss(logits: torch.Tensor, labels: torch.Tensor, target: torch.Tensor | None = None) -> torch.Tensor:
    """Per-example cross-entropy (APGD-CE)."""
    return F.cross_entropy(logits, labels, reduction="none")


def dlr_loss(logits: torch.Tensor, labels: torch.Tensor, target: torch.Tensor | None = None) -> torch.Tensor:
    """Untargeted difference-of-logits-ratio loss (Croce & Hein 2020, Eq. 6)."""
    z, _ = logits.sort(dim=1)
    zy = logits.gather(1, labels[:, None]).squeeze(1)
    top_is_y = (logits.argmax(dim=1) == labels).to(logits.dtype)
    return -(zy - z[:, -2] * top_is_y - z[:, -1] * (1.0 - top_is_y)) / (z[:, -1] - z[:, -3] + 1e-12)


def dlr_targeted_loss(logits: torch.Tensor, labels: torch.Tensor, target: torch.Tensor | None) -> torch.Tensor:
    """Targeted DLR loss of APGD-T: -(z_y - z_t) / (z_pi1 - (z_pi3 + z_pi4) / 2)."""
    z, _ = logits.sort(dim=1)
    zy = logits.gather(1, labels[:, None]).squeeze(1)
    zt = logits.gather(1, target[:, None]).squeeze(1)
    return -(zy - zt) / (z[:, -1] - 0.5 * (z[:, -3] + z[:, -4]) + 1e-12)


LOSSES: dict[str, LossFn] = {"ce": ce_loss, "dlr": dlr_loss, "dlr-targeted": dlr_targeted_loss}
