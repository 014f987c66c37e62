"""NaN is refused where it first appears (issue 31, item 6): `mix` gives no card to an ABC that returns NaN, and NaN
that appears only at perturbed points stops the attack at its first step, not after the whole budget."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from mixzoo.attacks import mmaa
from mixzoo.attacks.apgd import ApgdSettings
from mixzoo.core.errors import InputError
from mixzoo.core.plugins import lookup
from mixzoo.methods.mixednuts.fitting import mix
from mixzoo.zoo.data import load_dataset
from mixzoo.zoo.models import load_model


class NaNABC(nn.Module):
    """A digits-shaped classifier whose every output is NaN."""

    def forward(self, x):
        return torch.full((x.shape[0], 10), float("nan"))


def test_mix_refuses_an_abc_that_returns_nan_and_writes_no_card(tmp_path):
    card = tmp_path / "card.toml"
    with pytest.raises(InputError, match="NaNABC.*NaN logits"):
        mix(NaNABC(), "digits-pgd", dataset="digits", n_calib=120, n_iter=8, n_target_classes=2, out=card,
            cache_dir=tmp_path / "cache", progress=False)
    assert not card.exists()


class NaNOffClean(nn.Module):
    """``model``, except NaN for any input that is not one of the clean images; counts its calls."""

    def __init__(self, model: nn.Module, clean: torch.Tensor):
        super().__init__()
        self.model, self.clean, self.calls = model, clean, 0

    def forward(self, x):
        self.calls += 1
        out = self.model(x)
        is_clean = (x[:, None] == self.clean[None]).flatten(2).all(dim=2).any(dim=1)
        return torch.where(is_clean[:, None], out, torch.full_like(out, float("nan")))


@pytest.fixture(scope="module")
def digits():
    data = load_dataset("digits", "evaluation", n=16)
    return load_model("digits-pgd"), data.images, data.labels


def test_mmaa_stops_at_the_first_nan_step(digits):
    model, x, y = digits
    wrapped = NaNOffClean(model, x)
    with pytest.raises(InputError, match="NaN logits .* during the attack"):
        mmaa(wrapped, x, y, ApgdSettings(eps=0.1, n_iter=100, n_target_classes=2), progress=False)
    assert wrapped.calls <= 5, wrapped.calls  # the budget is 3 runs x 100 iterations


@pytest.mark.parametrize("attack", ["apgd", "autoattack"])
def test_an_evaluation_stops_at_the_first_nan_step(digits, attack):
    model, x, y = digits
    wrapped = NaNOffClean(model, x)
    evaluation = lookup("attack", attack)(eps=0.1, norm="Linf", seed=0, n_iter=100)
    with pytest.raises(InputError, match="NaN logits"):
        evaluation.run(wrapped, x, y, progress=False)
    assert wrapped.calls <= 5, wrapped.calls
