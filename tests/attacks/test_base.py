"""The Attack base supplies the options its run loop reads, and refuses a named attack without components."""

from __future__ import annotations

from typing import ClassVar

import pytest
import torch
from torch import nn

from mixzoo.attacks.base import BATCH_SIZE, REQUIRED_OPTIONS, Attack, Component
from mixzoo.core.errors import InputError, PluginError
from mixzoo.core.options import OptionSpec


class FGSM(Attack):
    """One signed-gradient step of size ``step * eps``: declares only its own option."""

    name: ClassVar[str] = "test-fgsm"
    options_spec: ClassVar[dict[str, OptionSpec]] = {"step": OptionSpec("step as a share of eps", float, 1.0,
                                                                        low=0, high=1)}

    def components(self, model: nn.Module, n_classes: int) -> list[Component]:
        def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            x = x.clone().requires_grad_(True)
            (grad,) = torch.autograd.grad(nn.functional.cross_entropy(model(x), y), x)
            return (x + self.options["step"] * self.eps * grad.sign()).clamp(0, 1).detach()

        return [Component("fgsm", fn)]


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(12, 3)).eval()


def test_an_attack_declaring_only_its_own_option_gets_the_base_options_and_runs():
    assert FGSM.options_spec["batch_size"] is BATCH_SIZE and list(FGSM.options_spec) == ["step", "batch_size"]
    assert FGSM.defaults == {"step": 1.0, "batch_size": 500}
    images = torch.rand(20, 1, 3, 4)
    model = _model()
    labels = model(images).argmax(dim=1)  # every example clean-correct
    result = FGSM(0.3, step=0.5, batch_size=7).run(model, images, labels, progress=False)
    assert result.n == 20 and int(result.clean_correct.sum()) == 20
    assert [c.name for c in result.components] == ["fgsm"]
    assert int(result.robust_correct.sum()) == 20 - result.components[0].newly_broken
    with pytest.raises(InputError, match="batch_size"):
        FGSM(0.3, batch_size=0)


def test_a_subclass_declaring_batch_size_itself_keeps_its_own():
    own = OptionSpec("examples per pass", int, 64, low=1)

    class Own(FGSM):
        options_spec: ClassVar[dict[str, OptionSpec]] = {"batch_size": own}

    assert Own.options_spec == {"batch_size": own} and Own.defaults == {"batch_size": 64}
    assert set(REQUIRED_OPTIONS) <= set(Attack.options_spec)


def test_a_named_attack_without_components_is_one_line_naming_what_to_add():
    with pytest.raises(PluginError) as err:
        class NoStages(Attack):
            name: ClassVar[str] = "test-no-stages"

    text = str(err.value)
    assert "\n" not in text and "NoStages" in text and "def components(self, model, n_classes)" in text


def test_an_unnamed_intermediate_base_class_needs_no_components():
    class Intermediate(Attack):
        pass

    class Concrete(Intermediate):
        name: ClassVar[str] = "test-concrete"

        def components(self, model: nn.Module, n_classes: int) -> list[Component]:
            return []

    assert Concrete.options_spec["batch_size"] is BATCH_SIZE
