"""The composite loss of Bai et al. 2024b, Eq. 4.2 and the pseudo-labels a~ it is trained toward (Sec. 4.4).

``c_CE * CE(h^a(x + d), y) + c_BCE * BCE(a(x + d), a~) + c_prod * CE * BCE``, per example, times a weight (the
authors' ``scale``: 2 on clean examples in their CIFAR-10 configuration), averaged. BCE is taken on gamma, the
mixing network's logit (``binary_cross_entropy_with_logits``), as the authors' ``CompLoss`` does, so it stays finite
when alpha saturates.

Pseudo-labels (which base model the mixture should trust): ``authors`` (the rule of the authors' trainer,
``get_data_buffer``): a~ = 0 (the ABC) on every clean image, a~ = 1 (the RBC) on every attacked one. ``oracle``:
the same, except where only the other model is right on that very input: a~ = 1 on a clean image that the ABC
gets wrong and the RBC right, a~ = 0 on an attacked image that the RBC gets wrong and the ABC right.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mixzoo.core.errors import InputError
from mixzoo.methods.shared.training_loop import LABEL_RULES


def pseudo_labels(attacked: torch.Tensor, abc_correct: torch.Tensor | None = None,
                  rbc_correct: torch.Tensor | None = None, rule: str = "authors") -> torch.Tensor:
    """a~ in {0., 1.} per example from whether it is attacked (bool) and, for ``oracle``, which model is right."""
    if rule not in LABEL_RULES:
        raise InputError(f"pseudo_labels must be one of {', '.join(LABEL_RULES)}, got {rule!r}")
    labels = attacked.clone()
    if rule == "oracle":
        if abc_correct is None or rbc_correct is None:
            raise InputError("the oracle pseudo-label rule needs abc_correct and rbc_correct")
        labels = torch.where(~attacked & ~abc_correct & rbc_correct, True, labels)
        labels = torch.where(attacked & ~rbc_correct & abc_correct, False, labels)
    return labels.float()


def composite_loss(log_probs: torch.Tensor, labels: torch.Tensor, gamma: torch.Tensor, targets: torch.Tensor,
                   weights: torch.Tensor | None = None, *, c_ce: float = 0.5, c_bce: float = 1.0,
                   c_prod: float = 0.1) -> tuple[torch.Tensor, dict[str, float]]:
    """(the weighted mean of Eq. 4.2, {"ce", "bce", "loss"} means for the progress display)."""
    ce = F.nll_loss(log_probs, labels, reduction="none")
    bce = F.binary_cross_entropy_with_logits(gamma, targets, reduction="none")
    per = c_ce * ce + c_bce * bce + c_prod * ce * bce
    if weights is not None:
        per = per * weights
    loss = per.mean()
    return loss, {"loss": float(loss.detach()), "ce": float(ce.detach().mean()), "bce": float(bce.detach().mean())}
