"""BlackBoxModel (paper App. D.5): logits only, no gradients, counted and budgeted queries, checked outputs."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from mixzoo.attacks import mmaa
from mixzoo.attacks.apgd import ApgdSettings
from mixzoo.core.errors import MixzooError
from mixzoo.core.registry import ModelSpec
from mixzoo.zoo.blackbox import (
    BlackBoxModel,
    BlackBoxOutputError,
    NoGradientError,
    QueryBudgetExceeded,
    as_black_box,
    is_black_box,
    spec_is_black_box,
)
from mixzoo.zoo.models import BaseClassifier, weight_hash


def _spec(name: str = "tiny", black_box: bool = False, num_classes: int = 10) -> ModelSpec:
    source = {"kind": "test", "black_box": True} if black_box else {"kind": "test"}
    return ModelSpec(name=name, role="robust", dataset="digits", num_classes=num_classes, input_size=(1, 8, 8),
                     source=source)


def _net(seed: int = 0, out: int = 10) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, out)).eval()


class Broken(nn.Module):
    """A real model whose output is post-processed into something invalid."""

    def __init__(self, kind: str):
        super().__init__()
        self.net, self.kind = _net(), kind

    def forward(self, x):
        out = self.net(x)
        if self.kind == "nan":
            out[0, 3] = float("nan")
        elif self.kind == "posinf":
            out[-1, 0] = float("inf")
        elif self.kind == "neginf":
            out[:, 0] = float("-inf")
        elif self.kind == "3d":
            out = out.unsqueeze(-1)
        elif self.kind == "rows":
            out = out[1:]
        elif self.kind == "classes":
            out = out[:, :7]
        elif self.kind == "int":
            out = out.argmax(1, keepdim=True).expand(-1, 10)
        elif self.kind == "none":
            out = None
        return out


def _images(n: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(n, 1, 8, 8, generator=torch.Generator().manual_seed(seed))


def test_outputs_are_the_wrapped_models_logits_and_weights_are_hidden():
    net = _net()
    model = BaseClassifier(net, _spec())
    bb = as_black_box(model)
    x = _images(5)
    assert torch.equal(bb(x), model(x))
    assert list(bb.parameters()) == [] and bb.state_dict() == {}
    assert bb.weight_hash == model.weight_hash == weight_hash(net)
    assert bb.name == "tiny" and bb.spec.dataset == "digits" and bb.num_classes == 10
    assert as_black_box(bb) is bb  # no double wrapping
    assert BlackBoxModel(bb).model is model


@pytest.mark.parametrize("how", ["backward", "autograd.grad"])
def test_backpropagation_is_refused_with_a_clear_error(how):
    bb = as_black_box(BaseClassifier(_net(), _spec("secret-rbc")))
    x = _images(3).requires_grad_(True)
    out = bb(x)
    assert out.requires_grad  # tied to the graph, so the attempt is caught rather than silently ignored
    with pytest.raises(NoGradientError) as err:
        if how == "backward":
            out.sum().backward()
        else:
            torch.autograd.grad(out.logsumexp(1).sum(), x)
    msg = str(err.value)
    assert "'secret-rbc'" in msg and "no gradients" in msg and "transfer|square|guess" in msg and "\n" not in msg
    assert isinstance(err.value, MixzooError)


def test_gradient_attack_through_black_box_fails_loudly():
    bb = as_black_box(_net())
    with pytest.raises(NoGradientError):
        mmaa(bb, _images(4), torch.tensor([0, 1, 2, 3]), ApgdSettings(eps=0.1, n_iter=2, n_target_classes=0),
             progress=False)


def test_queries_are_counted_and_reset():
    bb = as_black_box(_net())
    bb(_images(7))
    with torch.no_grad():
        bb(_images(5))
    assert (bb.queries, bb.calls) == (12, 2)
    bb.reset_queries()
    assert (bb.queries, bb.calls) == (0, 0)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 9), min_size=1, max_size=6), st.integers(0, 40))
def test_budget_is_enforced_exactly(batches, budget):
    bb = BlackBoxModel(_net(), query_budget=budget)
    used = 0
    for b in batches:
        if used + b > budget:
            with pytest.raises(QueryBudgetExceeded) as err:
                bb(_images(b))
            assert str(budget) in str(err.value) and "\n" not in str(err.value)
            assert bb.queries == used  # a refused call costs nothing
            break
        bb(_images(b))
        used += b
        assert bb.queries == used and bb.remaining == budget - used


def test_check_budget_names_what_is_needed():
    bb = BlackBoxModel(_net(), query_budget=100)
    bb(_images(10))
    bb.check_budget(90)
    with pytest.raises(QueryBudgetExceeded, match=r"needs up to 91 queries but only 90 .* budget of 100"):
        bb.check_budget(91, "this attack")


@pytest.mark.parametrize("kind", ["nan", "posinf", "3d", "rows", "classes", "int", "none"])
def test_invalid_outputs_are_rejected(kind):
    model = Broken(kind)
    bb = BlackBoxModel(model, num_classes=10)
    with pytest.raises(BlackBoxOutputError) as err:
        bb(_images(4))
    assert "\n" not in str(err.value) and "black-box model 'Broken'" in str(err.value)


def test_class_count_comes_from_the_spec():
    bb = as_black_box(BaseClassifier(_net(out=7), _spec(num_classes=10)))
    with pytest.raises(BlackBoxOutputError, match=r"shape \(3, 7\) for 3 images, expected \[3, 10\]"):
        bb(_images(3))


def test_minus_infinity_is_allowed():
    out = BlackBoxModel(Broken("neginf"))(_images(3))
    assert torch.isneginf(out[:, 0]).all()


def test_black_box_flags():
    spec = _spec(black_box=True)
    assert spec_is_black_box(spec) and not spec_is_black_box(_spec())
    assert is_black_box(BaseClassifier(_net(), spec))
    assert not is_black_box(BaseClassifier(_net(), _spec()))
    assert is_black_box(as_black_box(_net()))


def test_bad_arguments():
    with pytest.raises(MixzooError, match="callable"):
        BlackBoxModel(3)
    with pytest.raises(MixzooError, match="query_budget"):
        BlackBoxModel(_net(), query_budget=-1)


# ------------------------------------------------------------------------------------------------ black box
def _small_net(out: int = 10) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, out)).eval()


def _random_images(n: int) -> torch.Tensor:
    return torch.rand(n, 1, 8, 8, generator=torch.Generator().manual_seed(n))


def test_as_black_box_with_a_budget_enforces_it_on_an_already_wrapped_model():
    bb = as_black_box(_small_net())
    bb(_random_images(3))
    capped = as_black_box(bb, query_budget=5)
    assert capped.query_budget == 5 and capped.remaining == 5
    capped(_random_images(5))
    with pytest.raises(QueryBudgetExceeded):
        capped(_random_images(1))


def test_single_column_outputs_are_not_logits():
    """A classifier needs at least two classes; a [N, 1] output (a score, a regression) is refused even when the
    number of classes is not known."""
    bb = BlackBoxModel(_small_net(out=1))
    assert bb.num_classes is None
    with pytest.raises(BlackBoxOutputError, match=r"shape \(4, 1\)"):
        bb(_random_images(4))


class _LogitsAndFeatures(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = _small_net()

    def forward(self, x):
        logits = self.net(x)
        return logits, torch.zeros(len(x), 3, 2)  # the logits come first, like (logits, features) models


def test_tuple_outputs_use_their_first_element():
    model = _LogitsAndFeatures()
    x = _random_images(4)
    assert torch.equal(BlackBoxModel(model)(x), model.net(x))


class _NaNRow(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = _small_net()

    def forward(self, x):
        out = self.net(x)
        out[1, :3] = float("nan")  # three bad logits, all of one image
        return out


def test_nan_message_counts_images_and_the_failed_call_is_still_counted():
    bb = BlackBoxModel(_NaNRow(), query_budget=10)
    with pytest.raises(BlackBoxOutputError, match="for 1 of 4 images"):
        bb(_random_images(4))
    assert (bb.queries, bb.calls, bb.remaining) == (4, 1, 6)  # the model was asked: the queries are spent


def test_remaining_is_never_negative():
    bb = BlackBoxModel(_small_net(), query_budget=100)
    bb(_random_images(10))
    bb.query_budget = 4  # lowered below what was already used
    assert bb.remaining == 0
