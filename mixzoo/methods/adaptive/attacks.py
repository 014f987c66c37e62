"""Attacks on the mixing network: the training-time attacks of settings A, B, C (Bai et al. 2024b, Sec. 4.2, 5.2) and
the evaluation attack ``adaptive-smoothing-apgd`` (setting D and the attack on the mixing network alone).

Every loss here is the authors' ``SimpleCompLoss`` form, maximised by the adversary:
``(1 - w) * L(h^a(x'), y) + w * BCE(a(x'), 1)`` with ``BCE(a, 1) = -log a``: the second term pushes a(x) down,
toward the non-robust ABC (Sec. 5.2: "a randomly-weighted binary cross-entropy component that aims to decrease
the mixing network output"). ``w = 1`` attacks the mixing network alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from mixzoo.attacks.apgd import (
    ApgdSettings,
    apgd_run,
    clean_record,
    dlr_targeted_loss,
    effective_n_targets,
    target_classes,
)
from mixzoo.attacks.base import (
    BATCH_SIZE,
    COMPONENTS_OPTION,
    N_ITER,
    N_RESTARTS,
    N_TARGET_CLASSES,
    Attack,
    Component,
    select_components,
)
from mixzoo.core.errors import InputError
from mixzoo.core.options import OptionSpec

ALPHA_COMPONENTS = ("apgd-ce-alpha", "apgd-t-alpha", "alpha-only")


def _packed(model: nn.Module) -> Any:
    """``x -> (log-probs, [log-probs | log a])``: APGD judges the first and differentiates the second."""
    def forward(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out, log_a = model.forward_alpha(x)
        return out, torch.cat([out, log_a[:, None]], dim=1)
    return forward


def alpha_loss(base: str, w: torch.Tensor | float) -> Any:
    """The APGD loss ``(1 - w) L + w (-log a)`` on packed logits; ``base``: ``ce``, ``dlr-targeted`` or ``none``."""
    def loss(packed: torch.Tensor, labels: torch.Tensor, target: torch.Tensor | None) -> torch.Tensor:
        out, log_a = packed[:, :-1], packed[:, -1]
        if base == "none":
            return -log_a
        main = F.nll_loss(out, labels, reduction="none") if base == "ce" else dlr_targeted_loss(out, labels, target)
        return (1 - w) * main - w * log_a
    return loss


@dataclass(frozen=True)
class AttackBall:
    """One attack run's threat model and length: radius ``eps`` in ``norm`` (``Linf`` or ``L2``), ``n_iter`` APGD
    iterations."""

    eps: float
    norm: str
    n_iter: int


def alpha_apgd(model: nn.Module, x: torch.Tensor, y: torch.Tensor, ball: AttackBall, *, base: str,
               w: torch.Tensor | float, generator: torch.Generator | None, target: torch.Tensor | None = None,
               noise: torch.Tensor | None = None, draw: tuple[int, str, torch.Tensor] | None = None) -> torch.Tensor:
    """One APGD run (:func:`mixzoo.attacks.apgd.apgd_run`) in ``ball`` on :func:`alpha_loss` (Bai et al. 2024b,
    Sec. 4.2 setting D: ``(1 - w) L + w (-log a(x))``); returns the best point found for the judged output (the
    record's point: misclassified if any visited point was). The random start comes from ``noise`` or the
    per-example ``draw`` (:func:`mixzoo.attacks.apgd.random_start`) if given, else from ``generator``."""
    forward = _packed(model)
    record = clean_record(forward, x, y)
    apgd_run(forward, x, y, record,
             ApgdSettings(eps=ball.eps, norm=ball.norm, n_iter=ball.n_iter, loss=alpha_loss(base, w)), target=target,
             generator=generator, noise=noise, draw=draw)
    return record.x


def pgd_alpha(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, eps: torch.Tensor, steps: int,
              w: torch.Tensor, generator: torch.Generator | None = None, noise: torch.Tensor | None = None,
              norm: str = "Linf") -> torch.Tensor:
    """PGD with per-example radius ``eps`` ([n]) and alpha-loss weight ``w`` (settings A, B: the gradient variant
    is the model's), step 2.5 eps / steps, uniform random start (L-inf; L2: a random direction at eps / 2) from
    ``noise`` (uniform [0, 1), the shape of ``x``) if given, else drawn from ``generator``."""
    e = eps.view(-1, *([1] * (x.ndim - 1)))
    if noise is None:
        if generator is None:
            raise ValueError("pgd_alpha needs a generator or noise")
        noise = torch.rand(x.shape, generator=generator)
    noise = noise.to(x) * 2 - 1
    if norm == "Linf":
        delta = noise * e
    else:
        delta = noise / noise.flatten(1).norm(dim=1).clamp_min(1e-12).view_as(e) * e / 2
    x_adv = (x + delta).clamp(0, 1).detach()
    loss_fn = alpha_loss("ce", w)
    for _ in range(steps):
        x_adv.requires_grad_(True)
        with torch.enable_grad():
            out, log_a = model.forward_alpha(x_adv)
            loss = loss_fn(torch.cat([out, log_a[:, None]], dim=1), y, None).sum()
            (grad,) = torch.autograd.grad(loss, x_adv)
        with torch.no_grad():
            if norm == "Linf":
                x_adv = torch.min(torch.max(x_adv + 2.5 * e / steps * grad.sign(), x - e), x + e)
            else:
                g = grad / grad.flatten(1).norm(dim=1).clamp_min(1e-12).view_as(e)
                d = x_adv + 2.5 * e / steps * g - x
                d = d * (e / d.flatten(1).norm(dim=1).clamp_min(1e-12).view_as(e)).clamp(max=1)
                x_adv = x + d
            x_adv = x_adv.clamp(0, 1).detach()
    return x_adv


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
        "n_iter": N_ITER, "n_target_classes": N_TARGET_CLASSES, "n_restarts": N_RESTARTS, "batch_size": BATCH_SIZE,
        "components": COMPONENTS_OPTION,
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
