"""The adaptive smoothing strength of Bai et al. (local smoothing), Sec. 5 (Eq. 7-9): the policy beta_theta
(:class:`Policy`, Fig. 1's detector-style architecture, plugged into :class:`~.smoothing.LocalSmoothingClassifier` as
``log_alpha``: alpha(x) = exp(beta_theta(x)), Eq. 7, cropped to [-14, 14] as in Sec. 6.3), the composite loss of Eq. 9
(:func:`policy_loss`: ``(CE(g^theta(x'), y) + c1) * (c2 + (c3 - s * beta_theta(x'))_+)`` with
``s = sgn(log alpha*(x') - beta_0)``) and its objective for :func:`mixzoo.methods.shared.training_loop.train`
(:class:`PolicyObjective`).

The supervision sign. Bai et al. (local smoothing), Sec. 5.3 approximates the optimal alpha of a point attacked at
alpha_t by ``alpha~ = +inf if alpha_t <= alpha_0 else 0`` (Fig. 4: below the crossover the attack is aimed at g, so h
should decide; above it g should), so ``s = +1`` (raise beta, toward h) for alpha_t <= exp(beta_0) and ``s = -1`` (lower
beta, toward g) otherwise. (The sentence after Eq. 9 in Bai et al. (local smoothing) states the opposite direction; it
contradicts alpha~ and Fig. 4, and we follow those.) A clean point is best served by g (Sec. 5: "when x is clean ... g
outperforms h"): ``s = -1``. Points from the attack through the policy get the cross-entropy alone (Sec. 6.3).

Training batches: the clean images; PGD on the smoothed classifier at an attack-time alpha_t drawn per example from
``alpha_ts`` (R_i held constant; ``steps[1]`` steps); PGD through the policy (R_i held constant; a step count drawn
from ``steps``). Radii ``eps * U(eps_factor)`` per example (default: exactly eps, as Bai et al. (local smoothing)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from mixzoo.core.errors import InputError
from mixzoo.methods.local_smoothing.crossover import PAPER_ALPHA_TS, AtAlpha, attack_at_alpha, check_alpha_ts
from mixzoo.methods.local_smoothing.gradients import check_norm
from mixzoo.methods.local_smoothing.smoothing import (
    R_OPTIONS,
    SPACES,
    LocalSmoothingClassifier,
    smooth,
    to_log_probs,
)
from mixzoo.methods.shared.alpha_attacks import pgd_alpha
from mixzoo.methods.shared.taps import Taps, run_tapped
from mixzoo.methods.shared.training_loop import Objective, TrainConfig, epoch_generator, finite_number

ADAPTIVE = 0  # the supervision sign of points attacked through the policy: cross-entropy only


class Policy(nn.Module):
    """beta_theta(x) (Bai et al. (local smoothing), Eq. 7): ``net`` (a
    :class:`~mixzoo.methods.shared.network.MixingNetwork`) on the early and middle features of ``abc`` and ``rbc``
    (their ``taps``); images -> (B,) log-strengths."""

    def __init__(self, abc: nn.Module, rbc: nn.Module, net: nn.Module, taps: tuple[Taps, Taps]):
        super().__init__()
        self.abc, self.rbc, self.net, self.taps = abc, rbc, net, taps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, fg = run_tapped(self.abc, self.taps[0], x)
        _, fh = run_tapped(self.rbc, self.taps[1], x)
        return self.net((fg["early"], fh["early"]), (fg["middle"], fh["middle"]))


def supervision_sign(alpha_t: torch.Tensor, beta0: float) -> torch.Tensor:
    """``sgn(log alpha~ - beta_0)`` for points attacked at ``alpha_t``: +1 where alpha_t <= exp(beta_0) (h should
    decide), -1 above (g should); see the module docstring."""
    return torch.where(alpha_t <= math.exp(beta0), 1.0, -1.0)


def policy_loss(log_probs: torch.Tensor, labels: torch.Tensor, beta: torch.Tensor, sign: torch.Tensor, *,
                c1: float = 0.5, c2: float = 0.8, c3: float = 3.2) -> torch.Tensor:
    """Bai et al. (local smoothing), Eq. 9 per example: ``(CE + c1) * (c2 + (c3 - sign * beta)_+)``; rows with ``sign
    == 0`` (attacked through the policy) get the cross-entropy alone (Sec. 6.3). Defaults: the paper's c1, c2, c3."""
    ce = F.nll_loss(log_probs, labels, reduction="none")
    sign = sign.to(ce)
    composite = (ce + c1) * (c2 + F.relu(c3 - sign * beta))
    return torch.where(sign == ADAPTIVE, ce, composite)


@dataclass
class PolicyConfig(TrainConfig):
    """:class:`~mixzoo.methods.shared.training_loop.TrainConfig` (epochs, batch, optimiser, EMA, network size, steps,
    radii, seed) plus Bai et al. (local smoothing)'s: the smoothing (``r``, ``space``, ``accelerated``, ``eps_c``), Eq.
    9's ``beta0``, ``c1``, ``c2``, ``c3`` and the attack-time ``alpha_ts`` of the training attacks. ``setting``,
    ``c_ce``, ``c_bce``, ``c_prod``, ``pseudo_labels``, ``alpha_loss_max`` and ``n_target_classes`` (Bai et al.
    2024b's) are not used."""

    method: ClassVar[str] = "local-smoothing-adaptive"
    non_negative = (*TrainConfig.non_negative, "c1", "c2", "c3")
    clean_weight: float = 1.0
    eps_factor: list[float] = field(default_factory=lambda: [1.0, 1.0])
    steps: list[int] = field(default_factory=lambda: [5, 10])
    beta0: float = 4.0
    c1: float = 0.5
    c2: float = 0.8
    c3: float = 3.2
    alpha_ts: list[float] = field(default_factory=lambda: list(PAPER_ALPHA_TS))
    r: str = "ratio"
    space: str = "logits"
    accelerated: bool = False
    eps_c: float = 1e-6

    def check(self) -> PolicyConfig:
        super().check()
        bad = self.bad
        if not finite_number(self.beta0):
            raise bad("beta0", "a finite number (log alpha_0)")
        self.beta0 = float(self.beta0)
        if self.r not in R_OPTIONS:
            raise bad("r", f"one of {', '.join(R_OPTIONS)}")
        if self.space not in SPACES:
            raise bad("space", f"one of {', '.join(SPACES)}")
        if isinstance(self.accelerated, str) and self.accelerated.lower() in ("true", "false"):
            self.accelerated = self.accelerated.lower() == "true"
        if not isinstance(self.accelerated, bool):
            raise bad("accelerated", "true or false")
        if self.accelerated and self.r not in ("grad_g", "ratio"):
            raise bad("accelerated", "false unless r is grad_g or ratio (Bai et al. (local smoothing), App. A.1)")
        if isinstance(self.eps_c, bool) or not isinstance(self.eps_c, int | float) or not self.eps_c > 0:
            raise bad("eps_c", "a positive number")
        self.alpha_ts = check_alpha_ts(self.alpha_ts)
        check_norm(self.norm, f"--norm of {self.method}")
        return self


def smoothing_classifier(abc: nn.Module, rbc: nn.Module, cfg: PolicyConfig, *, policy: nn.Module | None = None,
                         gradient: str = "exact") -> LocalSmoothingClassifier:
    """The smoothed classifier of ``cfg`` (Eq. 5 / Eq. 7 with ``policy``)."""
    return LocalSmoothingClassifier(abc, rbc, alpha=0.0, r=cfg.r, space=cfg.space, norm=cfg.norm, eps_c=cfg.eps_c,
                                    accelerated=cfg.accelerated, gradient=gradient, log_alpha=policy)


@dataclass
class _Batch:
    fixed: torch.Tensor  # attacked at alpha_t
    alpha_t: torch.Tensor
    through: torch.Tensor  # attacked through the policy


class PolicyObjective(Objective):
    """Bai et al. (local smoothing), Eq. 9 for the shared trainer: the classifier is :class:`LocalSmoothingClassifier`
    with the :class:`Policy` (R_i held constant in the training attacks' gradients: ``fixed-R``)."""

    keys: ClassVar[tuple[str, ...]] = ("loss", "ce", "hinge")
    config: ClassVar[type] = PolicyConfig

    def label(self, cfg: TrainConfig) -> str:
        return "local smoothing policy"

    def classifier(self, abc: nn.Module, rbc: nn.Module, net: nn.Module, taps: tuple[Any, Any],
                   cfg: TrainConfig) -> nn.Module:
        return smoothing_classifier(abc, rbc, _policy_cfg(cfg), policy=Policy(abc, rbc, net, taps),
                                    gradient="fixed-R")

    def attacks(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, cfg: TrainConfig, gen: torch.Generator,
                part: tuple[int, int, int]) -> _Batch:
        cfg = _policy_cfg(cfg)
        lo, hi, n = part
        steps = int(torch.randint(cfg.steps[0], cfg.steps[1] + 1, (1,), generator=gen))
        pick = torch.randint(len(cfg.alpha_ts), (n,), generator=gen)[lo:hi]
        alpha_t = torch.tensor(cfg.alpha_ts, dtype=torch.float64)[pick]
        f0, f1 = cfg.eps_factor
        radii = [(cfg.eps * (f0 + (f1 - f0) * torch.rand(n, generator=gen)))[lo:hi] for _ in range(2)]
        noise = [torch.rand((n, *x.shape[1:]), generator=gen)[lo:hi] for _ in range(2)]
        fixed = attack_at_alpha(model, x, y, alpha_t, eps=radii[0], steps=cfg.steps[1], noise=noise[0],
                                norm=cfg.norm)
        through = pgd_alpha(AtAlpha(model, None), x, y, eps=radii[1].to(x), steps=steps, w=torch.zeros(len(x)).to(x),
                            noise=noise[1], norm=cfg.norm)
        return _Batch(fixed, alpha_t.to(x.device), through)

    def loss(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, attacked: _Batch,
             cfg: TrainConfig) -> tuple[torch.Tensor, dict[str, float]]:
        cfg = _policy_cfg(cfg)
        xs = torch.cat([x, attacked.fixed, attacked.through])
        ys = y.repeat(3)
        with torch.no_grad():
            g, h, r = model.parts(xs)
        beta = model.log_strength(xs)
        out = to_log_probs(smooth(g, h, r, torch.exp(beta).unsqueeze(1)), cfg.space)
        n = len(x)
        sign = torch.cat([torch.full((n,), -1.0), supervision_sign(attacked.alpha_t.cpu(), cfg.beta0),
                          torch.full((n,), float(ADAPTIVE))]).to(out)
        per = policy_loss(out, ys, beta, sign, c1=cfg.c1, c2=cfg.c2, c3=cfg.c3)
        weights = torch.ones_like(per)
        weights[:n] = cfg.clean_weight
        loss = (per * weights).mean()
        ce = F.nll_loss(out.detach(), ys, reduction="none")
        hinge = F.relu(cfg.c3 - sign * beta.detach())[sign != ADAPTIVE]
        return loss, {"loss": float(loss.detach()), "ce": float(ce.mean()), "hinge": float(hinge.mean())}

    def evaluate(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, cfg: TrainConfig) -> dict[str, float]:
        """Clean accuracy, accuracy under PGD through the policy and at alpha_t = 0 and inf (full radius, the last
        step count, a fixed seed), and the mean beta on clean and policy-attacked points."""
        cfg = _policy_cfg(cfg)
        gen = epoch_generator(cfg.seed, -1)
        eps = torch.full((len(x),), float(cfg.eps))
        noise = torch.rand(x.shape, generator=gen)
        through = pgd_alpha(AtAlpha(model, None), x, y, eps=eps.to(x), steps=cfg.steps[1], w=torch.zeros(len(x)).to(x),
                            noise=noise, norm=cfg.norm)
        at = {a: attack_at_alpha(model, x, y, torch.full((len(x),), a, dtype=torch.float64), eps=eps,
                                 steps=cfg.steps[1], noise=noise, norm=cfg.norm) for a in (0.0, math.inf)}
        with torch.no_grad():
            clean_out, clean_beta = model.forward_alpha(x)
            adv_out, adv_beta = model.forward_alpha(through)
            acc = {a: float((model(v).argmax(1) == y).float().mean()) for a, v in at.items()}
        return {"val_clean": float((clean_out.argmax(1) == y).float().mean()),
                "val_attacked": float((adv_out.argmax(1) == y).float().mean()),
                "val_attack_g": acc[0.0], "val_attack_h": acc[math.inf],
                "beta_clean": float(clean_beta.mean()), "beta_attacked": float(adv_beta.mean())}

    def describe(self, record: dict[str, float]) -> str:
        return (f"clean accuracy {record['val_clean']:.4f}, through the policy {record['val_attacked']:.4f}, at"
                f" alpha_t 0 {record['val_attack_g']:.4f}, inf {record['val_attack_h']:.4f}; mean beta clean"
                f" {record['beta_clean']:.2f} attacked {record['beta_attacked']:.2f}")


def _policy_cfg(cfg: TrainConfig) -> PolicyConfig:
    if not isinstance(cfg, PolicyConfig):
        raise InputError("the local-smoothing-adaptive objective needs a PolicyConfig")
    return cfg
