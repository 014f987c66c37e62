"""An attack: FGSM, one step along the sign of the loss gradient (``mixzoo bench --attack NAME``).

An attack subclasses :class:`mixzoo.attacks.Attack`: ``name``, the options of its own in ``options_spec`` (the
base adds those its run loop reads, ``batch_size``) and ``components``, the stages it runs. The base runs each
component on the examples still robust and counts a candidate only inside the eps-ball and [0, 1].
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from mixzoo.attacks import Attack, Component
from mixzoo.core.options import OptionSpec


class FGSM(Attack):
    """One step of size ``step * eps`` along the loss gradient's sign (Linf) or direction (L2)."""

    name: ClassVar[str] = "example-fgsm"
    options_spec: ClassVar[dict[str, OptionSpec]] = {
        "step": OptionSpec("the step as a share of eps", float, 1.0, low=0, high=1)}

    def components(self, model: nn.Module, n_classes: int) -> list[Component]:
        def fgsm(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            x = x.clone().requires_grad_(True)
            (grad,) = torch.autograd.grad(F.cross_entropy(model(x), y), x)
            if self.norm == "Linf":
                direction = grad.sign()
            else:
                direction = grad / grad.flatten(1).norm(dim=1).clamp_min(1e-12).view(-1, *[1] * (x.dim() - 1))
            return (x + self.options["step"] * self.eps * direction).clamp(0.0, 1.0).detach()

        return [Component("fgsm", fgsm)]
