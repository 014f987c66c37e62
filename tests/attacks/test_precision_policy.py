"""The named precision policies (float32, tf32, bf16, auto): TF32 flags set for the attack's passes and restored,
strict float32 for every judgement, channels-last for conv nets with the same outcomes, ``auto`` resolved per
device and recorded."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from mixzoo.attacks.precision import (
    as_channels_last,
    attack_arithmetic,
    channels_last,
    exact_arithmetic,
    resolve_precision,
    tf32_flags,
    uses_channels_last,
)
from mixzoo.attacks.suites import APGDEnsemble
from mixzoo.core.settings import PRECISIONS, RunSettings


def flags() -> tuple[bool, bool]:
    return torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32


@pytest.fixture(autouse=True)
def _restore_flags():
    before = flags()
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


class Probe(nn.Module):
    """A small conv net (10 classes) that records, per forward pass, whether autograd was on, the TF32 flags and
    whether its input and its conv weight were in channels-last format."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.head = nn.Linear(6 * 8 * 8, 10)
        self.calls: list[tuple[bool, tuple[bool, bool], bool, bool]] = []
        self.requires_grad_(False).eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cl = torch.channels_last
        self.calls.append((torch.is_grad_enabled(), flags(), x.is_contiguous(memory_format=cl) ,
                           self.conv.weight.is_contiguous(memory_format=cl)))
        return self.head(torch.relu(self.conv(x)).flatten(1))


def data(n: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.rand(n, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        y = Probe()(x).argmax(1)
    return x, y


def test_the_policies_are_named_settings():
    assert PRECISIONS == ("float32", "tf32", "bf16", "auto")
    for name in PRECISIONS:
        assert RunSettings(precision=name).precision == name


def test_tf32_flags_are_set_for_the_block_and_restored_even_when_it_raises():
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = False, True
    with tf32_flags(True):
        assert flags() == (True, True)
    assert flags() == (False, True)
    with pytest.raises(RuntimeError), tf32_flags(False):
        assert flags() == (False, False)
        raise RuntimeError
    assert flags() == (False, True)


def test_tf32_attack_passes_allow_tf32_and_the_judgement_is_strict_float32():
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = False, True  # torch's defaults
    with attack_arithmetic("tf32", "cpu"):
        assert flags() == (True, True)
        with exact_arithmetic():
            assert flags() == (False, False)  # cuDNN's default TF32 is off for the judgement too
        assert flags() == (True, True)
    with attack_arithmetic("float32", "cpu"):
        assert flags() == (False, False)  # float32 is strict float32, not torch's TF32 cuDNN default
    assert flags() == (False, True)


def test_auto_resolves_per_device(monkeypatch):
    assert resolve_precision("auto", "cpu") == "float32"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert resolve_precision("auto", "cuda") == "bf16"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert resolve_precision("auto", "cuda") == "tf32"
    assert resolve_precision("tf32", "cpu") == "tf32" and resolve_precision("bf16", "cuda") == "bf16"


def test_channels_last_only_for_conv_nets_and_the_layout_is_restored():
    model = Probe()
    mlp = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    assert uses_channels_last(model, "tf32", "cpu") and not uses_channels_last(mlp, "tf32", "cpu")
    assert not uses_channels_last(model, "float32", "cuda") and not uses_channels_last(model, "bf16", "cpu")
    assert uses_channels_last(model, "bf16", "cuda")
    w = model.conv.weight.detach().clone()
    with channels_last(model):
        assert model.conv.weight.is_contiguous(memory_format=torch.channels_last)
        assert torch.equal(model.conv.weight, w)
    assert model.conv.weight.is_contiguous() and torch.equal(model.conv.weight, w)
    with pytest.raises(RuntimeError), channels_last(model):
        raise RuntimeError
    assert model.conv.weight.is_contiguous()
    x = torch.rand(3, 3, 8, 8)
    assert as_channels_last(x).is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(as_channels_last(x), x)


def test_tf32_runs_the_conv_net_channels_last_with_the_float32_outcomes_and_confirms_every_break():
    x, y = data()
    attack = APGDEnsemble(eps=0.01, norm="Linf", seed=0, n_iter=5, components=["apgd-ce", "apgd-t"],
                          n_target_classes=3)
    ref = attack.run(Probe(), x, y, progress=False, index=torch.arange(6), precision="float32")
    model = Probe()
    res = attack.run(model, x, y, progress=False, index=torch.arange(6), precision="tf32")
    assert res.precision == "tf32"
    assert torch.equal(res.clean_correct, ref.clean_correct) and torch.equal(res.robust_correct, ref.robust_correct)
    assert 0 < int(ref.robust_correct.sum()) < int(ref.clean_correct.sum())  # the comparison means something
    # every pass saw the channels-last weight; the attack's gradient passes ran with TF32 allowed, every
    # judgement (no-grad passes inside exact_arithmetic) in strict float32
    assert all(c[3] for c in model.calls)
    assert any(c[2] for c in model.calls)
    assert {c[1] for c in model.calls if c[0]} == {(True, True)}
    assert (False, False) in {c[1] for c in model.calls if not c[0]}
    for stat in res.components:  # the policy's own view of each break, and float32's confirmation of it
        assert stat.found_bf16 is not None and stat.confirmed_float32 == stat.found_bf16
    assert sum(s.newly_broken for s in res.components) == sum(s.newly_broken for s in ref.components)
    assert model.conv.weight.is_contiguous()  # the layout is the caller's again


def test_auto_on_the_cpu_is_float32_and_recorded_so():
    x, y = data(3)
    attack = APGDEnsemble(eps=0.1, norm="Linf", seed=0, n_iter=2, components=["apgd-ce"], n_target_classes=0)
    model = Probe()
    res = attack.run(model, x, y, progress=False, index=torch.arange(3), precision="auto")
    assert res.precision == "float32"
    assert not any(c[3] for c in model.calls)
