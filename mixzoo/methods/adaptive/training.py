"""Training the mixing network (Bai et al. 2024b, Sec. 4.4, 5.2, App. D.1) on the train split, base models frozen.

Each batch: the clean images and attacks on them regenerated against the current mixed classifier (mixing network
in eval mode while attacking, as the authors' trainer does), with a per-example radius ``eps * U(0.4, 1.1)``, a
random number of steps in ``steps`` and a random weight ``w ~ U(0, alpha_loss_max)`` of the term that lowers a(x)
(:mod:`mixzoo.methods.shared.alpha_attacks`):

* ``A``: gray-box PGD (the mixing network's features detached: no gradient through it);
* ``B``: white-box PGD, end-to-end;
* ``C``: white-box APGD-CE + APGD-T (``n_target_classes`` targets), end-to-end (Bai et al. 2024b, Sec. 5.2: FAB and
  Square left out of training).

Then one AdamW step on the composite loss (Eq. 4.2) over clean and attacked images, with the pseudo-labels of
:mod:`.loss` and weight ``clean_weight`` on clean images; the range of alpha is the full (0, 1) (App. D.1). An
optional EMA of the weights (``ema``: decay, 0 = off; 0.8 in App. D.1) gives the final weights.

The loop (seeding, checkpoints, resumption, EMA, DDP) is :mod:`mixzoo.methods.shared.training_loop`.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import torch
from torch import nn

from mixzoo.attacks.apgd import target_classes
from mixzoo.methods.adaptive.loss import composite_loss, pseudo_labels
from mixzoo.methods.adaptive.mixing import AdaptiveClassifier, adaptive_log_probs
from mixzoo.methods.shared import training_loop
from mixzoo.methods.shared.alpha_attacks import AttackBall, alpha_apgd, pgd_alpha
from mixzoo.methods.shared.training_loop import Objective as TrainingObjective
from mixzoo.methods.shared.training_loop import TrainConfig, TrainResult, TrainRun, epoch_generator


def attack_batch(model: AdaptiveClassifier, x: torch.Tensor, y: torch.Tensor, cfg: TrainConfig,
                 gen: torch.Generator, part: tuple[int, int, int] | None = None) -> list[torch.Tensor]:
    """The setting's attacked images of one batch (a list: one tensor per attack run).

    ``part = (lo, hi, n)``: ``x`` is rows ``lo:hi`` of a global batch of ``n`` (one rank's shard): every draw is made
    for the whole batch from ``gen`` and sliced, so each example gets the numbers of its global position and ``gen``
    advances as in one process (APGD's random starts included: drawn here as :func:`mixzoo.attacks.apgd.random_start`
    draws them).
    """
    lo, hi, n = part if part is not None else (0, len(x), len(x))
    lo_steps, hi_steps = cfg.steps
    steps = int(torch.randint(lo_steps, hi_steps + 1, (1,), generator=gen))
    w = (torch.rand(n, generator=gen)[lo:hi] * cfg.alpha_loss_max).to(x)
    if cfg.setting in ("A", "B"):
        model.gradient = "gray" if cfg.setting == "A" else "exact"
        eps = (cfg.eps * (cfg.eps_factor[0] + (cfg.eps_factor[1] - cfg.eps_factor[0])
                          * torch.rand(n, generator=gen)[lo:hi])).to(x)
        noise = torch.rand((n, *x.shape[1:]), generator=gen)[lo:hi]
        return [pgd_alpha(model, x, y, eps=eps, steps=steps, w=w, noise=noise, norm=cfg.norm)]
    model.gradient = "exact"
    out = []
    runs: list[torch.Tensor | None] = [None]
    if cfg.n_target_classes and model.rbc is not None:
        with torch.no_grad():
            targets = target_classes(model(x), y, min(cfg.n_target_classes, 9))
        runs += [targets[:, j] for j in range(targets.shape[1])]
    shape = (n, *x.shape[1:])
    for target in runs:
        eps = cfg.eps * float(cfg.eps_factor[0] + (cfg.eps_factor[1] - cfg.eps_factor[0])
                              * torch.rand(1, generator=gen))
        noise = 2 * torch.rand(shape, generator=gen) - 1 if cfg.norm == "Linf" else torch.randn(shape, generator=gen)
        out.append(alpha_apgd(model, x, y, AttackBall(eps, cfg.norm, steps),
                              base="ce" if target is None else "dlr-targeted", w=w, generator=None, target=target,
                              noise=noise[lo:hi]))
    return out


class AdaptiveObjective(TrainingObjective):
    """Adaptive smoothing's objective (Bai et al. 2024b, Eq. 4.2) for the shared loop: the classifier
    :class:`~mixzoo.methods.adaptive.mixing.AdaptiveClassifier`, the setting's attacks (:func:`attack_batch`), the
    composite loss."""

    def label(self, cfg: TrainConfig) -> str:
        return f"adaptive smoothing {cfg.setting}"

    def classifier(self, abc: nn.Module, rbc: nn.Module, net: nn.Module, taps: tuple[Any, Any],
                   cfg: TrainConfig) -> nn.Module:
        return AdaptiveClassifier(abc, rbc, net, temperature=cfg.temperature, bounded=False, taps=taps)

    def attacks(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, cfg: TrainConfig, gen: torch.Generator,
                part: tuple[int, int, int]) -> Any:
        return attack_batch(model, x, y, cfg, gen, part=part)

    def loss(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, attacked: Any,
             cfg: TrainConfig) -> tuple[torch.Tensor, dict[str, float]]:
        model.gradient = "exact"
        xs = torch.cat([x, *attacked])
        ys = y.repeat(len(attacked) + 1)
        is_adv = torch.arange(len(xs), device=xs.device) >= len(x)
        g, h, gamma = model.parts(xs)
        out = adaptive_log_probs(g, h, gamma, temperature=cfg.temperature)
        targets = pseudo_labels(is_adv, g.argmax(1) == ys, h.argmax(1) == ys, cfg.pseudo_labels)
        weights = torch.where(is_adv, 1.0, cfg.clean_weight).to(out)
        return composite_loss(out, ys, gamma, targets, weights, c_ce=cfg.c_ce, c_bce=cfg.c_bce, c_prod=cfg.c_prod)

    def evaluate(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, cfg: TrainConfig) -> dict[str, float]:
        """Clean and attacked accuracy (the setting's attack at the full radius, fixed seed) and mean alpha."""
        fixed = TrainConfig(**{**asdict(cfg), "eps_factor": [1.0, 1.0], "steps": [cfg.steps[1]] * 2,
                               "alpha_loss_max": 0.0, "n_target_classes": 0})
        advs = attack_batch(model, x, y, fixed, epoch_generator(cfg.seed, -1))
        model.gradient = "exact"
        with torch.no_grad():
            clean_out, clean_la = model.forward_alpha(x)
            adv_out, adv_la = model.forward_alpha(advs[0])
        return {"val_clean": float((clean_out.argmax(1) == y).float().mean()),
                "val_attacked": float((adv_out.argmax(1) == y).float().mean()),
                "alpha_clean": float(clean_la.exp().mean()), "alpha_attacked": float(adv_la.exp().mean())}

    def describe(self, record: dict[str, float]) -> str:
        return (f"clean accuracy {record['val_clean']:.4f}, attacked {record['val_attacked']:.4f}, mean alpha clean"
                f" {record['alpha_clean']:.3f} attacked {record['alpha_attacked']:.3f}")


Objective = AdaptiveObjective  # this module's objective; the contract is mixzoo.methods.shared.training_loop.Objective


def train(abc: nn.Module, rbc: nn.Module, images: torch.Tensor, labels: torch.Tensor, cfg: TrainConfig, *,
          objective: TrainingObjective | None = None, run: TrainRun | None = None) -> TrainResult:
    """:func:`mixzoo.methods.shared.training_loop.train` with adaptive smoothing's objective by default
    (:class:`AdaptiveObjective`, Bai et al. 2024b, Eq. 4.2)."""
    return training_loop.train(abc, rbc, images, labels, cfg,
                               objective=objective if objective is not None else AdaptiveObjective(), run=run)
