"""The recipes of the built-in zoo: everything that determines a zoo model's weights (with the machine's
floating-point behaviour), by name."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mixzoo.core.errors import InputError, UnknownNameError

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
        problems = (
            (self.method not in METHODS, f"method must be one of {METHODS}, got {self.method!r}"),
            (self.optimizer not in ("adam", "sgd"), f"optimizer must be 'adam' or 'sgd', got {self.optimizer!r}"),
            (self.epochs <= 0 or self.batch_size <= 0 or self.lr <= 0, "epochs, batch_size and lr must be positive"),
            (not 0.0 <= self.ema < 1.0, f"ema is a decay in [0, 1) (0 = off), got {self.ema!r}"),
            (self.method == "hat" and not self.helper, "method 'hat' needs helper=NAME, a registered standard model"),
            (self.awp < 0, f"awp is a perturbation size >= 0 (0 = off), got {self.awp!r}"),
            ((self.method == "gaussian") != (self.noise_sigma > 0), "method 'gaussian' needs noise_sigma > 0, and only"
             f" it takes one (got method {self.method!r}, noise_sigma {self.noise_sigma!r})"),
            ((self.method == "lipschitz") != (self.loss_tau > 0), "method 'lipschitz' needs loss_tau > 0, and only it"
             f" takes one (got method {self.method!r}, loss_tau {self.loss_tau!r})"))
        for bad, message in problems:
            if bad:
                raise InputError(f"recipe {self.name!r}: {message}")

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
