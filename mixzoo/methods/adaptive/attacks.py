"""The evaluation attack ``adaptive-smoothing-apgd`` of adaptive smoothing (Bai et al. 2024b, Sec. 4.2 setting D, and
the attack on the mixing network alone), on the losses of :mod:`mixzoo.methods.shared.alpha_attacks`.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from mixzoo.attacks.apgd import effective_n_targets, target_classes
from mixzoo.attacks.base import COMPONENTS_OPTION, Attack, Component, select_components
from mixzoo.attacks.suites import APGDEnsemble
from mixzoo.core.errors import InputError
from mixzoo.core.options import OptionSpec
from mixzoo.methods.shared.alpha_attacks import AttackBall, alpha_apgd, pgd_alpha  # noqa: F401 - also names here

ALPHA_COMPONENTS = ("apgd-ce-alpha", "apgd-t-alpha", "alpha-only")


class AlphaAPGD(Attack):
    """``adaptive-smoothing-apgd``: APGD-CE and APGD-T whose loss also lowers a(x) (Bai et al. 2024b, Sec. 4.2 setting
    D; weight ``alpha_weight``), and ``alpha-only``: APGD on -log a(x) alone (the mixing network attacked by itself: the
    ABC then decides). Needs a classifier with ``forward_alpha`` (an adaptive-smoothing card's).

    Given the examples' indices (the bench's default), every run's random start is drawn per example from (seed,
    component, run number, index), so an example's outcome does not depend on the batch size or the number of
    processes; without them the runs draw from one generator seeded with ``seed``."""

    name: ClassVar[str] = "adaptive-smoothing-apgd"
    code_version: ClassVar[str] = "per-example-2"  # part of the bench's cache key: older outcomes drew per batch
    options_spec: ClassVar[dict[str, OptionSpec]] = {
        **APGDEnsemble.options_spec, "components": COMPONENTS_OPTION,
        "alpha_weight": OptionSpec("weight of the alpha term in the loss of setting D", float, 0.5, low=0, high=1)}

    def components(self, model: nn.Module, n_classes: int) -> list[Component]:
        if not hasattr(model, "forward_alpha"):
            raise InputError(f"attack {self.name!r} needs a classifier with a mixing network (forward_alpha), such"
                             " as an adaptive-smoothing card's; use apgd for other models")
        w = float(self.options["alpha_weight"])
        if not 0.0 <= w <= 1.0:
            raise InputError(f"option alpha_weight of attack {self.name!r} must lie in [0, 1], got {w}")
        n_targets = effective_n_targets(n_classes, int(self.options["n_target_classes"]))
        chosen = [k for k in select_components(self.options, ALPHA_COMPONENTS, self.name)
                  if k != "apgd-t-alpha" or n_targets]
        n_iter, restarts = int(self.options["n_iter"]), int(self.options["n_restarts"])
        gen = torch.Generator().manual_seed(self.seed)

        def make(kind: str) -> Component:
            def fn(x: torch.Tensor, y: torch.Tensor, index: torch.Tensor | None = None) -> torch.Tensor:
                best = x.clone()
                broken = torch.zeros(len(x), dtype=torch.bool, device=x.device)
                if kind == "apgd-t-alpha":
                    with torch.no_grad():
                        targets = target_classes(model(x), y, n_targets)
                    plan = [targets[:, j] for j in range(n_targets) for _ in range(restarts)]
                else:
                    plan = [None] * restarts
                base = {"apgd-ce-alpha": "ce", "apgd-t-alpha": "dlr-targeted", "alpha-only": "none"}[kind]
                for run, target in enumerate(plan):
                    draw = None if index is None else (self.seed, f"{kind}/run{run}", index.cpu())
                    adv = alpha_apgd(model, x, y, AttackBall(self.eps, self.norm, n_iter), base=base, w=w,
                                     generator=gen, target=target, draw=draw)
                    with torch.no_grad():
                        now = (model(adv).argmax(1) != y) & ~broken
                    best[now], broken = adv[now], broken | now
                return best
            return Component(kind, fn, per_example=True)

        return [make(k) for k in chosen]
