"""A mixing method: the RBC's prediction where it is confident (max probability >= tau), else the ABC's.

A method subclasses :class:`mixzoo.methods.MixingMethod` and defines ``validate`` (checks its card section),
``build`` (the mixed classifier, [0, 1] images -> log-probabilities, in each gradient variant) and ``fit`` (a
card from a :class:`~mixzoo.methods.FitRequest`); ``extra_attacks`` names the adaptive attacks every evaluation of
its cards runs after the shared one. ``mixzoo mix --method NAME --tau 0.8`` fits it; ``mixzoo bench CARD``
evaluates it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from mixzoo.core.card import MixCard, provenance
from mixzoo.core.errors import InputError
from mixzoo.methods import ExtraAttack, FitRequest, FitResult, MixingMethod, OptionSpec
from mixzoo.methods.base import square_extra
from mixzoo.zoo.pairs import prepare_pair


class SwitchedClassifier(nn.Module):
    """log softmax(h(x)) where max softmax(h(x)) >= tau, else log softmax(g(x)).

    ``gradient="exact"``: the selected branch's gradient (the switch itself has none); ``"rbc"`` / ``"abc"``: that
    model's gradient everywhere with the switch's values, the bypass an adversary who knows the rule tries.
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
    """Trust the RBC where it is confident, the ABC elsewhere (a hard switch on the RBC's confidence)."""

    name = "example-switch"
    title = "Confidence switch"
    paper = "mixzoo-plugin-example (not from the papers)"
    fit_cost = "free: tau is given"
    options = {"tau": OptionSpec("the RBC's confidence at and above which its prediction is used", float, 0.9,
                                 low=0, high=1)}

    def validate(self, params: dict[str, Any], source: str) -> dict[str, Any]:
        tau = params.get("tau")
        if isinstance(tau, bool) or not isinstance(tau, int | float) or not 0 < tau <= 1:
            raise InputError(f"{source}: field '{self.name}.tau' must be a number in (0, 1], got {tau!r}")
        return {**params, "tau": float(tau)}

    def build(self, abc: nn.Module | None, rbc: nn.Module | None, card: MixCard, *,
              gradient: str = "exact") -> nn.Module:
        if gradient not in self.gradients(card):
            raise InputError(f"{self.name} has no gradient {gradient!r}; choose {', '.join(self.gradients(card))}")
        return SwitchedClassifier(abc, rbc, card.params["tau"], gradient=gradient)

    def extra_attacks(self, card: MixCard) -> list[ExtraAttack]:
        return [ExtraAttack("apgd-rbc-gradient", "apgd", gradient="rbc", why="the switch bypassed: RBC gradient"),
                ExtraAttack("apgd-abc-gradient", "apgd", gradient="abc", why="the switch bypassed: ABC gradient"),
                square_extra(1000, why="gradient-free: the switch has no gradient")]

    def fit(self, request: FitRequest) -> FitResult:
        pair = prepare_pair(request)  # loads and checks both models and the calibration split
        card = MixCard(self.name, {"tau": request.options["tau"]}, abc=pair.info("abc"), rbc=pair.info("rbc"),
                       dataset=pair.dataset, data=pair.data_info(), attack={"eps": pair.eps, "norm": pair.norm},
                       provenance=provenance(command=request.provenance_command))
        with torch.no_grad():
            model = self.build(pair.abc, pair.rbc, card)
            accuracy = float((model(pair.data.images).argmax(1) == pair.data.labels).float().mean())
        path = card.save(request.out) if request.out is not None else None
        return FitResult(card, path, {"calibration_clean_accuracy": accuracy})
