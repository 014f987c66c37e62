"""mixzoo-plugin-example: a third-party mixzoo plugin, complete and small.

Registered through the entry point ``[project.entry-points.mixzoo] example = "mixzoo_plugin_example"``; mixzoo
calls the hooks below (specified in :mod:`mixzoo.core.hookspecs`):

* ``mixzoo_model_specs``: one registry entry, ``example-digits-linear`` (robust, digits, Linf 0.1);
* ``mixzoo_model_sources``: the loader of source kind ``example-digits`` (:func:`load`);
* ``mixzoo_clamp_functions``: ``tanh-clamp`` for the RBC transform M(s, p, c) (paper 000, Eq. 4);
* ``mixzoo_mixing_methods``: ``example-confidence-switch``, a mixing method of its own (:class:`ConfidenceSwitch`,
  written from the "A mixing method" section of mixzoo's CONTRIBUTING.md): the RBC's prediction where the RBC is
  confident, the ABC's elsewhere.

The model needs no weight file: :func:`linear_digits_classifier` trains it when it is loaded, deterministically
(fixed seed, full-batch updates on mixzoo's ``digits`` train split, which never overlaps the calibration split).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from mixzoo import hookimpl
from mixzoo.core.card import MixCard, provenance
from mixzoo.core.errors import InputError
from mixzoo.methods import ExtraAttack, FitRequest, FitResult, MixingMethod, OptionSpec
from mixzoo.methods.base import square_extra
from mixzoo.zoo.pairs import prepare_pair

__version__ = "0.1.0"
KIND = "example-digits"
SOURCE_KINDS = [KIND]  # what `mixzoo plugins` lists under "loads source kinds"
MODEL_NAME = "example-digits-linear"
CLAMP_NAME = "tanh-clamp"
METHOD_NAME = "example-confidence-switch"
MEAN, STD = 0.3, 0.4  # normalization the network is trained with; the spec says so and the wrapper applies it


def linear_digits_classifier(seed: int = 0, adv_eps: float = 0.1, steps: int = 150, lr: float = 0.5) -> nn.Module:
    """A linear classifier on 8x8 digits (64 -> 10), trained with full-batch SGD, FGSM examples when
    ``adv_eps > 0``. Returns a network taking NORMALIZED input ((x - MEAN) / STD)."""
    from mixzoo.zoo.data import load_dataset

    data = load_dataset("digits", "train")
    images, labels = data.images, data.labels
    gen = torch.Generator().manual_seed(seed)
    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    with torch.no_grad():
        net[1].weight.copy_(0.01 * torch.randn(10, 64, generator=gen))
        net[1].bias.zero_()
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    for _ in range(steps):
        inputs = images
        if adv_eps > 0:
            x = images.clone().requires_grad_(True)
            (grad,) = torch.autograd.grad(F.cross_entropy(net((x - MEAN) / STD), labels), x)
            inputs = (images + adv_eps * grad.sign()).clamp(0.0, 1.0)
        opt.zero_grad()
        F.cross_entropy(net((inputs - MEAN) / STD), labels).backward()
        opt.step()
    return net.eval()


def tanh_clamp(x: torch.Tensor) -> torch.Tensor:
    """A smooth clamp x * (1 + tanh(x)) / 2: about 0 for x << 0, about x for x >> 0, differentiable."""
    return 0.5 * x * (1.0 + torch.tanh(x))


@hookimpl
def mixzoo_model_specs() -> list[dict[str, Any]]:
    return [{
        "name": MODEL_NAME,
        "role": "robust",
        "dataset": "digits",
        "num_classes": 10,
        "input_size": [1, 8, 8],
        "mean": [MEAN],
        "std": [STD],
        "threat_model": "Linf",
        "epsilon": 0.1,
        "source": {"kind": KIND, "seed": 0, "adv_eps": 0.1, "steps": 150},
        "description": "linear digits classifier, FGSM-trained at load time (mixzoo-plugin-example)",
        "license": "MIT",
    }]


def load(spec: Any, device: str, allow_unsafe: bool) -> nn.Module:
    """The network of an ``example-digits`` spec, trained as its source says."""
    src = spec.source
    return linear_digits_classifier(seed=int(src.get("seed", 0)), adv_eps=float(src.get("adv_eps", 0.1)),
                                    steps=int(src.get("steps", 150)))


@hookimpl
def mixzoo_model_sources() -> dict[str, Any]:
    return {KIND: load}


@hookimpl
def mixzoo_clamp_functions() -> dict[str, Any]:
    return {CLAMP_NAME: tanh_clamp}


class SwitchedClassifier(nn.Module):
    """log softmax(h(x)) where max softmax(h(x)) >= tau, else log softmax(g(x)): a hard switch between two models.

    ``gradient`` names the variant attacks differentiate; every variant has the switch's values. ``"exact"``: the
    selected branch's gradient per input (the switch itself has none); ``"rbc"`` / ``"abc"``: that model's gradient
    everywhere, a bypass of the switch that an adversary who knows the rule would try.
    """

    def __init__(self, abc: nn.Module, rbc: nn.Module, tau: float, gradient: str = "exact"):
        super().__init__()
        self.abc, self.rbc, self.tau, self.gradient = abc, rbc, float(tau), gradient

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g = torch.log_softmax(self.abc(x), dim=-1)
        h = torch.log_softmax(self.rbc(x), dim=-1)
        use_rbc = (h.exp().amax(dim=-1, keepdim=True) >= self.tau).detach()
        out = torch.where(use_rbc, h, g)
        if self.gradient == "exact":
            return out
        branch = h if self.gradient == "rbc" else g
        return branch + (out - branch).detach()  # the switch's values, one model's gradient


class ConfidenceSwitch(MixingMethod):
    """Trust the RBC where it is confident (max probability >= tau), the ABC elsewhere. Not from the papers: a
    method a third party could publish, with its card section, gradient variants and adaptive attacks."""

    name = METHOD_NAME
    title = "Confidence switch"
    paper = "example plugin (not from the papers)"
    fit_cost = "free: tau is given"
    options = {"tau": OptionSpec("the RBC's confidence at and above which its prediction is used", float, 0.9,
                                 low=0, high=1)}

    def validate(self, params: dict[str, Any], source: str) -> dict[str, Any]:
        tau = params.get("tau")
        if isinstance(tau, bool) or not isinstance(tau, int | float) or not 0 < tau <= 1:
            raise InputError(f"{source}: field '{self.name}.tau' must be a number in (0, 1], got {tau!r}")
        params["tau"] = float(tau)
        return params

    def build(self, abc: nn.Module | None, rbc: nn.Module | None, card: MixCard, *,
              gradient: str = "exact") -> nn.Module:
        if gradient not in self.gradients(card):
            raise InputError(f"{self.name} has no gradient {gradient!r}; choose from {', '.join(self.gradients(card))}")
        return SwitchedClassifier(abc, rbc, card.params["tau"], gradient=gradient)

    def extra_attacks(self, card: MixCard) -> list[ExtraAttack]:
        return [ExtraAttack("apgd-rbc-gradient", "apgd", gradient="rbc", why="the switch bypassed: the RBC's gradient"),
                ExtraAttack("apgd-abc-gradient", "apgd", gradient="abc", why="the switch bypassed: the ABC's gradient"),
                square_extra(1000, why="gradient-free: the switch has no gradient")]

    def fit(self, request: FitRequest) -> FitResult:
        pair = prepare_pair(request)  # loads and checks the pair and its calibration split
        card = MixCard(self.name, {"tau": request.options["tau"]}, abc=pair.info("abc"), rbc=pair.info("rbc"),
                       dataset=pair.dataset, data=pair.data_info(), attack={"eps": pair.eps, "norm": pair.norm},
                       provenance=provenance(command=request.provenance_command))
        with torch.no_grad():
            model = self.build(pair.abc, pair.rbc, card)
            accuracy = float((model(pair.data.images).argmax(1) == pair.data.labels).float().mean())
        path = card.save(request.out) if request.out is not None else None
        return FitResult(card, path, {"calibration_clean_accuracy": accuracy})


@hookimpl
def mixzoo_mixing_methods() -> dict[str, Any]:
    return {METHOD_NAME: ConfidenceSwitch()}
