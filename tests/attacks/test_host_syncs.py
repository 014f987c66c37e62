"""Host synchronisations per step of the Square search and of a FiniteGuard-wrapped model (what a GPU waits on),
counted as the ops that read a device value on the host: ``.item()`` / ``bool()`` (``_local_scalar_dense``),
``nonzero`` and boolean-mask indexing."""

from __future__ import annotations

import collections

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from mixzoo.attacks.adapters import FiniteGuard
from mixzoo.attacks.square import NAN_CHECK_EVERY, SquareSettings, min_margin_square
from mixzoo.core.errors import InputError


class CountSyncs(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.n = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        if name.startswith(("aten._local_scalar_dense", "aten.nonzero", "aten.masked_select")):
            self.n[name] += 1
        elif name.startswith("aten.index") and any(
                isinstance(a, list | tuple) and any(isinstance(t, torch.Tensor) and t.dtype == torch.bool for t in a)
                for a in args):
            self.n[name + "[bool]"] += 1
        return func(*args, **(kwargs or {}))


def _square_syncs(n_queries: int, norm: str) -> int:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(48, 10))
    x, y = torch.rand(16, 3, 4, 4), torch.randint(0, 10, (16,))
    count = CountSyncs()
    with torch.no_grad(), count:
        min_margin_square(model, x, y, SquareSettings(eps=1e-4, norm=norm, n_queries=n_queries, seed=0, loss="logit"),
                          layer_norm=False, progress=False, index=torch.arange(16))
    return sum(count.n.values())


@pytest.mark.parametrize("norm", ["Linf", "L2"])
def test_square_syncs_once_per_query(norm):
    """One sync per proposal (which examples are still attacked) plus one NaN check every NAN_CHECK_EVERY."""
    extra = 2 * NAN_CHECK_EVERY
    per_query = (_square_syncs(1 + extra, norm) - _square_syncs(1, norm)) / extra
    assert per_query <= 1 + 1 / NAN_CHECK_EVERY + 1e-9


class NaNAfter(nn.Module):
    def __init__(self, k: int):
        super().__init__()
        self.k, self.calls = k, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        out = x.flatten(1)[:, :3].clone()
        if self.calls >= self.k:
            out[:2] = float("nan")
        return out


class DeviceGuard(FiniteGuard):
    """The guard's policy for a GPU, on CPU tensors: the check stays on the device between reads."""

    EAGER_ON_CPU = False


def test_finite_guard_checks_every_call_on_the_cpu():
    guard = FiniteGuard(NaNAfter(3), "here")
    with pytest.raises(InputError, match="NaN logits for 2 examples here"):
        for _ in range(10):
            guard(torch.rand(4, 5))
    assert guard.model.calls == 3


def test_finite_guard_checks_on_the_device():
    """Fewer than one sync per call, an error within CHECK_EVERY calls of the first NaN, and at finish()."""
    FiniteGuard = DeviceGuard  # noqa: N806 - the GPU policy under test
    guard = FiniteGuard(NaNAfter(10 ** 6), "here")
    count = CountSyncs()
    with count:
        for _ in range(3 * guard.CHECK_EVERY):
            guard(torch.rand(4, 5))
    assert sum(count.n.values()) == 3
    guard.finish()  # no NaN: nothing raised

    guard = FiniteGuard(NaNAfter(3), "here")
    with pytest.raises(InputError, match="NaN logits for 2 examples here"):
        for _ in range(guard.CHECK_EVERY + 3):
            guard(torch.rand(4, 5))
    assert guard.model.calls == guard.CHECK_EVERY

    guard = FiniteGuard(NaNAfter(2), "here")
    guard(torch.rand(4, 5))
    guard(torch.rand(4, 5))
    with pytest.raises(InputError, match="NaN logits for 2 examples here"):
        guard.finish()
    guard.finish()  # reset after the error


class RightThenNaN(NaNAfter):
    """Class 0 on every input (never broken), NaN rows 0 and 1 from call ``k`` on."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = super().forward(x)
        return torch.where(torch.isnan(out), out, torch.tensor([1.0, 0.0, 0.0]))


def test_square_stops_within_a_check_of_the_first_nan():
    """A NaN at a proposal is still an error, raised at the next check, not after the whole budget."""
    model = RightThenNaN(4)  # clean and initial point fine, NaN from the second proposal on
    with pytest.raises(InputError, match="NaN logits for 2 examples during the Square attack"):
        min_margin_square(model, torch.rand(3, 1, 4, 4), torch.zeros(3, dtype=torch.long),
                          SquareSettings(eps=0.1, n_queries=10 * NAN_CHECK_EVERY, seed=0, loss="logit"),
                          layer_norm=False, progress=False, index=torch.arange(3))
    assert model.calls <= 2 + NAN_CHECK_EVERY
