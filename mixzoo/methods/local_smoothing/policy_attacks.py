"""The gate-logit attacks on ``local-smoothing-adaptive``'s policy: ``local-smoothing-policy-gate``.

Bai et al. (local smoothing), Eq. 7 smooths with ``alpha(x) = exp(clip(beta_theta(x), -14, 14))``; the crop (Bai et al.
(local smoothing), Sec. 6.3) has no gradient outside [-14, 14], and the smoothed scores ``(g + alpha R h) / (1 + alpha
R)`` stop moving with beta once ``alpha R`` is far from 1 either way. The attacks of
:mod:`mixzoo.methods.shared.gate_attacks` (``gate-ce``, ``gate-t``, ``gate-refine``) therefore take the policy's
output *before* its crop and exp as the gate logit: they maximise the classifier's loss minus ``mu * beta_theta(x)``,
which lowers beta (toward the non-robust g) wherever the crop or the smoothing saturates. The RBC-margin screen does
not apply: the smoothing mixes logits, not probabilities, and alpha has no positive lower bound, so no margin of h
alone keeps the output correct.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from mixzoo.core.errors import InputError
from mixzoo.methods.shared.boundary_refine import GateForward
from mixzoo.methods.shared.gate_attacks import GateLogitAttack


def policy_gate(model: nn.Module) -> GateForward:
    """``x -> (log-probabilities of the classifier, beta_theta(x) before its crop and exp)`` for a
    :class:`~mixzoo.methods.local_smoothing.smoothing.LocalSmoothingClassifier` with a policy."""
    def forward(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out, _ = model.forward_alpha(x)
        return out, model.log_alpha(x).reshape(-1)

    return forward


class PolicyGateAttack(GateLogitAttack):
    """``local-smoothing-policy-gate``: ``gate-ce``, ``gate-t`` and ``gate-refine`` on an adaptive local-smoothing
    classifier, the gate logit being beta_theta before its crop and exp (module docstring)."""

    name: ClassVar[str] = "local-smoothing-policy-gate"

    def gate(self, model: nn.Module) -> GateForward:
        if getattr(model, "log_alpha", None) is None or not hasattr(model, "forward_alpha"):
            raise InputError(f"attack {self.name!r} needs a local-smoothing classifier with a policy (a"
                             " local-smoothing-adaptive card's); use apgd for other models")
        return policy_gate(model)
