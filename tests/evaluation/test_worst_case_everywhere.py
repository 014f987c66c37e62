"""Every evaluation of a card reports its worst case over the shared attack and its method's extra attacks.

A small method registered at run time, ``test-masked-rbc``, has the RBC's values with an all-zero gradient (a
gradient-masked classifier); its declared extra attack runs APGD on the ``rbc`` gradient variant (the same values,
the RBC's gradient) and breaks what the shared gradient attack cannot move towards. The bench's card row, the matched
linear baseline's target, sanity's sweep and verify must all see those breaks.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from mixzoo.core.card import MixCard
from mixzoo.core.plugins import hookimpl, register_plugin, unregister_plugin
from mixzoo.evaluation.bench import MatchSettings, bench
from mixzoo.evaluation.sanity import eps_sweep
from mixzoo.evaluation.verify import verify_report
from mixzoo.methods import ExtraAttack, FitRequest, FitResult, MixingMethod

N = 40
EPS = 0.1
ATTACK = {"n_iter": 5, "n_target_classes": 1}
COMMON = dict(attack="apgd", attack_options=ATTACK, n=N, batch_size=N, progress=False)
MATCH = dict(baseline=MatchSettings(attack="apgd", options=ATTACK, n=N))


class MaskedRBC(nn.Module):
    """log softmax(h(x)); ``gradient="exact"``: that value with an all-zero input gradient, ``"rbc"``: h's."""

    def __init__(self, rbc: nn.Module, gradient: str):
        super().__init__()
        self.rbc, self.gradient = rbc, gradient

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.log_softmax(self.rbc(x), dim=-1)
        if self.gradient == "rbc":
            return h
        return h.detach() + 0.0 * x.flatten(1).sum(dim=1, keepdim=True)


class MaskedMethod(MixingMethod):
    name = "test-masked-rbc"
    title = "Masked RBC"

    def validate(self, params: dict[str, Any], source: str) -> dict[str, Any]:
        return params

    def build(self, abc: nn.Module | None, rbc: nn.Module | None, card: MixCard, *,
              gradient: str = "exact") -> nn.Module:
        return MaskedRBC(rbc, gradient)

    def extra_attacks(self, card: MixCard) -> list[ExtraAttack]:
        return [ExtraAttack("apgd-rbc", "apgd", dict(ATTACK), gradient="rbc", why="the mask bypassed")]

    def fit(self, request: FitRequest) -> FitResult:
        raise NotImplementedError


class _Plugin:
    @hookimpl
    def mixzoo_mixing_methods(self) -> dict[str, Any]:
        return {MaskedMethod.name: MaskedMethod()}


@pytest.fixture(scope="module")
def masked_card(tmp_path_factory):
    name = register_plugin(_Plugin(), name="test-worst-case-plugin")
    root = tmp_path_factory.mktemp("worst")
    card = MixCard(MaskedMethod.name, {}, abc={"name": "digits-std"}, rbc={"name": "digits-pgd"}, dataset="digits",
                   attack={"eps": EPS, "norm": "Linf"})
    try:
        yield card.save(root / "card.toml"), root / "cache", root
    finally:
        unregister_plugin(name)


@pytest.fixture(scope="module")
def report(masked_card):
    path, cache, root = masked_card
    return bench(path, curve=None, plots=False, cache_dir=cache, out=root / "bench", save_adversarial=True,
                 **COMMON, **MATCH)


def test_the_extra_attack_breaks_what_the_shared_attack_misses(report):
    row = report.row(MaskedMethod.name)
    extra = next(c for c in row.components if c["name"] == "apgd-rbc")
    assert extra["newly_broken"] >= 3
    shared_only = row.robust_accuracy + extra["newly_broken"] / N
    assert row.robust_accuracy < shared_only


def test_the_matched_baseline_is_matched_to_the_worst_case(report):
    """With the matching attack equal to the row's attack on the same images, the target is the row's robust
    accuracy: its worst case, not the shared attack's figure."""
    target = report.settings["linear_alpha_match"]["target_robust_accuracy"]
    assert target == pytest.approx(report.row(MaskedMethod.name).robust_accuracy)


def test_sanity_sweeps_the_worst_case(masked_card, report):
    path, cache, _ = masked_card
    sweep = eps_sweep(path, radii=[EPS], cache_dir=cache, plots=False, **COMMON, **MATCH)
    mixed = next(m for m in sweep.models if m.kind == MaskedMethod.name)
    assert mixed.robust_accuracy[0] == pytest.approx(report.row(MaskedMethod.name).robust_accuracy)
    linear = next(m for m in sweep.models if m.kind == "linear")
    assert linear.alpha == report.row("linear").alpha


def test_verify_confirms_the_extra_attacks_breaks(masked_card, report):
    _, _, root = masked_card
    result = verify_report(root / "bench")
    row = next(r for r in result.rows if r.kind == MaskedMethod.name)
    assert result.passed
    assert row.confirmed == row.broken_reported == row.points_saved
    assert row.verified_robust_accuracy == pytest.approx(report.row(MaskedMethod.name).robust_accuracy)
