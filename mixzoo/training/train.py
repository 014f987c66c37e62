"""Training the built-in zoo: standard, PGD adversarial training and TRADES, deterministic on a CPU.

No pretrained weights can be downloaded offline, so mixzoo trains its own small accurate / robust pairs on
Fashion-MNIST and scikit-learn digits. Everything is seeded: ``torch.manual_seed`` for the initialisation, a
seeded generator for the data order, augmentation and attack starts, and deterministic algorithms where torch
has them, so the same recipe on the same machine writes the same bytes.

* PGD adversarial training (Madry et al. 2018): the inner maximisation is :func:`mixzoo.attacks.pgd.pgd`.
* TRADES (Zhang et al. 2019): ``CE(f(x), y) + beta * KL(f(x) || f(x'))`` with ``x'`` maximising the KL term
  (:func:`trades_adversary`). TRADES is known to leave larger margins on robust examples, which is what the RBC
  of a mixed classifier needs (Bai et al. 2024a, App. D.6, "robust accuracy with margin").
* MART (Wang et al. 2020, :func:`mart_loss`) and HAT (Rade & Moosavi-Dezfooli 2022, :func:`hat_loss`: TRADES
  plus helper examples labelled by a standard model), and adversarial weight perturbation on top of any of them
  (Wu et al. 2020, ``Recipe.awp``): recipes tried for an RBC with benign confidence (benchmarks/rbc_candidates.md).

:func:`evaluate_model` measures what the registry records and what choosing an RBC needs: clean and PGD-20
accuracy, the median confidence margin of clean mistakes, and the (1 - beta)-quantiles of the margins of
PGD-attacked examples that stay correct (margin = top-1 minus top-2 probability of softmax(LN(logits)), paper
Sec. 3.1 and App. D.7).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.swa_utils import AveragedModel

from mixzoo.attacks.margins import layer_norm
from mixzoo.attacks.pgd import pgd
from mixzoo.core.errors import InputError, UnknownNameError
from mixzoo.core.progress import progress_bar
from mixzoo.zoo.data import ImageDataset, load_dataset
from mixzoo.zoo.models import Normalize

METHODS: tuple[str, ...] = ("standard", "pgd", "trades", "mart", "hat", "gaussian", "lipschitz")


@dataclass(frozen=True)
class Recipe:
    """Everything that determines a zoo model's weights (with the machine's floating-point behaviour)."""

    name: str
    dataset: str
    method: str = "standard"
    arch: str = "convnet"
    arch_kwargs: Mapping[str, Any] = field(default_factory=dict)
    mean: tuple[float, ...] = (0.2860,)
    std: tuple[float, ...] = (0.3530,)
    epochs: float = 3.0
    batch_size: int = 128
    optimizer: str = "adam"
    lr: float = 1e-3
    weight_decay: float = 0.0
    warmup: float = 0.0
    augment: bool = False
    crop_padding: int = 2
    eps: float = 0.1
    attack_steps: int = 7
    eps_warmup: float = 0.0
    trades_beta: float = 6.0  # the regulariser's weight: beta of TRADES, lambda of MART
    train_eps: float | None = None
    seed: int = 0
    train_n: int | None = None
    ema: float = 0.0
    helper: str = ""  # HAT: the registered standard model that labels the helper examples
    helper_weight: float = 0.5  # HAT: gamma
    helper_scale: float = 2.0  # HAT: h, the helper example is x + h * (x' - x)
    awp: float = 0.0  # adversarial weight perturbation size gamma (0 = off)
    noise_sigma: float = 0.0  # gaussian: std of the N(0, sigma^2 I) noise added to [0, 1] images (Cohen et al.)
    loss_tau: float = 0.0  # lipschitz: temperature of the cross-entropy on the logits of a 1-Lipschitz network
    margin_offset: float = 0.0  # lipschitz: subtracted from the true-class logit before the cross-entropy
    description: str = ""

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise InputError(f"recipe {self.name!r}: method must be one of {METHODS}, got {self.method!r}")
        if self.optimizer not in ("adam", "sgd"):
            raise InputError(f"recipe {self.name!r}: optimizer must be 'adam' or 'sgd', got {self.optimizer!r}")
        if self.epochs <= 0 or self.batch_size <= 0 or self.lr <= 0:
            raise InputError(f"recipe {self.name!r}: epochs, batch_size and lr must be positive")
        if not 0.0 <= self.ema < 1.0:
            raise InputError(f"recipe {self.name!r}: ema is a decay in [0, 1) (0 = off), got {self.ema!r}")
        if self.method == "hat" and not self.helper:
            raise InputError(f"recipe {self.name!r}: method 'hat' needs helper=NAME, a registered standard model")
        if self.awp < 0:
            raise InputError(f"recipe {self.name!r}: awp is a perturbation size >= 0 (0 = off), got {self.awp!r}")
        if (self.method == "gaussian") != (self.noise_sigma > 0):
            raise InputError(f"recipe {self.name!r}: method 'gaussian' needs noise_sigma > 0, and only it takes one"
                             f" (got method {self.method!r}, noise_sigma {self.noise_sigma!r})")
        if (self.method == "lipschitz") != (self.loss_tau > 0):
            raise InputError(f"recipe {self.name!r}: method 'lipschitz' needs loss_tau > 0, and only it takes one"
                             f" (got method {self.method!r}, loss_tau {self.loss_tau!r})")

    @property
    def file(self) -> str:
        return f"{self.name}.safetensors"

    @property
    def robust(self) -> bool:
        """Adversarially trained (evaluated with PGD at ``eps``); Gaussian-noise training is for randomized
        smoothing, whose robustness is certified (:mod:`mixzoo.certify`), not attacked."""
        return self.method not in ("standard", "gaussian")

    @property
    def certified(self) -> bool:
        """Robust by construction: a Lipschitz network whose logits certify l2 radii (:mod:`mixzoo.certify`)."""
        return self.method == "lipschitz"

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["arch_kwargs"], d["mean"], d["std"] = dict(self.arch_kwargs), list(self.mean), list(self.std)
        # fields added after weights were shipped are left out at their defaults, so those files keep their bytes
        defaults = {f.name: f.default for f in dataclasses.fields(Recipe)}
        late = ("ema", "awp", "noise_sigma", "loss_tau", "margin_offset")
        late += () if self.method == "hat" else ("helper", "helper_weight", "helper_scale")
        for key in late:
            if d[key] == defaults[key]:
                del d[key]
        return d

    def replace(self, **changes: Any) -> Recipe:
        return dataclasses.replace(self, **changes)


_FMNIST = {"dataset": "fashion-mnist", "mean": (0.2860,), "std": (0.3530,)}
_DIGITS = {"dataset": "digits", "mean": (0.3,), "std": (0.4,)}
_DIGITS_LIP = {"dataset": "digits", "mean": (0.0,), "std": (1.0,)}  # a Lipschitz constant holds on [0, 1] inputs
_SMALL = {"widths": (32, 64), "hidden": 128}
_DIGITS_NET = {"widths": (16, 32), "hidden": 64, "input_hw": 8}

RECIPES: dict[str, Recipe] = {r.name: r for r in [
    Recipe("fmnist-std", **_FMNIST, method="standard",
           arch_kwargs={"widths": (32, 64, 128), "hidden": 256, "convs_per_stage": 2, "batch_norm": True},
           epochs=8, batch_size=128, optimizer="adam", lr=2e-3, weight_decay=5e-4, warmup=0.05, augment=True,
           description="accurate CNN (2x conv per stage, batch norm), random crop + flip, 8 epochs"),
    Recipe("fmnist-pgd", **_FMNIST, method="pgd", arch_kwargs=_SMALL, epochs=6, optimizer="adam", lr=1e-3,
           warmup=0.05, eps=0.1, attack_steps=7, eps_warmup=0.2,
           description="PGD-7 adversarial training, Linf eps 0.1, 6 epochs"),
    Recipe("fmnist-trades", **_FMNIST, method="trades", arch_kwargs=_SMALL, epochs=6, optimizer="adam", lr=1e-3,
           warmup=0.05, eps=0.1, attack_steps=7, eps_warmup=0.2, trades_beta=6.0,
           description="TRADES (beta 6, KL-PGD-7), Linf eps 0.1, 6 epochs"),
    Recipe("digits-std", **_DIGITS, method="standard", arch_kwargs=_DIGITS_NET, epochs=30, batch_size=64,
           optimizer="adam", lr=3e-3, description="accurate digits CNN, trains in seconds"),
    Recipe("digits-pgd", **_DIGITS, method="pgd", arch_kwargs=_DIGITS_NET, epochs=40, batch_size=64,
           optimizer="adam", lr=3e-3, eps=0.2, attack_steps=5, eps_warmup=0.2,
           description="PGD-5 adversarial training on digits, Linf eps 0.2 (at 0.1 it is as accurate as digits-std)"),
    *[Recipe(f"fmnist-rs{round(100 * s):03d}", **_FMNIST, method="gaussian", noise_sigma=s, arch_kwargs=_SMALL,
             epochs=6, optimizer="adam", lr=1e-3, warmup=0.05,
             description=f"base of a randomized-smoothing RBC: Gaussian noise augmentation sigma {s}, 6 epochs")
      for s in (0.25, 0.5, 1.0)],
    *[Recipe(f"fmnist-lip{round(100 * r):03d}", dataset="fashion-mnist", mean=(0.0,), std=(1.0,), method="lipschitz",
             arch="lipconvnet", arch_kwargs={"widths": (16, 32), "hidden": hidden}, epochs=epochs, batch_size=128,
             optimizer="adam", lr=2e-3, warmup=0.05, loss_tau=8.0, margin_offset=r * math.sqrt(2), eps=0.1,
             description=f"1-Lipschitz (l2) CNN, deel-torchlip layers, cross-entropy with temperature 8.0 and logit"
                         f" margin {r * math.sqrt(2):.3g} (aims at certified l2 radius {r:g}),"
                         # the description is in the weights' metadata: the width-128 models keep their bytes
                         f"{f' hidden width {hidden},' if hidden != 128 else ''} {epochs} epochs; no normalisation,"
                         " so the constant holds for [0, 1] images")
      for r, hidden, epochs in ((0.5, 128, 4), (0.75, 128, 12), (1.0, 256, 12))],
    Recipe("digits-lip", **_DIGITS_LIP, method="lipschitz", arch="lipconvnet",
           arch_kwargs={"widths": (16,), "hidden": 64, "input_hw": 8}, epochs=20, batch_size=64, optimizer="adam",
           lr=5e-3, loss_tau=8.0, margin_offset=0.5, eps=0.2,
           description="1-Lipschitz (l2) CNN on digits (tests), deel-torchlip layers, trains in seconds"),
    Recipe("digits-rs050", **_DIGITS, method="gaussian", noise_sigma=0.5, arch_kwargs=_DIGITS_NET, epochs=40,
           batch_size=64, optimizer="adam", lr=3e-3,
           description="base of a randomized-smoothing RBC on digits: Gaussian noise augmentation sigma 0.5"),
]}


def get_recipe(name_or_recipe: str | Recipe) -> Recipe:
    """A recipe by name (unknown names get suggestions), or the recipe itself."""
    if isinstance(name_or_recipe, Recipe):
        return name_or_recipe
    if name_or_recipe not in RECIPES:
        raise UnknownNameError("recipe", name_or_recipe, RECIPES)
    return RECIPES[name_or_recipe]


def build_network(recipe: Recipe) -> nn.Module:
    """The bare network (no normalization) of a recipe, from the architectures plugins provide (hook
    ``mixzoo_architectures``; the built-in zoo's are in ``plugins/zoo_arch.py``)."""
    from mixzoo.core.plugins import lookup

    return lookup("architecture", recipe.arch)(**dict(recipe.arch_kwargs))


# --------------------------------------------------------------------------------------------- ingredients
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


def _ln_margin(logits: torch.Tensor) -> torch.Tensor:
    """Top-1 minus top-2 probability of softmax(LN(logits)) (Bai et al. 2024a, Sec. 3.1, App. D.7; LN of
    :func:`mixzoo.attacks.margins.layer_norm`)."""
    top2 = F.softmax(layer_norm(logits), dim=1).topk(2, dim=1).values
    return top2[:, 0] - top2[:, 1]


# ------------------------------------------------------------------------------------------------ evaluation
def model_logits(model: nn.Module, data: ImageDataset, eps: float | None = 0.1, steps: int = 20,
                 batch_size: int = 500, seed: int = 0, progress: bool = False
                 ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Clean logits and (``eps`` given) logits of PGD-``steps`` L-inf examples, on the CPU. Eval mode."""
    model.eval()
    device = next(iter(model.parameters()), torch.empty(0)).device
    gen = torch.Generator(device=device).manual_seed(seed)
    clean, adv = [], []
    with progress_bar(progress) as bar:
        task = bar.add_task(f"evaluate ({'clean' if eps is None else f'PGD-{steps}'})", total=len(data))
        for start in range(0, len(data), batch_size):
            x = data.images[start:start + batch_size].to(device)
            y = data.labels[start:start + batch_size].to(device)
            with torch.no_grad():
                clean.append(model(x).cpu())
            if eps is not None:
                x_adv = pgd(model, x, y, eps=eps, steps=steps, generator=gen)
                with torch.no_grad():
                    adv.append(model(x_adv).cpu())
            bar.advance(task, len(y))
    return torch.cat(clean), (torch.cat(adv) if eps is not None else None)


def margin_metrics(labels: torch.Tensor, clean_logits: torch.Tensor, adv_logits: torch.Tensor | None = None,
                   betas: tuple[float, ...] = (0.985, 0.95)) -> dict[str, float]:
    """Accuracies and the margin statistics that select an RBC, from logits (see :func:`evaluate_model`)."""
    correct, margin = clean_logits.argmax(1) == labels, _ln_margin(clean_logits)
    out: dict[str, float] = {"n": float(len(labels)), "clean": correct.float().mean().item()}
    mistakes = margin[~correct]
    out["clean_mistake_margin_median"] = mistakes.median().item() if mistakes.numel() else float("nan")
    if adv_logits is not None:
        a_correct = adv_logits.argmax(1) == labels
        out["pgd"] = a_correct.float().mean().item()
        kept = _ln_margin(adv_logits)[a_correct]
        for beta in betas:
            key = f"{1 - beta:.3g}"
            q = torch.quantile(kept, 1 - beta).item() if kept.numel() else float("nan")
            out[f"attacked_correct_margin_q{key}"] = q
            out[f"fixable_mistakes_q{key}"] = (mistakes < q).float().mean().item() if mistakes.numel() else 0.0
    return out


def evaluate_model(model: nn.Module, data: ImageDataset, eps: float | None = 0.1, steps: int = 20,
                   batch_size: int = 500, seed: int = 0, betas: tuple[float, ...] = (0.985, 0.95),
                   progress: bool = False) -> dict[str, float]:
    """Clean and PGD-``steps`` accuracy (L-inf ``eps``) plus the margin statistics that select an RBC.

    Returns ``clean``, ``pgd`` (accuracies in [0, 1]), ``clean_mistake_margin_median``, for each beta
    ``attacked_correct_margin_q{1-beta}`` (the (1 - beta)-quantile of margins of PGD-attacked examples still
    classified correctly, Bai et al. 2024a, Sec. 4.3), and ``fixable_mistakes_q{1-beta}``: the share of clean mistakes
    whose margin is below that quantile, i.e. the mistakes an ABC could overrule without hurting robustness at
    level beta with the identity transform. ``model`` takes [0, 1] images; it is put in eval mode.
    """
    clean, adv = model_logits(model, data, eps, steps, batch_size, seed, progress)
    return margin_metrics(data.labels, clean, adv, betas)


# -------------------------------------------------------------------------------------------------- training
@dataclass
class TrainResult:
    """What :func:`train_model` produced: the weights file, its sha256, timings and measured accuracies."""

    recipe: Recipe
    path: Path | None
    sha256: str
    seconds: float
    metrics: dict[str, float]
    metrics_eval500: dict[str, float]
    state_dict: dict[str, torch.Tensor] = field(repr=False, default_factory=dict)
    logits: dict[str, torch.Tensor] = field(repr=False, default_factory=dict)

    def __str__(self) -> str:
        return self.summary()

    def summary(self) -> str:
        m = self.metrics
        robust = f", PGD-20 {100 * m['pgd']:.2f}%" if "pgd" in m else ""
        return (f"{self.recipe.name}: clean {100 * m.get('clean', float('nan')):.2f}%{robust}"
                f" on {int(m.get('n', 0))} evaluation images; trained in {self.seconds:.0f} s; sha256 {self.sha256}")


def default_weights_dir() -> Path:
    """Where the plugin that loads ``zoo`` sources reads relative weight files from (hook ``mixzoo_weights_dir``;
    the built-in zoo's is ``plugins/weights``)."""
    from mixzoo.core.errors import PluginError
    from mixzoo.core.plugins import first_result

    directory = first_result("mixzoo_weights_dir", "name its weights directory", kind="zoo")
    if directory is None:
        raise PluginError("no plugin loads source kind 'zoo' (mixzoo's built-in plugin 'zoo' does); reinstall mixzoo"
                          " or pass --out DIR")
    return Path(directory)


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


def shipped_sha256(path: Path) -> str | None:
    """The sha256 a registry zoo entry pins for the weights file ``path`` (a shipped file), or None."""
    from mixzoo.core.registry import list_models

    target = path.resolve()
    for spec in list_models():
        file = spec.source.get("file")
        if spec.source.get("kind") != "zoo" or not spec.sha256 or not isinstance(file, str):
            continue
        where = Path(file).expanduser()
        if (where if where.is_absolute() else default_weights_dir() / where).resolve() == target:
            return spec.sha256
    return None


def _recipe_changes(recipe: Recipe) -> list[str]:
    """The fields in which ``recipe`` differs from the built-in recipe of the same name (all, if there is none)."""
    shipped = RECIPES.get(recipe.name)
    if shipped is None:
        return ["recipe"]
    return [f.name for f in dataclasses.fields(Recipe) if getattr(recipe, f.name) != getattr(shipped, f.name)]


def train_model(name_or_recipe: str | Recipe, out_dir: str | Path | None = None, *, save: bool = True,
                evaluate: bool = True, eval_n: int | None = None, data_root: str | None = None,
                progress: bool = True, deterministic: bool = True, device: str = "cpu",
                seed: int | None = None) -> TrainResult:
    """Train a zoo model from its recipe on the CPU and (``save``) write ``OUT_DIR/NAME.safetensors`` and
    ``NAME.sha256`` atomically; ``out_dir`` defaults to ``plugins/weights``.

    With ``evaluate`` the clean and PGD-20 accuracy (robust recipes) and the RBC margin statistics of
    :func:`evaluate_model` are measured on the first ``eval_n`` evaluation images (all if ``None``) and on the
    first 500 (what the tests re-check). The training split never includes calibration images. ``device``
    other than ``"cpu"`` is for exploring recipes quickly; the shipped weights are trained on the CPU.
    ``seed`` overrides the recipe's seed (the weights then differ from the shipped ones).

    Shipped, sha256-pinned weights are never replaced by different bytes through the default ``out_dir``: a
    changed recipe or seed is refused before training, and a result whose sha256 differs from the registry's
    (another machine or torch) is kept under ``~/.cache/mixzoo/trained/`` instead and raises :class:`InputError`.
    An explicit ``out_dir`` (also ``plugins/weights``) is written as asked.
    """
    recipe = get_recipe(name_or_recipe)
    if seed is not None and seed != recipe.seed:
        recipe = recipe.replace(seed=seed)
    pinned = _check_destination(recipe, out_dir, save)
    train = load_dataset(recipe.dataset, "train", n=recipe.train_n, root=data_root)
    prev_det = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(deterministic, warn_only=True)
    try:
        model, seconds = _fit(recipe, train, device, progress)
    finally:
        torch.use_deterministic_algorithms(prev_det)
    network = model[1]
    if hasattr(network, "export_vanilla"):  # a re-parametrised network ships its plain form (checked equal there)
        network = network.export_vanilla(train.images[:256].cpu()).to(device)
        model = nn.Sequential(model[0], network).eval()
    state = {k: v.detach().cpu().contiguous().clone() for k, v in network.state_dict().items()}
    metrics, metrics500, logits = _evaluate_trained(model, recipe, eval_n, data_root, progress) if evaluate \
        else ({}, {}, {})
    path, sha = None, _state_sha256(state, recipe)
    if pinned is not None and sha != pinned:
        from mixzoo.core.cache import default_cache_dir

        kept, _ = save_weights(state, default_cache_dir() / "trained" / sha[:12], recipe)
        raise InputError(f"trained {recipe.name} has sha256 {sha[:12]}..., not the {pinned[:12]}... the registry pins"
                         f" for the shipped {default_weights_dir() / recipe.file} (this machine, device or torch does"
                         f" not reproduce it bit for bit), so that file was left alone and the new weights were saved"
                         f" to {kept}; pass --out DIR (out_dir) to write such weights where you choose")
    if save:
        path, sha = save_weights(state, Path(out_dir) if out_dir is not None else default_weights_dir(), recipe)
    return TrainResult(recipe, path, sha, seconds, metrics, metrics500, state, logits)


def _check_destination(recipe: Recipe, out_dir: str | Path | None, save: bool) -> str | None:
    """Refuse before the (long) training what could not be written: an unwritable or foreign ``out_dir``, or a
    changed recipe or seed that would replace the shipped, sha256-pinned weights. Returns the pinned sha256 the
    result must have (``None`` when nothing shipped is in the way)."""
    if not save:
        return None
    from mixzoo.core.cache import check_writable
    from mixzoo.core.paths import check_output, holding, is_safetensors

    check_writable(out_dir or default_weights_dir(), directory=True, what="weights directory")
    check_output(out_dir or default_weights_dir(), option="--out-dir", directory=True,
                 files={recipe.file: is_safetensors, f"{recipe.name}.sha256": holding(recipe.file.encode())})
    if out_dir is not None:
        return None
    shipped_path = default_weights_dir() / recipe.file
    pinned = shipped_sha256(shipped_path)
    changes = _recipe_changes(recipe) if pinned is not None else []
    if changes:
        what = f"seed {recipe.seed}" if changes == ["seed"] else f"changed {', '.join(changes)}"
        raise InputError(f"{recipe.name} with {what} would not reproduce the shipped weights {shipped_path},"
                         " which the registry pins by sha256; pass --out DIR (out_dir) to write them elsewhere")
    return pinned


def _fit(recipe: Recipe, train: Any, device: str, progress: bool) -> tuple[nn.Module, float]:
    """The recipe's training run, seeded from ``recipe.seed`` (model init, data order and augmentation, attack
    starts): the trained model (its weight average when the recipe keeps one) in eval mode, and the seconds."""
    torch.manual_seed(recipe.seed)
    gen = torch.Generator().manual_seed(recipe.seed)  # data order and augmentation
    attack_gen = torch.Generator(device=device).manual_seed(recipe.seed + 1)  # attack starts
    network = build_network(recipe)
    if hasattr(network, "training_form"):  # trained re-parametrised, shipped plain (see export_vanilla)
        network = network.training_form()
    model = nn.Sequential(Normalize(recipe.mean, recipe.std), network).to(device)
    images, labels = train.images.to(device), train.labels.to(device)
    if recipe.optimizer == "adam":
        opt = torch.optim.AdamW(model.parameters(), lr=recipe.lr, weight_decay=recipe.weight_decay)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=recipe.lr, momentum=0.9, nesterov=True,
                              weight_decay=recipe.weight_decay)
    averaged = _weight_average(model, recipe.ema)
    helper = None
    if recipe.method == "hat":
        from mixzoo.zoo.models import load_model

        helper = load_model(recipe.helper, device=device)
    n = len(train)
    per_epoch = math.ceil(n / recipe.batch_size)
    total = max(1, round(recipe.epochs * per_epoch))
    t0 = time.perf_counter()
    with progress_bar(progress) as bar:
        task = bar.add_task(f"train {recipe.name}", total=total)
        order = torch.empty(0, dtype=torch.long)
        for step in range(total):
            if step % per_epoch == 0:
                order = torch.randperm(n, generator=gen)
            i = step % per_epoch
            idx = order[i * recipe.batch_size:(i + 1) * recipe.batch_size].to(device)
            x, y = images[idx], labels[idx]
            if recipe.augment:
                x = augment_batch(x, recipe.crop_padding, gen)
            ramp = min(1.0, (step + 1) / (recipe.eps_warmup * total)) if recipe.eps_warmup > 0 else 1.0
            for group in opt.param_groups:
                group["lr"] = recipe.lr * _lr_factor(step, total, recipe.warmup)
            model.train()
            train_eps = recipe.eps if recipe.train_eps is None else recipe.train_eps
            objective = _objective(model, recipe, x, y, train_eps * ramp, attack_gen, helper)
            # AWP: the gradient at the worst nearby weights, applied to the unperturbed ones
            shift = weight_perturbation(model, objective(), recipe.awp) if recipe.awp > 0 else {}
            shift_weights(model, shift, 1.0)
            loss = objective()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            shift_weights(model, shift, -1.0)
            opt.step()
            if averaged is not None:
                averaged.update_parameters(model)
            bar.advance(task)
    seconds = time.perf_counter() - t0
    model = averaged.module if averaged is not None else model
    return model.eval(), seconds


def _evaluate_trained(model: nn.Module, recipe: Recipe, eval_n: int | None, data_root: str | None,
                      progress: bool) -> tuple[dict[str, float], dict[str, float], dict[str, torch.Tensor]]:
    """Clean and PGD-20 accuracy (robust recipes) with the RBC margin statistics on the first ``eval_n`` evaluation
    images, the same on the first 500, and the logits they came from."""
    evaluation = load_dataset(recipe.dataset, "evaluation", n=eval_n, root=data_root)
    eps = recipe.eps if recipe.robust else None
    clean_logits, adv_logits = model_logits(model, evaluation, eps=eps, progress=progress)
    metrics = margin_metrics(evaluation.labels, clean_logits, adv_logits)
    logits = {"clean": clean_logits, "labels": evaluation.labels}
    if adv_logits is not None:
        logits["pgd"] = adv_logits
    if robust_eps := (recipe.eps if recipe.robust else None):
        metrics["eps"] = robust_eps
    return metrics, evaluate_model(model, evaluation.subset(500), eps=None), logits


def _serialize(state: dict[str, torch.Tensor], recipe: Recipe) -> bytes:
    from safetensors.torch import save

    # one metadata key only: safetensors writes its metadata map in hash order, which varies between processes
    return save(state, metadata={"mixzoo_recipe": json.dumps(recipe.to_dict(), sort_keys=True)})


def _state_sha256(state: dict[str, torch.Tensor], recipe: Recipe) -> str:
    return hashlib.sha256(_serialize(state, recipe)).hexdigest()


def save_weights(state: dict[str, torch.Tensor], out_dir: Path, recipe: Recipe) -> tuple[Path, str]:
    """Write ``NAME.safetensors`` (recipe JSON in the metadata) and ``NAME.sha256`` atomically."""
    from mixzoo.core.cache import atomic_write_bytes, atomic_write_text

    blob = _serialize(state, recipe)
    sha = hashlib.sha256(blob).hexdigest()
    path = atomic_write_bytes(out_dir / recipe.file, blob)
    atomic_write_text(out_dir / f"{recipe.name}.sha256", f"{sha}  {recipe.file}\n")
    for written in (path, out_dir / f"{recipe.name}.sha256"):
        written.chmod(0o644)  # package data, readable by everyone (mkstemp creates 0600)
    return path, sha


def registry_entry(result: TrainResult, command: str, date: str, machine: str = "2-core CPU",
                   file: str | None = None) -> str:
    """The ``[models.NAME]`` TOML table for a trained zoo model (paste into the zoo section of mixzoo/registry.toml).

    ``reported`` holds fractions: ``clean`` / ``pgd20`` on the whole evaluation split, ``clean_eval500`` on its
    first 500 images (what ``tests/zoo/test_zoo.py`` re-measures). ``file`` overrides ``source.file`` (default: the
    recipe's file name, relative to ``plugins/weights``)."""
    r, m = result.recipe, result.metrics
    arch_kwargs = dict(r.arch_kwargs)
    if r.certified:  # the loss temperature scales the shipped logits (calibrated probabilities, constant tau)
        arch_kwargs["logit_scale"] = r.loss_tau
    kwargs = ", ".join(f"{k} = {json.dumps(list(v) if isinstance(v, tuple) else v)}" for k, v in arch_kwargs.items())
    lines = [
        f"[models.{r.name}]",
        f'role = "{"robust" if r.robust or r.noise_sigma > 0 else "accurate"}"',
        f'dataset = "{r.dataset}"',
        "num_classes = 10",
        f"input_size = [1, {r.arch_kwargs.get('input_hw', 28)}, {r.arch_kwargs.get('input_hw', 28)}]",
        f"mean = {list(r.mean)}",
        f"std = {list(r.std)}",
        f'source = {{ kind = "zoo", arch = "{r.arch}", file = "{file or r.file}", kwargs = {{ {kwargs} }} }}',
        f'sha256 = "{result.sha256}"',
    ]
    if r.robust and not r.certified:
        lines += ['threat_model = "Linf"', f"epsilon = {r.eps}"]
    elif r.certified:  # certified in L2 by its Lipschitz constant (epsilon: the radius the margin offset aims at)
        constant = float(getattr(build_network(r.replace(arch_kwargs=arch_kwargs)), "lipschitz_constant", 1.0))
        lines += ['threat_model = "L2"', f"epsilon = {round(r.margin_offset / math.sqrt(2), 4)}",
                  f'lipschitz = {{ constant = {constant}, norm = "l2" }}']
    elif r.noise_sigma > 0:  # robust once smoothed: certified in L2 (epsilon: nominal, the training noise std)
        lines += ['threat_model = "L2"', f"epsilon = {r.noise_sigma}", f"smoothing_sigma = {r.noise_sigma}"]
    rep = [f"clean = {m['clean']:.4f}"]
    if "pgd" in m:
        rep.append(f"pgd20 = {m['pgd']:.4f}")
    rep += [f"clean_eval500 = {result.metrics_eval500['clean']:.4f}", f"n = {int(m['n'])}",
            f'source = "measured by `{command}` on {date}, {machine}"']
    lines.append(f"reported = {{ {', '.join(rep)} }}")
    lines.append(f'description = "{r.description}"')
    return "\n".join(lines) + "\n"
