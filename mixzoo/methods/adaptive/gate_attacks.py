"""``adaptive-smoothing-gate``: the gate-logit attacks of :mod:`mixzoo.methods.shared.gate_attacks` on an
adaptive-smoothing classifier, whose gate is ``alpha(x) = alpha_min + (alpha_max - alpha_min) sigmoid(gamma(x))``
(Bai et al. 2024b, Sec. 4.3)."""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import nn

from mixzoo.core.errors import InputError
from mixzoo.methods.shared.boundary_refine import GateForward, boundary_refine  # noqa: F401 - also a name here
from mixzoo.methods.shared.gate_attacks import GateLogitAttack, rbc_margin_threshold


class AdaptiveGateAttack(GateLogitAttack):
    """``adaptive-smoothing-gate``: the gate-logit attacks on an adaptive-smoothing classifier (gate logit gamma,
    the mixing network's pre-sigmoid output), with the RBC-margin screen at ``(1 - alpha_min) / alpha_min``."""

    name: ClassVar[str] = "adaptive-smoothing-gate"

    def gate(self, model: nn.Module) -> GateForward:
        """``x -> (log-probabilities of the exact mixture, gamma(x))``."""
        if not (hasattr(model, "parts") and hasattr(model, "bounds") and hasattr(model, "net")):
            raise InputError(f"attack {self.name!r} needs an adaptive-smoothing classifier (a mixing network and"
                             " alpha bounds); use apgd for other models")
        from mixzoo.methods.adaptive.mixing import adaptive_log_probs

        def forward(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # each base model and the network run once
            g, h, gamma = model.parts(x)
            lo, hi = model.bounds()
            return adaptive_log_probs(g, h, gamma, temperature=model.temperature, alpha_min=lo, alpha_max=hi), gamma

        return forward

    def screen(self, model: nn.Module) -> tuple[nn.Module, float] | None:
        thr = rbc_margin_threshold(model.bounds()[0])
        return None if math.isinf(thr) else (model.rbc, thr)
