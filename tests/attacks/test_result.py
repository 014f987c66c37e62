"""What an evaluation returns: a stand-alone component's own breaks are its per-example outcomes (``own_correct``,
``own_outcomes``), counted, never a count on its own; cached batches merge them in order, and a cached component
whose own outcomes do not fit its entry is a miss."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
import torch
from torch import nn

from mixzoo.attacks.base import Attack, Component
from mixzoo.attacks.outcome_cache import outcome_problem
from mixzoo.attacks.result import merge_own, outcome_text, own_problem
from mixzoo.attacks.runner import evaluate
from mixzoo.core.cache import Cache
from mixzoo.core.plugins import hookimpl, register_plugin, unregister_plugin
from mixzoo.core.record import RunRecord
from mixzoo.core.request import EvalRequest

N = 24


class StepThenAlone(Attack):
    """A signed-gradient step on the examples still robust, then the same step of twice the size on every
    clean-correct example afresh (a stand-alone component, as AutoAttack's standard evaluation is in
    ``adaptive-strong``)."""

    name: ClassVar[str] = "test-step-then-alone"

    def components(self, model: nn.Module, n_classes: int) -> list[Component]:
        def step(size: float) -> Any:
            def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
                x = x.clone().requires_grad_(True)
                (grad,) = torch.autograd.grad(nn.functional.cross_entropy(model(x), y), x)
                return (x + size * self.eps * grad.sign()).clamp(0, 1).detach()
            return fn

        return [Component("half", step(0.5)), Component("alone", step(1.0), scope="clean")]


class _Plugin:
    @hookimpl
    def mixzoo_attacks(self) -> dict[str, Any]:
        return {StepThenAlone.name: StepThenAlone}


@pytest.fixture(scope="module")
def case():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 4)).eval()
    images = torch.rand(N, 1, 4, 4)
    labels = model(images).argmax(1)
    labels[:3] = (labels[:3] + 1) % 4  # three examples not clean-correct
    return model, images, labels


def test_a_stand_alone_components_own_breaks_are_its_own_outcomes_counted(case):
    model, images, labels = case
    res = StepThenAlone(0.15, batch_size=7).run(model, images, labels, progress=False)
    half, alone = res.components
    assert half.own_broken is None and half.own_correct is None  # a component on the still-robust examples only
    own = alone.own_correct
    assert own.dtype == torch.bool and own.shape == (N,)
    assert alone.own_broken == int(res.clean_correct.sum()) - int(own.sum())
    assert not (own & ~res.clean_correct).any() and not (res.robust_correct & ~own).any()  # between robust and clean
    assert alone.own_broken > alone.newly_broken  # it broke again what the first component had broken
    assert 0 < int(res.robust_correct.sum())  # the case has every kind of outcome


def test_evaluate_keeps_the_own_outcomes_of_every_batch_in_order(case, tmp_path):
    """The outcome's component keeps ``own_outcomes`` (merged over batches in order, the same for any batch size,
    read back from the cache unchanged) and ``own_broken`` counted from them."""
    model, images, labels = case
    name = register_plugin(_Plugin(), name="test-result-plugin")
    try:
        got = []
        for batch_size, cache in ((5, Cache(tmp_path, enabled=True)), (N, Cache(tmp_path, enabled=False)),
                                  (5, Cache(tmp_path, enabled=True))):
            record = RunRecord(attack=StepThenAlone.name, eps=0.15, norm="Linf", batch_size=batch_size)
            got.append(evaluate(model, images, labels, EvalRequest(record, cache, key_parts={"test": "own"},
                                                                   progress=False)))
    finally:
        unregister_plugin(name)
    assert got[2].cached and not got[0].cached
    alone = [next(c for c in ev.components if c["name"] == "alone") for ev in got]
    assert alone[0]["own_outcomes"] == alone[1]["own_outcomes"] == alone[2]["own_outcomes"]
    assert len(alone[0]["own_outcomes"]) == N
    assert alone[0]["own_broken"] == sum(got[0].clean_correct) - alone[0]["own_outcomes"].count("1")
    assert "own_outcomes" not in got[0].components[0]


def test_merge_own_counts_from_the_outcomes_and_keeps_an_older_batchs_count():
    new = [{"clean_correct": [True, True, False], "components": [{"name": "a", "own_outcomes": "100"}]},
           {"clean_correct": [True, False], "components": [{"name": "a", "own_outcomes": "00"}]}]
    assert merge_own(new, "a") == {"own_broken": 2, "own_outcomes": "10000"}
    old = [new[0], {"clean_correct": [True, False], "components": [{"name": "a", "own_broken": 1}]}]
    assert merge_own(old, "a") == {"own_broken": 2}  # a batch of an older mixzoo: the count, no outcomes
    assert merge_own([new[0], {"clean_correct": [True], "components": [{"name": "a"}]}], "a") == {}


OWN_BAD = {
    "too short": ({"own_outcomes": "1"}, "own_outcomes is not 3 outcomes"),
    "correct where not clean": ({"own_outcomes": "111"}, "own_outcomes is not 3 outcomes"),
    "broken where robust": ({"own_outcomes": "010"}, "own_outcomes is not 3 outcomes"),
    "not text": ({"own_outcomes": 5}, "own_outcomes is not 3 outcomes"),
    "a count that is not one": ({"own_broken": -1}, "own_broken is not a count"),
    "a count the outcomes do not give": ({"own_outcomes": "100", "own_broken": 0}, "own_broken is 0, its"
                                         " own_outcomes give 1"),
}


@pytest.mark.parametrize("bad", sorted(OWN_BAD))
def test_a_cached_component_whose_own_outcomes_do_not_fit_is_a_miss(bad):
    clean, robust = [True, True, False], [True, False, False]
    change, message = OWN_BAD[bad]
    assert own_problem({"name": "a", "own_outcomes": "100", "own_broken": 1}, clean, robust) is None
    assert message in own_problem({"name": "a", **change}, clean, robust)
    entry = {"key": "k", "clean_correct": clean, "robust_correct": robust, "warnings": [], "seconds": 0.0,
             "components": [{"name": "a", "newly_broken": 1, "seconds": 0.0, **change}]}
    assert message in outcome_problem(entry, "k", 3)


def test_outcome_text_is_the_rows_encoding():
    assert outcome_text([True, False, True]) == outcome_text(torch.tensor([True, False, True])) == "101"
