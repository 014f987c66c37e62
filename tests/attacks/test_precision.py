"""``precision="bf16"``: the attacks run under bfloat16 autocast, every break is confirmed on the float32 output
outside autocast, and both counts reach the component stats, the cached outcome and the bench report."""

from __future__ import annotations

import warnings

import pytest
import torch
from eval_requests import ask
from torch import nn

from mixzoo.attacks import precision as precision_mod
from mixzoo.attacks.base import Attack, Component
from mixzoo.attacks.precision import attack_arithmetic, check_precision_device, exact_arithmetic
from mixzoo.attacks.runner import evaluate
from mixzoo.attacks.suites import APGDEnsemble
from mixzoo.core.cache import Cache
from mixzoo.core.errors import InputError
from mixzoo.core.settings import RunSettings
from mixzoo.evaluation.report import bf16_counts, component_cell, precision_text
from mixzoo.evaluation.worst_case import worst_case

# bfloat16 keeps 8 significant bits: both weights round to 1 + 2^-7 there, while float32 tells them apart
W_WRONG, W_TRUE = 1.0078125, 1.0078125 + 2.0 ** -12


def tie_model() -> nn.Module:
    """Two classes, logits ``(W_WRONG, W_TRUE) * sum(x)``: class 1 in float32 for any non-black image; under bf16
    autocast the logits tie and argmax names class 0, so every image looks broken in bf16 and none is."""
    lin = nn.Linear(16, 2, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[W_WRONG] * 16, [W_TRUE] * 16]))
    return nn.Sequential(nn.Flatten(), lin).eval().requires_grad_(False)


def hidden_break_model() -> nn.Module:
    """Like :func:`tie_model` (bfloat16 sees a tie, so argmax names class 0 everywhere), but in float32 pixel 0
    favours class 0 by 0.003 per unit: grey images are class 1, and raising pixel 0 while lowering the others by
    0.1 (Linf) makes them class 0, a real break that only a float32 attack can see."""
    w0 = torch.full((16,), W_WRONG)
    w0[0] = W_TRUE + 0.003
    lin = nn.Linear(16, 2, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.stack([w0, torch.full((16,), W_TRUE)]))
    return nn.Sequential(nn.Flatten(), lin).eval().requires_grad_(False)


def threshold_model() -> nn.Module:
    """Class 0 while mean(x) > 0.45, else class 1: grey 0.5 images are broken by any eps >= 0.05, in any precision."""
    lin = nn.Linear(16, 2)
    with torch.no_grad():
        lin.weight.copy_(torch.stack([torch.full((16,), 1 / 16), torch.zeros(16)]))
        lin.bias.copy_(torch.tensor([0.0, 0.45]))
    return nn.Sequential(nn.Flatten(), lin).eval().requires_grad_(False)


def grey(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.full((n, 1, 4, 4), 0.5), torch.zeros(n, dtype=torch.long)


def test_the_tie_model_really_differs_between_the_two_precisions():
    x, _ = grey(3)
    model = tie_model()
    with torch.no_grad():
        assert (model(x).argmax(1) == 1).all()
        with attack_arithmetic("bf16", "cpu"):
            assert (model(x).argmax(1) == 0).all()
            with exact_arithmetic():  # the judgement's context, even inside an attack's autocast
                assert (model(x).argmax(1) == 1).all()


def test_a_break_found_only_in_bf16_is_dropped_and_both_counts_say_so():
    x, _ = grey(6)
    y = torch.ones(6, dtype=torch.long)
    attack = APGDEnsemble(eps=0.1, norm="Linf", seed=0, n_iter=5, components=["apgd-ce"], n_target_classes=0)
    res = attack.run(tie_model(), x, y, progress=False, index=torch.arange(6), precision="bf16")
    assert res.precision == "bf16"
    assert res.clean_correct.all() and res.robust_correct.all()  # nothing is really broken
    (stat,) = res.components
    # the component ran again in float32 on the six: nothing to find there either
    assert (stat.found_bf16, stat.confirmed_float32, stat.rerun_float32, stat.newly_broken) == (6, 0, 0, 0)
    assert torch.equal(res.adv_images, x)  # the dropped candidates are not kept as adversarial points


def test_a_dropped_example_is_attacked_again_in_float32_and_its_real_break_counted():
    x, _ = grey(6)
    y = torch.ones(6, dtype=torch.long)
    model = hidden_break_model()
    with torch.no_grad():
        assert (model(x).argmax(1) == 1).all()
        with attack_arithmetic("bf16", "cpu"):
            assert (model(x).argmax(1) == 0).all()
    attack = APGDEnsemble(eps=0.1, norm="Linf", seed=0, n_iter=20, components=["apgd-ce"], n_target_classes=0)
    res = attack.run(model, x, y, progress=False, index=torch.arange(6), precision="bf16")
    (stat,) = res.components
    assert stat.found_bf16 == 6 and stat.rerun_float32 >= 1
    assert stat.newly_broken == stat.confirmed_float32 + stat.rerun_float32 == 6
    assert not res.robust_correct.any()
    with torch.no_grad():  # every kept point is a float32 break inside the ball
        assert (model(res.adv_images).argmax(1) == 0).all()
    assert (res.adv_images - x).abs().max() <= 0.1 + 1e-6


def test_breaks_float32_confirms_are_counted_in_both_and_kept():
    x, y = grey(5)
    attack = APGDEnsemble(eps=0.1, norm="Linf", seed=0, n_iter=10, components=["apgd-ce"], n_target_classes=0)
    res = attack.run(threshold_model(), x, y, progress=False, index=torch.arange(5), precision="bf16")
    (stat,) = res.components
    assert (stat.found_bf16, stat.confirmed_float32, stat.rerun_float32, stat.newly_broken) == (5, 5, 0, 5)
    assert not res.robust_correct.any()
    with torch.no_grad():
        assert (threshold_model()(res.adv_images).argmax(1) != y).all()


def test_float32_stays_the_default_with_no_bf16_counts():
    x, _ = grey(4)
    y = torch.ones(4, dtype=torch.long)
    attack = APGDEnsemble(eps=0.1, norm="Linf", seed=0, n_iter=5, components=["apgd-ce"], n_target_classes=0)
    default = attack.run(tie_model(), x, y, progress=False, index=torch.arange(4))
    explicit = attack.run(tie_model(), x, y, progress=False, index=torch.arange(4), precision="float32")
    assert default.precision == explicit.precision == "float32" == RunSettings().precision
    assert [c.found_bf16 for c in default.components] == [None]
    assert torch.equal(default.robust_correct, explicit.robust_correct) and default.robust_correct.all()


class Recorder(Attack):
    """One component that records whether it ran under autocast and returns the clean images (no break)."""

    name = "recorder"
    seen: list[bool] = []

    def components(self, model: nn.Module, n_classes: int) -> list[Component]:
        def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            Recorder.seen.append(torch.is_autocast_enabled("cpu"))
            return x

        return [Component("record", fn)]


class GradientFree(Recorder):
    name = "gradient-free"

    def components(self, model: nn.Module, n_classes: int) -> list[Component]:
        (comp,) = super().components(model, n_classes)
        comp.gradient_based = False
        return [comp]


def test_components_run_under_autocast_only_in_bf16_and_gradient_free_ones_never():
    x, y = grey(2)
    Recorder.seen = []
    for precision in ("float32", "bf16"):
        Recorder(eps=0.1).run(threshold_model(), x, y, progress=False, precision=precision)
    assert Recorder.seen == [False, True]
    Recorder.seen = []
    res = GradientFree(eps=0.1).run(threshold_model(), x, y, progress=False, precision="bf16")
    assert Recorder.seen == [False] and res.components[0].found_bf16 is None


def cached_files(cache_dir) -> set[str]:
    return {p.name for p in (cache_dir / "bench").glob("*.json")}


def test_the_cache_key_includes_the_precision(tmp_path):
    x, _ = grey(4)
    y = torch.ones(4, dtype=torch.long)
    cache = Cache(tmp_path, enabled=True)
    common = dict(attack="apgd", eps=0.1, norm="Linf", seed=0, batch_size=4, cache=cache, key_parts={"m": "tie"},
                  label="tie", attack_options={"n_iter": 3, "components": ["apgd-ce"], "n_target_classes": 0},
                  progress=False)
    f32 = evaluate(tie_model(), x, y, ask(**common))
    after_f32 = cached_files(tmp_path)
    b16 = evaluate(tie_model(), x, y, ask(precision="bf16", **common))
    assert len(after_f32) == 1 and len(cached_files(tmp_path)) == 2  # a second outcome, not the float32 one
    assert not b16.get("cached") and b16["precision"] == "bf16" and f32["precision"] == "float32"
    (comp,) = b16["components"]
    assert (comp["found_bf16"], comp["confirmed_float32"], comp["rerun_float32"], comp["newly_broken"]) == (4, 0, 0, 0)
    assert "found_bf16" not in f32["components"][0]
    again = evaluate(tie_model(), x, y, ask(precision="float32", **common))  # float32 spelled out: the same outcome
    assert again.get("cached") and len(cached_files(tmp_path)) == 2


def test_an_extra_attacks_bf16_counts_join_the_worst_case():
    ev = {"clean_correct": [True, True, True], "robust_correct": [True, False, True], "seconds": 1.0,
          "components": [{"name": "apgd-ce", "newly_broken": 1, "seconds": 1.0, "found_bf16": 2,
                          "confirmed_float32": 1, "rerun_float32": 0}], "warnings": []}
    extra = {"robust_correct": [False, True], "seconds": 2.0, "warnings": [],
             "components": [{"name": "apgd-ce", "newly_broken": 1, "seconds": 2.0, "found_bf16": 2,
                             "confirmed_float32": 0, "rerun_float32": 1}]}
    merged = worst_case(ev, extra, torch.tensor([0, 2]), "gate")
    assert merged["components"][-1] == {"name": "gate", "newly_broken": 1, "seconds": 2.0, "found_bf16": 2,
                                        "confirmed_float32": 0, "rerun_float32": 1}
    assert bf16_counts(merged["components"]) == (4, 1, 1)
    assert component_cell(merged["components"][-1]) == ("gate: 1 (found in bf16 2, confirmed in float32 0, "
                                                          "float32 re-run 1)")


def test_reports_label_the_precision():
    assert precision_text("float32") == "" and "bf16" in precision_text("bf16")
    assert bf16_counts([{"name": "apgd-ce", "newly_broken": 3, "seconds": 1.0}]) is None


@pytest.mark.parametrize("bad", ["fp16", "bfloat16", "", None])
def test_an_unknown_precision_is_a_one_line_error(bad):
    with pytest.raises(InputError, match=r"^unknown precision .*; choose float32, tf32, bf16, auto \(--precision\)$"):
        RunSettings(precision=bad)
    with pytest.raises(InputError, match="choose float32, tf32, bf16, auto"):
        RunSettings().changed(precision=bad)
    with pytest.raises(InputError, match="choose float32, tf32, bf16, auto"):
        APGDEnsemble(eps=0.1, n_target_classes=0).run(threshold_model(), *grey(1), progress=False, precision=bad)


def test_an_attack_without_a_precision_argument_is_refused_in_bf16(tmp_path, monkeypatch):
    class Old:
        code_version = None

        def __init__(self, eps, norm, seed, **options):
            pass

        def run(self, model, images, labels, progress=True):  # pragma: no cover - never reached
            raise AssertionError

    monkeypatch.setattr("mixzoo.core.plugins.lookup", lambda kind, name: Old)
    with pytest.raises(InputError, match="cannot run in bf16.*use --precision float32"):
        evaluate(threshold_model(), *grey(2), ask(attack="old", eps=0.1, norm="Linf", seed=0, batch_size=2,
                 cache=Cache(tmp_path, enabled=False), key_parts={}, label="old", progress=False, precision="bf16"))


def test_a_gpu_without_bfloat16_is_refused_and_a_cpu_without_it_warned(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    with pytest.raises(InputError, match="no bfloat16 arithmetic; use --precision float32"):
        check_precision_device("bf16", "cuda")
    monkeypatch.setattr(precision_mod, "native_bf16_cpu", lambda: False)
    with pytest.warns(UserWarning, match="emulated"):
        check_precision_device("bf16", "cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check_precision_device("float32", "cpu") == "float32"
