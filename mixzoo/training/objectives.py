"""What a zoo model is trained on, per step (:func:`mixzoo.training.train.train_model`): the inner maximisations (PGD,
Madry et al. 2018, :func:`mixzoo.attacks.pgd.pgd`; TRADES, Zhang et al. 2019), the outer losses (TRADES, MART,
HAT, the Lipschitz margin loss, Gaussian augmentation), adversarial weight perturbation (Wu et al. 2020), the
weight average, the augmentation and the learning-rate schedule."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.swa_utils import AveragedModel

from mixzoo.attacks.pgd import pgd
from mixzoo.training.recipes import Recipe


def augment_batch(x: torch.Tensor, padding: int, generator: torch.Generator) -> torch.Tensor:
    """Random crop with zero padding ``padding`` and random horizontal flip, vectorised over the batch."""
    n, c, h, w = x.shape
    padded = F.pad(x, (padding,) * 4)
    dev = x.device
    dy = torch.randint(0, 2 * padding + 1, (n,), generator=generator).to(dev)
    dx = torch.randint(0, 2 * padding + 1, (n,), generator=generator).to(dev)
    rows = (dy[:, None] + torch.arange(h, device=dev))[:, None, :, None]  # n,1,h,1
    cols = (dx[:, None] + torch.arange(w, device=dev))[:, None, None, :]  # n,1,1,w
    idx_n, idx_c = torch.arange(n, device=dev)[:, None, None, None], torch.arange(c, device=dev)[None, :, None, None]
    out = padded[idx_n, idx_c, rows, cols]
    flip = (torch.rand(n, generator=generator) < 0.5).to(dev)
    return torch.where(flip[:, None, None, None], out.flip(-1), out)


def trades_adversary(model: nn.Module, x: torch.Tensor, eps: float, steps: int,
                     generator: torch.Generator, step_size: float | None = None) -> torch.Tensor:
    """TRADES inner maximisation: ``argmax_{||x'-x||_inf <= eps} KL(f(x) || f(x'))`` by sign-gradient ascent
    from ``x + 0.001 * N(0, I)`` (Zhang et al. 2019, Alg. 1); the result is clipped to [0, 1]."""
    step_size = 2.5 * eps / steps if step_size is None else step_size
    with torch.no_grad():
        p_clean = F.softmax(model(x), dim=1)
    noise = torch.randn(x.shape, generator=generator, device=generator.device).to(x.device)
    x_adv = (x + 0.001 * noise).clamp(0, 1)
    for _ in range(steps):
        x_adv.requires_grad_(True)
        loss = F.kl_div(F.log_softmax(model(x_adv), dim=1), p_clean, reduction="sum")
        (grad,) = torch.autograd.grad(loss, x_adv)
        with torch.no_grad():
            x_adv = torch.min(torch.max(x_adv + step_size * grad.sign(), x - eps), x + eps).clamp(0, 1)
    return x_adv.detach()


def _lr_factor(step: int, total: int, warmup: float) -> float:
    """Linear warm-up over ``warmup * total`` steps, then cosine decay to zero."""
    w = int(warmup * total)
    if step < w:
        return (step + 1) / w
    return 0.5 * (1 + math.cos(math.pi * (step - w) / max(1, total - w)))


def _objective(model: nn.Module, recipe: Recipe, x: torch.Tensor, y: torch.Tensor, eps: float,
               gen: torch.Generator, helper: nn.Module | None = None) -> Callable[[], torch.Tensor]:
    """Run a step's inner maximisation now and return its outer loss as a function of the current weights
    (evaluated once, or twice with adversarial weight perturbation): standard CE, CE on PGD examples (Madry et
    al.), the TRADES objective, MART or HAT."""
    if recipe.method == "gaussian":  # Cohen et al. 2019: train the base of a smoothed classifier on x + N(0, s^2)
        noise = torch.randn(x.shape, generator=gen, device=gen.device).to(x.device)
        x_noisy = x + recipe.noise_sigma * noise
        return lambda: F.cross_entropy(model(x_noisy), y)
    if recipe.method == "lipschitz":  # no attack: the architecture bounds every perturbation's effect
        return lambda: lipschitz_loss(model(x), y, recipe.loss_tau, recipe.margin_offset)
    if recipe.method == "standard" or eps <= 0:
        return lambda: F.cross_entropy(model(x), y)
    model.eval()  # attacks see running statistics, as in the TRADES reference code
    if recipe.method in ("pgd", "mart"):
        x_adv = pgd(model, x, y, eps=eps, steps=recipe.attack_steps, generator=gen)
    else:
        x_adv = trades_adversary(model, x, eps, recipe.attack_steps, gen)
    model.train()
    if recipe.method == "pgd":
        return lambda: F.cross_entropy(model(x_adv), y)
    if recipe.method == "mart":
        return lambda: mart_loss(model(x), model(x_adv), y, recipe.trades_beta)
    if recipe.method == "hat":
        assert helper is not None
        x_help = x + recipe.helper_scale * (x_adv - x)
        with torch.no_grad():
            y_help = helper(x_adv).argmax(1)
        return lambda: hat_loss(model(x), model(x_adv), model(x_help), y, y_help, recipe.trades_beta,
                                recipe.helper_weight)
    return lambda: trades_loss(model(x), model(x_adv), y, recipe.trades_beta)


def lipschitz_loss(logits: torch.Tensor, y: torch.Tensor, tau: float, offset: float) -> torch.Tensor:
    """Cross-entropy with temperature and margin for a 1-Lipschitz network: ``CE(tau * (f(x) - offset * e_y), y) /
    tau`` (deel-torchlip's ``TauCrossEntropyLoss``, Bethune et al. 2022, on logits whose true class is lowered by
    ``offset``). An L-Lipschitz (l2) logit map certifies radius ``margin / (sqrt(2) L)``, so the loss keeps pushing
    until the logit margin exceeds ``offset``, i.e. until the certified radius exceeds ``offset / sqrt(2)``; a lower
    ``tau`` trades clean accuracy for larger margins."""
    shifted = logits - offset * F.one_hot(y, logits.shape[1]).to(logits.dtype)
    return F.cross_entropy(tau * shifted, y) / tau


def trades_loss(logits: torch.Tensor, logits_adv: torch.Tensor, y: torch.Tensor, beta: float) -> torch.Tensor:
    """TRADES (Zhang et al. 2019, Eq. 5): ``CE(f(x), y) + beta * KL(f(x) || f(x'))``, averaged over the batch."""
    kl = F.kl_div(F.log_softmax(logits_adv, dim=1), F.softmax(logits, dim=1), reduction="batchmean")
    return F.cross_entropy(logits, y) + beta * kl


def hat_loss(logits: torch.Tensor, logits_adv: torch.Tensor, logits_help: torch.Tensor, y: torch.Tensor,
             y_help: torch.Tensor, beta: float, gamma: float) -> torch.Tensor:
    """HAT (Rade & Moosavi-Dezfooli, ICLR 2022, Eq. 5): the TRADES objective plus ``gamma * CE(f(x_h), y_h)``
    on a helper example ``x_h = x + h * (x' - x)`` beyond the TRADES example ``x'``, labelled ``y_h`` by a
    standard model at ``x'``. It penalises the excessive input-space margin that adversarial training builds
    along adversarial directions, which is what costs clean accuracy."""
    return trades_loss(logits, logits_adv, y, beta) + gamma * F.cross_entropy(logits_help, y_help)


def weight_perturbation(model: nn.Module, loss: torch.Tensor, gamma: float) -> dict[str, torch.Tensor]:
    """Adversarial weight perturbation (Wu et al., NeurIPS 2020, Eq. 9 with one ascent step): for every weight
    matrix / kernel ``w`` (biases and normalisation parameters are left alone), ``v = gamma * ||w|| * g / ||g||``
    with ``g`` the gradient of ``loss`` (the adversarial loss) at ``w``. Returns ``{name: v}``; see
    :func:`shift_weights`."""
    named = [(k, w) for k, w in model.named_parameters() if w.requires_grad and w.dim() > 1]
    grads = torch.autograd.grad(loss, [w for _, w in named])
    return {k: gamma * w.detach().norm() * g / g.norm().clamp_min(1e-12)
            for (k, w), g in zip(named, grads, strict=True)}


@torch.no_grad()
def shift_weights(model: nn.Module, shift: Mapping[str, torch.Tensor], sign: float) -> None:
    """Add (``sign`` 1) or remove (-1) a weight perturbation in place."""
    params = dict(model.named_parameters())
    for k, v in shift.items():
        params[k].add_(v, alpha=sign)


def mart_loss(logits: torch.Tensor, logits_adv: torch.Tensor, y: torch.Tensor, lam: float) -> torch.Tensor:
    """MART (Wang et al., ICLR 2020, Eq. 7): a boosted CE on the PGD example, ``-log p_y(x') - log(1 - max_{k!=y}
    p_k(x'))``, plus ``lam * KL(p(x) || p(x')) * (1 - p_y(x))``, which weighs the clean-adversarial consistency
    term by how *mis*classified the clean example is."""
    p_adv = F.softmax(logits_adv, dim=1)
    top_other = p_adv.scatter(1, y[:, None], 0.0).amax(dim=1)
    bce = F.cross_entropy(logits_adv, y) - torch.log1p(-top_other.clamp(max=1 - 1e-6)).mean()
    p = F.softmax(logits, dim=1)
    kl = (p * (F.log_softmax(logits, dim=1) - F.log_softmax(logits_adv, dim=1))).sum(dim=1)
    return bce + lam * (kl * (1.0 - p.gather(1, y[:, None]).squeeze(1))).mean()


def _weight_average(model: nn.Module, decay: float) -> AveragedModel | None:
    """Exponential moving average of the weights and buffers (``decay`` 0: none).

    Weight averaging is one of the few training-side changes known to improve robust generalisation
    (Gowal et al. 2020, Rebuffi et al. 2021); the decay is warmed up as min(decay, (1 + t) / (10 + t)) so the
    average does not remember the random initialisation.
    """
    if decay <= 0:
        return None

    def ema(avg: torch.Tensor, new: torch.Tensor, num_averaged: torch.Tensor) -> torch.Tensor:
        d = min(decay, (1 + int(num_averaged)) / (10 + int(num_averaged)))
        return avg.lerp(new, 1 - d) if avg.is_floating_point() else new

    return AveragedModel(model, avg_fn=ema, use_buffers=True)
