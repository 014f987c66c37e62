"""The evaluations registered through the attack hook: pgd, apgd, autoattack, adaptive (paper Sec. 5, App. B.2)."""

from __future__ import annotations

import copy
import dataclasses
import warnings

import pytest
import torch
from autoattack_reference import NaNOff, run_autoattack_apgd
from digits_models import train_digits_mlp
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from mixzoo.attacks import (
    AdaptiveAutoAttack,
    APGDEnsemble,
    AutoAttackEval,
    EvalResult,
    PGDAttack,
    adapters,
    base,
    suites,
)
from mixzoo.attacks.apgd import ApgdSettings
from mixzoo.attacks.base import Attack, Component, within_threat_model
from mixzoo.attacks.suites import AdaptiveStrong
from mixzoo.core.errors import InputError, UnknownNameError
from mixzoo.core.plugins import lookup

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def digits(one_thread):
    return train_digits_mlp()


def grid(x: torch.Tensor) -> torch.Tensor:
    return torch.round(x * 16) / 16  # digits images live on this grid; its input gradient is zero


class Rounded(nn.Module):
    """A masked-gradient model: the MLP on inputs rounded to the 1/16 grid (same clean predictions)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(grid(x))


class TwoOutput(nn.Module):
    """MixedClassifier-like: the true output (rounded inputs, zero gradient) and an auxiliary differentiable one;
    its ``bypass`` variant routes the true output's gradient through the auxiliary one (App. B.2.2)."""

    def __init__(self, model, aux_sign: float = 1.0):
        super().__init__()
        self.model, self.gradient, self.modes_seen, self.aux_sign = model, "exact", set(), aux_sign

    def gradient_variant(self, name):
        """The same model with gradient ``name`` (mixzoo.attacks.variants.GradientVariants), sharing the record."""
        if name not in ("exact", "bypass"):
            return None
        other = copy.copy(self)
        other._modules = dict(self._modules)
        other.gradient = name
        return other

    def forward_pair(self, x):
        return self.model(grid(x)), self.aux_sign * self.model(x)

    def forward(self, x):
        true, aux = self.forward_pair(x)
        if torch.is_grad_enabled():
            self.modes_seen.add(self.gradient)
        return aux + (true - aux).detach() if self.gradient == "bypass" else true


def check_result(res: EvalResult, x: torch.Tensor, y: torch.Tensor, model: nn.Module, eps: float, norm: str):
    """Invariants of every evaluation result."""
    assert res.n == len(y) and res.robust_correct.dtype == torch.bool
    assert not (res.robust_correct & ~res.clean_correct).any()
    assert int(res.clean_correct.sum()) - sum(c.newly_broken for c in res.components) == int(res.robust_correct.sum())
    broken = res.clean_correct & ~res.robust_correct
    with torch.no_grad():
        pred = model(res.adv_images).argmax(1)
    assert (pred[broken] != y[broken]).all()
    assert torch.equal(res.adv_images[~broken], x[~broken])
    delta = (res.adv_images - x).flatten(1)
    size = delta.abs().max(1).values if norm == "Linf" else delta.norm(dim=1)
    assert (size <= eps * (1 + 1e-5) + 1e-6).all() and res.adv_images.min() >= 0 and res.adv_images.max() <= 1


def test_attacks_come_from_the_plugin_hook():
    assert lookup("attack", "pgd") is PGDAttack and lookup("attack", "apgd") is APGDEnsemble
    assert lookup("attack", "autoattack") is AutoAttackEval and lookup("attack", "adaptive") is AdaptiveAutoAttack
    with pytest.raises(UnknownNameError, match="did you mean 'apgd'"):
        lookup("attack", "apdg")


@pytest.mark.parametrize("norm,eps", [("Linf", 0.1), ("L2", 0.5)])
def test_apgd_matches_autoattack(digits, norm, eps):
    """Our APGD-CE + APGD-T is at least as strong as pyautoattack's (robust accuracy within +0.5 points)."""
    model, x, y = digits
    ours = lookup("attack", "apgd")(eps=eps, norm=norm, n_iter=30).run(model, x, y, progress=False)
    check_result(ours, x, y, model, eps, norm)
    with torch.no_grad():
        ref = (model(run_autoattack_apgd(model, x, y, eps, norm)).argmax(1) == y).float().mean().item()
    assert 0.1 < ref < 0.7
    assert ours.robust_accuracy <= ref + 0.005
    assert [c.name for c in ours.components] == ["apgd-ce", "apgd-t"]
    # the "autoattack" evaluation restricted to the same components is pyautoattack's own code
    aa = AutoAttackEval(eps=eps, norm=norm, n_iter=30, components=["apgd-ce", "apgd-t"]).run(model, x, y,
                                                                                         progress=False)
    assert aa.robust_accuracy == pytest.approx(ref)


def test_standard_autoattack_all_components(digits):
    model, x, y = digits
    x, y = x[:60], y[:60]
    res = AutoAttackEval(eps=0.08, n_iter=10, n_queries=100, n_target_classes=3).run(model, x, y, progress=False)
    assert [c.name for c in res.components] == ["apgd-ce", "apgd-t", "fab-t", "square"]
    assert all(c.seconds >= 0 for c in res.components)
    check_result(res, x, y, model, 0.08, "Linf")
    assert 0 < res.robust_accuracy < res.clean_accuracy


def test_pgd(digits):
    model, x, y = digits
    res = PGDAttack(eps=0.1, n_iter=10).run(model, x[:100], y[:100], progress=False)
    assert [c.name for c in res.components] == ["pgd"]
    check_result(res, x[:100], y[:100], model, 0.1, "Linf")
    assert res.robust_accuracy < res.clean_accuracy
    again = PGDAttack(eps=0.1, n_iter=10).run(model, x[:100], y[:100], progress=False)
    assert torch.equal(res.adv_images, again.adv_images)


def test_adaptive_attack_uses_the_auxiliary_gradient(digits):
    """The true output has zero gradient: attacking it directly fails, the transfer-based attack does not."""
    model, x, y = digits
    two = TwoOutput(model)
    opts = dict(eps=0.1, n_iter=20, components=["apgd-ce", "apgd-t"])
    own = APGDEnsemble(**opts).run(two, x, y, progress=False)  # exact mode: zero gradients
    adaptive = AdaptiveAutoAttack(**opts).run(two, x, y, progress=False)
    check_result(adaptive, x, y, two, 0.1, "Linf")
    assert "bypass" not in two.modes_seen and two.gradient == "exact"
    assert any("all-zero loss gradient" in w for w in own.warnings)
    assert adaptive.robust_accuracy < own.robust_accuracy - 0.2
    # a misleading auxiliary output (negated logits) misleads the attack: the gradient does come from it
    misled = AdaptiveAutoAttack(**opts).run(TwoOutput(model, aux_sign=-1.0), x, y, progress=False)
    assert misled.robust_accuracy > adaptive.robust_accuracy + 0.2


def test_adaptive_attack_runs_fab_t_in_bypass_mode_and_restores_it(digits):
    """FAB-T needs one model: the adaptive attack gives it MixedNUTS's outputs with the auxiliary gradient."""
    model, x, y = digits
    two = TwoOutput(model)
    AdaptiveAutoAttack(eps=0.1, n_iter=5, components=["fab-t"]).run(two, x[:40], y[:40], progress=False)
    assert two.modes_seen == {"bypass"} and two.gradient == "exact"


def test_autoattack_runs_in_bypass_mode_and_restores_it(digits):
    model, x, y = digits
    two = TwoOutput(model)
    res = AutoAttackEval(eps=0.1, n_iter=20, components=["apgd-ce", "apgd-t"]).run(two, x, y, progress=False)
    assert two.modes_seen == {"bypass"} and two.gradient == "exact"
    own = APGDEnsemble(eps=0.1, n_iter=20).run(two, x, y, progress=False)
    assert res.robust_accuracy < own.robust_accuracy - 0.2
    # the adaptive evaluation of a plain model is standard AutoAttack
    plain = AdaptiveAutoAttack(eps=0.1, n_iter=20, components=["apgd-ce"]).run(model, x, y, progress=False)
    ref = AutoAttackEval(eps=0.1, n_iter=20, components=["apgd-ce"]).run(model, x, y, progress=False)
    assert torch.equal(plain.robust_correct, ref.robust_correct)


def test_square_flags_gradient_masking(digits):
    model, x, y = digits
    x, y = x[:150], y[:150]
    masked = Rounded(model)
    res = AutoAttackEval(eps=0.15, n_iter=10, n_queries=300, components=["apgd-ce", "square"]).run(
        masked, x, y, progress=False)
    square = res.components[1]
    assert square.name == "square" and square.newly_broken > 0
    assert f"potentially unreliable: Square broke {square.newly_broken} examples" in " | ".join(res.warnings)
    check_result(res, x, y, masked, 0.15, "Linf")
    # a model with working gradients leaves Square nothing at this budget: no warning
    clean = AutoAttackEval(eps=0.15, n_iter=10, n_queries=300, components=["apgd-ce", "square"]).run(
        model, x, y, progress=False)
    assert clean.components[1].newly_broken == 0
    assert not any("potentially unreliable" in w for w in clean.warnings)


def test_bad_input_and_nan(digits):
    model, x, y = digits
    x, y = x[:20], y[:20]
    with pytest.raises(InputError, match="unknown option\\(s\\) n_iters for attack 'apgd'"):
        APGDEnsemble(eps=0.1, n_iters=3)
    with pytest.raises(InputError, match="epsilon must be positive"):
        AutoAttackEval(eps=0)
    with pytest.raises(InputError, match="unknown norm"):
        PGDAttack(eps=0.1, norm="Linfinity")
    with pytest.raises(InputError, match="unknown component\\(s\\) fab"):
        AutoAttackEval(eps=0.1, components=["fab"]).run(model, x, y, progress=False)
    with pytest.raises(InputError, match="\\[0, 1\\]"):
        APGDEnsemble(eps=0.1).run(model, x + 1, y, progress=False)
    with pytest.raises(InputError, match="19 entries for 20 examples"):
        APGDEnsemble(eps=0.1).run(model, x, y[:19], progress=False)
    with pytest.raises(InputError, match="NaN logits for 2 examples on the clean images"):
        APGDEnsemble(eps=0.1, n_iter=2).run(NaNOff(model, clean_nan=2), x, y, progress=False)
    with pytest.raises(InputError, match="NaN logits"):
        APGDEnsemble(eps=0.2, n_iter=2).run(NaNOff(model), x, y, progress=False)
    with pytest.raises(InputError, match="NaN logits"):
        AutoAttackEval(eps=0.2, n_queries=20, components=["square"]).run(NaNOff(model), x, y, progress=False)


def test_mixed_classifier_evaluations(digits):
    """On a real MixedClassifier (T = 0 ABC, no ABC gradient in exact mode): the transfer-based and bypass
    evaluations are at least as strong as attacking the exact gradient, and the gradient mode is restored."""
    from mixzoo.methods.mixednuts.mixing import MixedClassifier, MixingParams

    abc, x, y = digits
    rbc = train_digits_mlp(seed=1)[0]
    mix = MixedClassifier(abc, rbc, MixingParams(s=2.0, p=2.0, c=0.0, alpha=0.7, temperature=0.0))
    opts = dict(eps=0.1, n_iter=20, components=["apgd-ce", "apgd-t"])
    exact = APGDEnsemble(**opts).run(mix, x, y, progress=False)
    adaptive = AdaptiveAutoAttack(**opts).run(mix, x, y, progress=False)
    bypass = AutoAttackEval(**opts).run(mix, x, y, progress=False)
    # "adaptive-apgd" is exactly the gradient half of "adaptive"
    gradient_half = lookup("attack", "adaptive-apgd")(eps=0.1, n_iter=20).run(mix, x, y, progress=False)
    assert [c.name for c in gradient_half.components] == ["apgd-ce", "apgd-t"]
    assert torch.equal(gradient_half.adv_images, adaptive.adv_images)
    assert mix.gradient == "exact"
    for res in (exact, adaptive, bypass):
        check_result(res, x, y, mix, 0.1, "Linf")
        assert 0 < res.robust_accuracy < res.clean_accuracy
    assert adaptive.robust_accuracy <= exact.robust_accuracy + 0.01
    assert bypass.robust_accuracy <= exact.robust_accuracy + 0.01


@pytest.mark.slow
def test_mixed_classifier_is_a_drop_in_model_for_robustbench_benchmark(digits, monkeypatch):
    """RobustBench's ``benchmark()`` (clean accuracy, then standard AutoAttack) runs on a MixedClassifier in bypass
    mode. Only its data loader is replaced: CIFAR-10 cannot be downloaded here, so it gets digits images."""
    from mixzoo.core.compat import import_robustbench
    from mixzoo.methods.mixednuts.mixing import MixedClassifier, MixingParams

    import_robustbench()
    import robustbench.eval as rb_eval

    abc, x, y = digits
    x, y = x[:24], y[:24]
    mix = MixedClassifier(abc, train_digits_mlp(seed=1)[0], MixingParams(s=2.0, p=2.0, c=0.0, alpha=0.7),
                          gradient="bypass")
    monkeypatch.setattr(rb_eval, "load_clean_dataset", lambda *args, **kwargs: (x, y))
    clean, robust = rb_eval.benchmark(mix, n_examples=len(y), dataset="cifar10", threat_model="Linf", eps=0.1,
                                      batch_size=len(y))
    with torch.no_grad():
        expected = float((mix(x).argmax(1) == y).float().mean())
    assert clean == pytest.approx(expected)
    assert 0.0 <= robust < clean


@pytest.mark.slow
def test_adaptive_strong_adds_gradient_attacks_and_never_reports_more_robustness(digits):
    """``adaptive-strong`` = the adaptive attack's components, then exact-, bypass- and re-seeded APGD on what is
    still robust (before FAB-T / Square): its robust set is a subset of ``adaptive``'s with the same seed."""
    from mixzoo.attacks import AdaptiveStrong
    from mixzoo.methods.mixednuts.mixing import MixedClassifier, MixingParams

    abc, x, y = digits
    rbc = train_digits_mlp(seed=1)[0]
    mix = MixedClassifier(abc, rbc, MixingParams(s=2.0, p=2.0, c=0.0, alpha=0.7, temperature=0.0))
    opts = dict(eps=0.1, n_iter=10, components=["apgd-ce", "apgd-t", "square"], n_queries=50)
    adaptive = AdaptiveAutoAttack(**opts).run(mix, x, y, progress=False)
    strong = lookup("attack", "adaptive-strong")(**opts).run(mix, x, y, progress=False)
    assert isinstance(strong, EvalResult) and lookup("attack", "adaptive-strong") is AdaptiveStrong
    assert [c.name for c in strong.components] == [
        "apgd-ce", "apgd-t", "apgd-ce-exact", "apgd-t-exact", "apgd-ce-bypass", "apgd-t-bypass", "apgd-ce-seed1",
        "apgd-t-seed1", "square"]
    check_result(strong, x, y, mix, 0.1, "Linf")
    assert mix.gradient == "exact"
    assert not (strong.robust_correct & ~adaptive.robust_correct).any()
    assert [c.newly_broken for c in strong.components[:2]] == [c.newly_broken for c in adaptive.components[:2]]
    # the extra components do run in their gradient modes
    two = TwoOutput(model=abc)
    AdaptiveStrong(eps=0.1, n_iter=5, components=["apgd-ce"]).run(two, x[:60], y[:60], progress=False)
    assert two.modes_seen == {"exact", "bypass"} and two.gradient == "exact"
    # a single model gets re-seeded APGD only
    plain = AdaptiveStrong(eps=0.1, n_iter=5, extra_seeds=2, components=["apgd-ce", "apgd-t"]).run(
        abc, x[:60], y[:60], progress=False)
    assert [c.name for c in plain.components] == ["apgd-ce", "apgd-t", "apgd-ce-seed1", "apgd-t-seed1",
                                                  "apgd-ce-seed2", "apgd-t-seed2"]


def test_attack_options_are_checked_before_any_attack_with_close_names():
    from mixzoo.attacks.suites import AdaptiveAPGD, PGDAttack

    with pytest.raises(InputError, match="unknown option.*n_iters.*did you mean n_iter\\?"):
        PGDAttack.check_options({"n_iters": 3})
    with pytest.raises(InputError, match="must be an integer, got 'many'"):
        AdaptiveAPGD.check_options({"n_iter": "many"})
    with pytest.raises(InputError, match="must be an integer, got True"):
        AdaptiveAPGD.check_options({"n_iter": True})
    with pytest.raises(InputError, match=r"option n_iter \(-O n_iter\) of attack '[a-z-]+' must be at least 1"):
        AdaptiveAPGD.check_options({"n_iter": 0})
    merged = AdaptiveAPGD.check_options({"components": "apgd-ce", "n_iter": 7})
    assert merged["components"] == ["apgd-ce"] and merged["n_iter"] == 7
    assert merged["n_target_classes"] == AdaptiveAPGD.defaults["n_target_classes"]
    assert PGDAttack(eps=0.1, n_iter=3).options["n_iter"] == 3


@pytest.mark.slow
def test_adaptive_strong_breaks_every_example_standard_autoattack_breaks(digits):
    """Issue 30: standard AutoAttack (pyautoattack, run directly on the exact mixed classifier, same images and
    seed) must break nothing that ``adaptive-strong`` reports robust. With mixzoo's earlier layer norm AutoAttack's
    own exact-gradient APGD broke one example (index 66) here that every other component missed; with the authors'
    layer norm the other components break it too, so the component's own count may be 0 and the test
    checks the containment itself. Square gets 100 queries on both sides, and the bypass FAB-T and Square components
    of ``adaptive`` are left out, for time."""
    from mixzoo.core.compat import import_autoattack
    from mixzoo.methods.mixednuts.mixing import MixedClassifier, MixingParams

    aa = import_autoattack()
    abc, x, y = digits
    mix = MixedClassifier(abc, train_digits_mlp(seed=1)[0],
                          MixingParams(s=2.0, p=2.0, c=0.0, alpha=0.7, temperature=0.0))
    direct = aa.AutoAttack(mix, norm="Linf", eps=0.1, seed=0, version="standard")
    direct.verbose, direct.square.n_queries = False, 100
    with torch.no_grad():
        adv, _ = direct.run_standard_evaluation(x.clone(), y.clone(), batch_size=len(x))
        aa_robust = mix(adv).argmax(1) == y
    res = lookup("attack", "adaptive-strong")(eps=0.1, n_queries=100, components=[
        "apgd-ce", "apgd-t", "fab-t-exact", "autoattack-standard"]).run(mix, x, y, progress=False)
    check_result(res, x, y, mix, 0.1, "Linf")
    only_aa = torch.nonzero(res.robust_correct & ~aa_robust).squeeze(1).tolist()
    assert only_aa == []
    counts = {c.name: c.newly_broken for c in res.components}
    assert "autoattack-standard" in counts and "fab-t-exact" in counts
    assert mix.gradient == "exact"


EPS = 0.1


class FirstPixel(nn.Module):
    """Class 0 iff the first pixel exceeds 0.5 (two classes); NaN in, NaN out."""

    def forward(self, x):
        a = x.flatten(1)[:, 0] - 0.5
        return torch.stack([a, -a], dim=1)


class Scripted(Attack):
    """An evaluation whose components are given by the test."""

    name = "scripted"

    def __init__(self, comps, **options):
        super().__init__(EPS, "Linf", 0, **options)
        self.comps = comps

    def components(self, model, n_classes):
        return self.comps


def _batch():
    """Eight 1x2x2 images; pixel 2 is a tag (example index / 10), label 0 throughout.

    0: broken inside the ball; 1: broken 1% beyond eps; 2: broken below 0; 3: broken above 1; 4: NaN candidate;
    5: candidate inside but still correct; 6: a clean mistake (never attacked); 7: broken inside the ball.
    """
    x = torch.full((8, 1, 2, 2), 0.55)
    x[:, 0, 1, 0] = torch.arange(8) / 10
    x[2, 0, 0, 1], x[3, 0, 0, 1] = 0.0, 1.0
    x[6, 0, 0, 0] = 0.45
    return x, torch.zeros(8, dtype=torch.long)


def _tag(x):
    return [round(float(t) * 10) for t in x[:, 0, 1, 0]]


def _scripted_candidates(x):
    cand = x.clone()
    for row, k in enumerate(_tag(x)):
        first = {0: 0.45, 1: 0.55 - EPS * 1.01, 2: 0.45, 3: 0.45, 4: float("nan"), 5: 0.52, 7: 0.45}[k]
        cand[row, 0, 0, 0] = first
        if k == 2:
            cand[row, 0, 0, 1] = -0.01
        if k == 3:
            cand[row, 0, 0, 1] = 1.01
    return cand


def test_only_misclassified_points_inside_the_threat_model_count_and_clean_mistakes_are_never_robust():
    """AutoAttack's rule: an example is robust iff it is clean-correct and no component returns a legal point
    (eps-ball, [0, 1], finite) that the model misclassifies; only clean-correct examples are attacked."""
    x, y = _batch()
    before = x.clone()
    seen = []

    def fn(xb, yb):
        seen.extend(_tag(xb))
        return _scripted_candidates(xb)

    res = Scripted([Component("c1", fn)]).run(FirstPixel(), x, y, progress=False)
    assert sorted(seen) == [0, 1, 2, 3, 4, 5, 7]
    assert res.clean_correct.tolist() == [True] * 6 + [False, True]
    assert res.robust_correct.tolist() == [False, True, True, True, True, True, False, False]
    assert [(c.name, c.newly_broken) for c in res.components] == [("c1", 2)]
    assert res.clean_accuracy == pytest.approx(7 / 8)
    assert res.robust_accuracy == pytest.approx(5 / 8)  # over all n examples, not over the clean-correct ones
    assert torch.equal(res.adv_images[[0, 7]], _scripted_candidates(x[[0, 7]]))
    assert torch.equal(res.adv_images[1:7], x[1:7])
    assert torch.equal(x, before)  # the caller's images are not overwritten by adversarial ones
    assert any("c1 returned 4 points outside the eps-ball or [0, 1]" in w for w in res.warnings)


def test_clean_accuracy_is_the_argmax_agreement_with_the_labels_by_hand():
    model = TenClass(pair=False)
    model.lin.bias.data[:] = torch.arange(10.0) * -10  # predicts class 0 on every image in [0, 1]
    x, _ = _images(5)
    y = torch.tensor([0, 0, 0, 1, 9])
    res = Scripted([Component("c1", lambda xb, yb: xb.clone())]).run(model, x, y, progress=False)
    assert res.clean_correct.tolist() == [True, True, True, False, False]
    assert res.clean_accuracy == pytest.approx(0.6) and res.robust_accuracy == pytest.approx(0.6)


class PartNaN(nn.Module):
    """Ten logits, one of them NaN on the first two images."""

    def forward(self, x):
        out = torch.zeros(len(x), 10)
        out[:2, 3] = float("nan")
        return out


def test_nan_in_any_logit_refuses_the_run_and_counts_the_examples():
    x, y = _images(5)
    with pytest.raises(InputError, match="NaN logits for 2 examples on the clean images"):
        Scripted([Component("c1", lambda xb, yb: xb.clone())]).run(PartNaN(), x, y, progress=False)


def test_later_components_attack_only_what_earlier_ones_left_robust_in_batches_of_batch_size():
    x, y = _batch()
    seen2, sizes = [], []

    def fn2(xb, yb):
        seen2.extend(_tag(xb))
        sizes.append(len(xb))
        return xb.clone()

    comps = [Component("c1", lambda xb, yb: _scripted_candidates(xb)), Component("c2", fn2)]
    res = Scripted(comps, batch_size=2).run(FirstPixel(), x, y, progress=False)
    assert sorted(seen2) == [1, 2, 3, 4, 5] and sizes == [2, 2, 1]
    assert [c.newly_broken for c in res.components] == [2, 0]
    # a component returning only legal correct points leaves no "outside" note
    assert not any(w.startswith("c2 returned") for w in res.warnings)


def test_component_warnings_are_reported_once_and_zero_gradient_note_only_when_a_run_had_one():
    x, y = _batch()

    def noisy(xb, yb):
        warnings.warn("odd thing", stacklevel=1)
        warnings.warn("odd thing", stacklevel=1)
        return xb.clone()

    comps = [Component("c1", noisy, zero_grad=[0, 0]), Component("c2", lambda xb, yb: xb.clone(), zero_grad=[1, 2])]
    res = Scripted(comps).run(FirstPixel(), x, y, progress=False)
    assert res.warnings.count("c1: odd thing") == 1
    assert not any(w.startswith("c1: 0 example runs") or "c1: " in w and "all-zero" in w for w in res.warnings)
    assert any(w.startswith("c2: 3 example runs had an all-zero loss gradient") for w in res.warnings)


def test_square_masking_note_needs_a_gradient_component_before_square():
    """App. B.2.1: Square breaking examples that the gradient attacks missed signals gradient masking; Square alone
    is no such evidence."""
    x, y = _batch()
    square = Component("square", lambda xb, yb: _scripted_candidates(xb), gradient_based=False)
    alone = Scripted([square]).run(FirstPixel(), x, y, progress=False)
    assert alone.components[0].newly_broken == 2
    assert not any("potentially unreliable" in w for w in alone.warnings)
    idle = Component("apgd-ce", lambda xb, yb: xb.clone())
    after = Scripted([idle, square]).run(FirstPixel(), x, y, progress=False)
    assert base.square_masking_note(2) in after.warnings
    # Square breaking nothing after the gradient attacks: no flag
    quiet = Component("square", lambda xb, yb: xb.clone(), gradient_based=False)
    none = Scripted([idle, quiet]).run(FirstPixel(), x, y, progress=False)
    assert not any("potentially unreliable" in w for w in none.warnings)


@pytest.mark.parametrize("norm", ["Linf", "L2"])
def test_within_threat_model_by_hand(norm):
    """Legal = finite, in [0, 1] and ||adv - x|| <= eps (Linf: largest |coordinate|, L2: Euclidean) up to 1e-5."""
    x = torch.full((1, 1, 2, 2), 0.5)

    def legal(delta):
        return bool(within_threat_model(x + torch.tensor(delta).view(1, 1, 2, 2), x, 0.2, norm)[0])

    c = 0.2 if norm == "Linf" else 0.1  # a corner of the ball: Linf 0.2; L2 sqrt(4 * 0.1^2) = 0.2
    assert legal([c, -c, c, -c])
    assert not legal([c * 1.001, -c, c, -c])
    if norm == "L2":
        assert legal([0.2, 0.0, 0.0, 0.0]) and not legal([0.15, 0.15, 0.0, 0.0])  # L1 0.3 but L2 0.21
    else:
        assert legal([0.2, 0.2, 0.2, 0.2]) and not legal([0.201, 0.0, 0.0, 0.0])
    edge = torch.tensor([[[[0.0, 1.0], [0.1, 0.9]]]])
    assert within_threat_model(edge, edge, 0.2, norm).all()
    for bad in (-0.001, 1.001, float("nan"), float("inf")):
        adv = edge.clone()
        adv[0, 0, 0, 0 if bad < 0.5 or bad != bad else 1] = bad
        assert not within_threat_model(adv, edge, 0.2, norm).any()


class _FakeRecord:
    def __init__(self, x, bad=False, zero=False):
        self.x, self.zero_grad, self.bad = x.clone(), torch.full((len(x),), zero, dtype=torch.bool), bad

    def check_finite(self):
        if self.bad:
            raise InputError("model returned NaN logits during the attack")


class TenClass(nn.Module):
    """Ten classes, linear; MixedClassifier-like: ``exact`` and ``bypass`` gradient variants (named in
    ``.gradient``, mixzoo.attacks.variants.GradientVariants) and, with ``pair``, ``forward_pair``. With
    ``variants=False`` a single model: no variants and no ``gradient`` attribute."""

    def __init__(self, pair=True, variants=True):
        super().__init__()
        self.lin = nn.Linear(4, 10)
        self.variants = variants
        if variants:
            self.gradient = "exact"
        if pair:
            self.forward_pair = lambda x: (self(x), self(x))

    def gradient_variant(self, name):
        """The same model (shared weights) with gradient ``name``."""
        if not self.variants or name not in ("exact", "bypass"):
            return None
        other = copy.copy(self)
        other._modules = dict(self._modules)
        other.gradient = name
        return other

    def forward(self, x):
        return self.lin(x.flatten(1))


def received_model(obj):
    """The model an attack was given, FiniteGuard (NaN check around pyautoattack's components) unwrapped."""
    return obj.model if isinstance(obj, adapters.FiniteGuard) else obj


def gradient_of(obj):
    """The name of the gradient variant an attack was given; None for a forward function (e.g. forward_pair)."""
    return getattr(received_model(obj), "gradient", None)


def is_variant_of(obj, model):
    """``obj`` is ``model`` or a gradient variant of it (a TenClass sharing its weights)."""
    obj = received_model(obj)
    return isinstance(obj, TenClass) and obj.lin is model.lin


@pytest.fixture()
def apgd_calls(monkeypatch):
    """Our APGD-CE / APGD-T replaced by a recorder of their arguments and the gradient variant they got."""
    calls = []

    def recorder(kind):
        def fn(forward, x, y, cfg, **kw):
            calls.append(dict(kind=kind, forward=forward, mode=gradient_of(forward), **dataclasses.asdict(cfg), **kw))
            return _FakeRecord(x, bad=cfg.seed == 666, zero=cfg.seed == 13)
        return fn

    monkeypatch.setattr(adapters, "apgd_ce", recorder("ce"))
    monkeypatch.setattr(adapters, "apgd_t", recorder("t"))
    return calls


def _images(n=6):
    torch.manual_seed(0)
    return torch.rand(n, 1, 2, 2), torch.zeros(n, dtype=torch.long)


def test_apgd_components_get_the_evaluations_iterations_restarts_seed_and_targets(apgd_calls):
    calls = apgd_calls
    model = TenClass(pair=False)
    x, y = _images()
    model.lin.bias.data[:] = torch.arange(10.0) * -10  # class 0 everywhere: all clean-correct
    APGDEnsemble(eps=0.1, n_iter=7, n_restarts=2, seed=3, n_target_classes=4).run(model, x, y, progress=False)
    assert [c["kind"] for c in calls] == ["ce", "t"]
    for c in calls:
        assert (c["n_iter"], c["n_restarts"], c["seed"], c["eps"], c["norm"]) == (7, 2, 3, 0.1, "Linf")
        assert c["forward"] is model
    assert calls[1]["n_target_classes"] == 4
    with pytest.raises(InputError, match="NaN"):
        APGDEnsemble(eps=0.1, seed=666).run(model, x, y, progress=False)
    masked = APGDEnsemble(eps=0.1, seed=13, components=["apgd-ce"]).run(model, x, y, progress=False)
    assert any(w.startswith("apgd-ce: 6 example runs had an all-zero loss gradient") for w in masked.warnings)


def test_adaptive_runs_autoattacks_apgd_on_the_exact_gradient_after_the_transfer_apgd(apgd_calls):
    """Issue 30, example 96: the transfer APGD (forward_pair) missed what AutoAttack's APGD-CE on the exact gradient
    broke, so adaptive runs both: transfer first, then the model's exact variant, same seed and settings."""
    calls = apgd_calls
    model = TenClass()
    model.lin.bias.data[:] = torch.arange(10.0) * -10
    x, y = _images()
    model.gradient = "bypass"  # built on bypass: the exact components must ask for its exact variant
    res = AdaptiveAutoAttack(eps=0.1, seed=4, n_restarts=2, n_iter=7, components=[
        "apgd-ce", "apgd-t", "apgd-ce-exact", "apgd-t-exact"]).run(model, x, y, progress=False)
    assert [c.name for c in res.components] == ["apgd-ce", "apgd-t", "apgd-ce-exact", "apgd-t-exact"]
    assert [(c["kind"], c["forward"] == model.forward_pair, c["mode"]) for c in calls] == [
        ("ce", True, None), ("t", True, None), ("ce", False, "exact"), ("t", False, "exact")]
    assert is_variant_of(calls[2]["forward"], model) and is_variant_of(calls[3]["forward"], model)
    assert all((c["seed"], c["n_restarts"], c["n_iter"]) == (4, 2, 7) for c in calls)
    assert calls[3]["n_target_classes"] == 9 and model.gradient == "bypass"
    # a single model has one gradient: its adaptive evaluation is standard AutoAttack, no "-exact" APGD
    single = [c.name for c in AdaptiveAutoAttack(eps=0.1).components(TenClass(pair=False), 10)]
    assert single == ["apgd-ce", "apgd-t", "fab-t", "square"]
    # ... so asking it for an exact component gets that component on the model's own gradient, not nothing
    only = AdaptiveAutoAttack(eps=0.1, components=["apgd-ce-exact"]).components(TenClass(pair=False), 10)
    assert [c.name for c in only] == ["apgd-ce"]


def test_an_evaluation_with_no_component_to_run_is_refused(apgd_calls):
    """Robust accuracy would equal clean accuracy without a word: APGD-T alone with no target classes."""
    model = TenClass()
    model.lin.bias.data[:] = torch.arange(10.0) * -10
    x, y = _images()
    with pytest.raises(InputError, match="no component to run.*choose components"):
        AdaptiveAutoAttack(eps=0.1, n_target_classes=0, components=["apgd-t"]).run(model, x, y, progress=False)
    assert apgd_calls == []


def test_adaptive_strong_extra_runs_use_their_gradients_and_fresh_distinct_seeds(apgd_calls):
    """App. B.2.1 transfer APGD takes the auxiliary output (forward_pair); the extra exact/bypass runs take the
    model's variant with that gradient (App. B.2.2); re-seeded runs use seeds other than the base seed."""
    calls = apgd_calls
    model = TenClass()
    model.lin.bias.data[:] = torch.arange(10.0) * -10
    x, y = _images()
    AdaptiveStrong(eps=0.1, seed=5, extra_seeds=2, components=["apgd-ce"]).run(model, x, y, progress=False)
    ce = [c for c in calls if c["kind"] == "ce"]
    assert len(ce) == 5
    first, exact, bypass, s1, s2 = ce
    assert first["forward"] == model.forward_pair and first["seed"] == 5
    assert is_variant_of(exact["forward"], model) and exact["mode"] == "exact"
    assert is_variant_of(bypass["forward"], model) and bypass["mode"] == "bypass"
    assert s1["forward"] == model.forward_pair and s2["forward"] == model.forward_pair
    assert len({5, s1["seed"], s2["seed"]}) == 3
    assert model.gradient == "exact"


def test_adaptive_strong_exact_and_bypass_runs_use_the_evaluations_seed(apgd_calls):
    """They ran at seed 0 whatever --seed said (found by this audit, fixed); the seedK runs and the transfer runs
    already followed it."""
    calls = apgd_calls
    model = TenClass()
    model.lin.bias.data[:] = torch.arange(10.0) * -10
    x, y = _images()
    AdaptiveStrong(eps=0.1, seed=5, extra_seeds=0, components=["apgd-ce"]).run(model, x, y, progress=False)
    assert [c["seed"] for c in calls] == [5] * 5  # apgd-ce, then APGD-CE + APGD-T exact and bypass


def test_extra_components_come_before_fab_t_and_square_and_zero_targets_drop_the_targeted_ones():
    model = TenClass()
    names = [c.name for c in AdaptiveStrong(eps=0.1).components(model, 10)]
    assert names == ["apgd-ce", "apgd-t", "apgd-ce-exact", "apgd-t-exact", "apgd-ce-bypass", "apgd-t-bypass",
                     "apgd-ce-seed1", "apgd-t-seed1", "fab-t", "fab-t-exact", "square", "autoattack-standard"]
    for cls in (AutoAttackEval, AdaptiveAutoAttack):
        for m in (model, TenClass(pair=False)):
            exact = ["apgd-ce-exact"] if cls is AdaptiveAutoAttack and m is model else []
            assert [c.name for c in cls(eps=0.1, n_target_classes=0).components(m, 10)] == ["apgd-ce", *exact,
                                                                                             "square"]
    assert [c.name for c in APGDEnsemble(eps=0.1, n_target_classes=0).components(model, 10)] == ["apgd-ce"]
    # components run in AutoAttack's order whatever order they were asked in
    picked = AutoAttackEval(eps=0.1, components=["square", "apgd-ce"]).components(model, 10)
    assert [c.name for c in picked] == ["apgd-ce", "square"]


def test_option_counts_are_checked():
    assert AutoAttackEval.check_options({"n_target_classes": 0})["n_target_classes"] == 0
    with pytest.raises(InputError, match=r"option n_queries \(-O n_queries\) of attack '[a-z-]+' must be at least 1"):
        AutoAttackEval.check_options({"n_queries": 0})
    with pytest.raises(InputError, match=r"option n_queries \(-O n_queries\) of attack 'autoattack' must be an"
                                         " integer, got True"):
        AutoAttackEval.check_options({"n_queries": True})


@pytest.fixture()
def aa_attacks(monkeypatch):
    """pyautoattack's attack classes with ``perturb`` replaced by a recorder of the attack object, the name of the
    gradient variant it was given and that model (FiniteGuard unwrapped)."""
    from mixzoo.core.compat import import_autoattack

    aa = import_autoattack()
    seen = []

    def perturb(self, x, y, *args, **kwargs):
        model = getattr(self, "model", None) or getattr(self, "predict", None)
        seen.append((type(self).__name__, self, gradient_of(model), received_model(model)))
        return x

    for cls in (aa.autopgd_base.APGDAttack, aa.autopgd_base.APGDAttack_targeted, aa.fab_pt.FABAttack_PT,
                aa.square.SquareAttack):
        monkeypatch.setattr(cls, "perturb", perturb)
    return aa, seen


def _attrs(obj, names):
    return {n: getattr(obj, n) for n in names}


APGD_ATTRS = ["n_iter", "n_restarts", "eps", "norm", "seed", "loss", "eot_iter", "thr_decr"]
FAB_ATTRS = ["n_iter", "n_restarts", "eps", "norm", "seed", "targeted", "n_target_classes"]
SQUARE_ATTRS = ["n_queries", "n_restarts", "eps", "norm", "seed", "p_init", "rescale_schedule", "loss", "targeted"]


@pytest.mark.parametrize("norm,eps,seed", [("Linf", 0.1, 0), ("L2", 0.5, 4)])
def test_autoattack_components_have_the_standard_versions_settings(aa_attacks, norm, eps, seed):
    """Defaults reproduce pyautoattack's own AutoAttack(version='standard') as it runs each component (it sets
    apgd.loss='ce' for APGD-CE and fab.targeted=True for FAB-T at run time)."""
    aa, seen = aa_attacks
    model = TenClass(pair=False)
    model.lin.bias.data[:] = torch.arange(10.0) * -10
    x, y = _images()
    AutoAttackEval(eps=eps, norm=norm, seed=seed).run(model, x, y, progress=False)
    ref = aa.AutoAttack(model, norm=norm, eps=eps, version="standard", seed=seed, device="cpu")
    ref.apgd.loss, ref.fab.targeted = "ce", True
    assert [s[0] for s in seen] == ["APGDAttack", "APGDAttack_targeted", "FABAttack_PT", "SquareAttack"]
    ours = [s[1] for s in seen]
    assert _attrs(ours[0], APGD_ATTRS) == _attrs(ref.apgd, APGD_ATTRS)
    assert _attrs(ours[1], APGD_ATTRS + ["n_target_classes"]) == _attrs(ref.apgd_targeted,
                                                                          APGD_ATTRS + ["n_target_classes"])
    assert _attrs(ours[2], FAB_ATTRS) == _attrs(ref.fab, FAB_ATTRS)
    assert _attrs(ours[3], SQUARE_ATTRS) == _attrs(ref.square, SQUARE_ATTRS)
    assert all(s[2] == "bypass" and is_variant_of(s[3], model) for s in seen)  # App. B.2.2
    assert model.gradient == "exact"  # the caller's model is left as it was


def test_autoattack_components_take_the_evaluations_options(aa_attacks):
    aa, seen = aa_attacks
    model = TenClass(pair=False)
    model.lin.bias.data[:] = torch.arange(10.0) * -10
    x, y = _images()
    AutoAttackEval(eps=0.1, n_iter=7, n_restarts=2, n_queries=33, n_target_classes=3, seed=4).run(
        model, x, y, progress=False)
    apgd, apgd_t, fab, square = (s[1] for s in seen)
    assert (apgd.n_iter, apgd.n_restarts, apgd.seed) == (7, 2, 4)
    assert (apgd_t.n_iter, apgd_t.n_restarts, apgd_t.n_target_classes, apgd_t.seed) == (7, 2, 3, 4)
    assert (fab.n_iter, fab.n_target_classes, fab.seed, fab.targeted) == (7, 3, 4, True)
    assert (square.n_queries, square.seed) == (33, 4)


def test_adaptive_runs_fab_t_in_bypass_and_square_on_the_true_output(aa_attacks):
    """App. B.2.1: FAB-T gets the bypass (single-output surrogate); Square, gradient-free, the unchanged model."""
    aa, seen = aa_attacks
    model = TenClass()
    model.lin.bias.data[:] = torch.arange(10.0) * -10
    x, y = _images()
    AdaptiveAutoAttack(eps=0.1, components=["fab-t", "square"]).run(model, x, y, progress=False)
    assert [(s[0], s[2]) for s in seen] == [("FABAttack_PT", "bypass"), ("SquareAttack", "exact")]
    assert is_variant_of(seen[0][3], model) and seen[1][3] is model


def test_adaptive_runs_fab_t_on_both_gradients_with_the_standard_settings(aa_attacks):
    """Issue 30: FAB-T on the bypass gradient missed a point standard AutoAttack's FAB-T (exact gradient) finds;
    ``adaptive`` runs both, bypass first, each with the standard version's settings and the evaluation's seed."""
    aa, seen = aa_attacks
    model = TenClass()
    model.lin.bias.data[:] = torch.arange(10.0) * -10
    x, y = _images()
    res = AdaptiveAutoAttack(eps=0.1, seed=3, components=["fab-t", "fab-t-exact"]).run(model, x, y, progress=False)
    assert [(s[0], s[2]) for s in seen] == [("FABAttack_PT", "bypass"), ("FABAttack_PT", "exact")]
    assert all(is_variant_of(s[3], model) for s in seen)
    assert [c.name for c in res.components] == ["fab-t", "fab-t-exact"]
    assert _attrs(seen[0][1], FAB_ATTRS) == _attrs(seen[1][1], FAB_ATTRS)
    assert (seen[1][1].targeted, seen[1][1].n_target_classes, seen[1][1].seed, seen[1][1].n_restarts) == (
        True, 9, 3, 1)
    # the default adaptive evaluation of a mixed classifier runs FAB-T on the exact gradient only (the bypass one and
    # the exact APGD-T are selectable), in AutoAttack's order
    names = [c.name for c in AdaptiveAutoAttack(eps=0.1).components(model, 10)]
    assert names == ["apgd-ce", "apgd-t", "apgd-ce-exact", "fab-t-exact", "square"]
    every = [c.name for c in
             AdaptiveAutoAttack(eps=0.1, components=list(suites.ADAPTIVE_COMPONENTS)).components(model, 10)]
    assert every == ["apgd-ce", "apgd-t", "apgd-ce-exact", "apgd-t-exact", "fab-t", "fab-t-exact", "square"]
    # a single model's adaptive evaluation is standard AutoAttack: one FAB-T, on its own gradient
    plain = TenClass(pair=False, variants=False)
    assert [c.name for c in AdaptiveAutoAttack(eps=0.1).components(plain, 10)] == list(suites.AUTOATTACK_COMPONENTS)


def test_autoattack_standard_component_attacks_every_clean_correct_example_on_the_exact_model(monkeypatch):
    """``autoattack-standard`` (adaptive-strong) is AutoAttack's own standard run on the exact classifier, from the
    clean images of every clean-correct example (not only the still-robust ones), with the evaluation's seed;
    only its breaks of still-robust examples count as its own."""
    from mixzoo.attacks import AdaptiveStrong
    from mixzoo.core.compat import import_autoattack

    aa = import_autoattack()
    calls = []

    def fake(self, x, y, *, batch_size=250, state_path=None):
        calls.append(dict(n=len(x), seed=self.seed, version=self.version, mode=gradient_of(self.model),
                          attacks=list(self.attacks_to_run), fab_restarts=self.fab.n_restarts,
                          targets=(self.apgd_targeted.n_target_classes, self.fab.n_target_classes),
                          queries=self.square.n_queries, n_iter=self.apgd.n_iter))
        adv = x.clone()
        adv[:, 0, 0, 0] = 1.0  # pretend every example breaks: the model below then predicts class 1
        return adv, y

    monkeypatch.setattr(aa.AutoAttack, "run_standard_evaluation", fake)
    monkeypatch.setattr(suites, "extra_apgd", lambda *a, **k: [])  # only the component under test
    model = TenClass()
    model.lin.weight.data.zero_()
    model.lin.weight.data[1, 0] = 100.0
    model.lin.bias.data[:] = torch.arange(10.0) * -10  # class 0 on the clean images, class 1 at pixel 0 = 1
    model.gradient = "bypass"  # built on bypass: the component must ask for the exact variant
    x, y = _images(8)
    x[:, 0, 0, 0] = 0.0
    y[6:] = 3  # two clean mistakes
    res = AdaptiveStrong(eps=1.0, seed=5, components=["autoattack-standard"]).run(model, x, y, progress=False)
    (call,) = calls
    assert call == dict(n=6, seed=5, version="standard", mode="exact", attacks=["apgd-ce", "apgd-t", "fab-t", "square"],
                        fab_restarts=1, targets=(9, 9), queries=5000, n_iter=100)
    assert [(c.name, c.newly_broken) for c in res.components] == [("autoattack-standard", 6)]
    assert model.gradient == "bypass" and not res.robust_correct.any()
    # it starts from the clean images of every clean-correct example, also those an earlier component broke
    calls.clear()
    res = AdaptiveStrong(eps=1.0, seed=5, components=["fab-t", "autoattack-standard"]).run(model, x, y,
                                                                                         progress=False)
    assert calls[0]["n"] == 6


def test_pgd_evaluation_passes_steps_step_size_random_start_and_seed(monkeypatch):
    calls = []

    def fake_pgd(model, x, y, eps, **kw):
        calls.append(dict(eps=eps, state=kw["generator"].get_state(), **kw))
        return x.clone()

    monkeypatch.setattr(suites, "pgd", fake_pgd)
    model = TenClass(pair=False)
    model.lin.bias.data[:] = torch.arange(10.0) * -10
    x, y = _images()
    PGDAttack(eps=0.1, norm="L2", n_iter=7, step_size=0.03, seed=3).run(model, x, y, progress=False)
    (c,) = calls
    assert (c["eps"], c["steps"], c["step_size"], c["norm"], c["random_start"]) == (0.1, 7, 0.03, "L2", True)
    assert torch.equal(c["state"], torch.Generator().manual_seed(3).get_state())


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=30))
def test_eval_result_accuracies_are_fractions_of_all_examples(flags):
    clean = torch.tensor([c for c, _ in flags])
    robust = torch.tensor([c and r for c, r in flags])
    res = EvalResult("a", 0.1, "Linf", len(flags), clean, robust, torch.zeros(len(flags), 1, 1, 1))
    assert res.clean_accuracy == pytest.approx(sum(clean.tolist()) / len(flags))
    assert res.robust_accuracy == pytest.approx(sum(robust.tolist()) / len(flags))


def test_mmaa_records_the_settings_it_ran_with_and_the_clean_logits():
    """The recorded settings key cached margins (Algorithm 1's input): they must be the effective ones."""
    from mixzoo.attacks.mmaa import mmaa

    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 4))
    x = torch.rand(6, 1, 2, 2)
    with torch.no_grad():
        y = model(x).argmax(1)
        clean = model(x)
    res = mmaa(model, x, y, ApgdSettings(eps=0.05, n_iter=2, n_target_classes=9), layer_norm=False, attack_all=False,
               progress=False)
    assert res.settings["n_target_classes"] == 3  # at most n_classes - 1 targets
    assert res.settings["layer_norm"] is False and res.settings["attack_all"] is False
    assert torch.allclose(res.clean_logits, clean)
    assert res.robust_accuracy == pytest.approx(float((~res.misclassified).float().mean()))
    assert res.robust_accuracy == pytest.approx(float((res.logits.argmax(1) == y).float().mean()))


def test_each_registered_attack_is_the_class_of_that_name():
    """``mixzoo bench --attack NAME`` runs the evaluation named NAME (plugins/attacks.py)."""
    from mixzoo.core.plugins import lookup

    names = ["pgd", "apgd", "autoattack", "adaptive", "adaptive-apgd", "adaptive-strong"]
    assert [lookup("attack", n).name for n in names] == names


def test_mmaa_accepts_zero_targets_and_refuses_a_zero_batch_or_mismatched_labels():
    from mixzoo.attacks.mmaa import mmaa

    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 3))
    x = torch.rand(4, 1, 2, 2)
    y = torch.zeros(4, dtype=torch.long)
    res = mmaa(model, x, y, ApgdSettings(eps=0.05, n_iter=1, n_target_classes=0), progress=False)
    assert res.settings["n_target_classes"] == 0 and len(res.margins) == 4
    with pytest.raises(InputError, match="batch_size"):
        mmaa(model, x, y, ApgdSettings(eps=0.05, n_iter=1, n_target_classes=0), batch_size=0, progress=False)
    with pytest.raises(InputError):
        mmaa(model, x, y[:3], ApgdSettings(eps=0.05, n_iter=1, n_target_classes=0), progress=False)


K = 10


class Constant(nn.Module):
    """Predicts class 0 for images whose mean is above 0.5, else class 1."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wrong = (x.flatten(1).mean(dim=1) > 0.5).float()
        out = torch.zeros(len(x), K)
        out[:, 0] = wrong * 5
        out[:, 1] = 1.0
        return out


class Teleport(Attack):
    """An 'attack' that returns the all-ones image: far outside any small ball."""

    def components(self, model: nn.Module, n_classes: int) -> list[Component]:
        return [Component("teleport", lambda x, y: torch.ones_like(x))]


@pytest.mark.parametrize("norm", ["Linf", "L2"])
def test_points_outside_the_threat_model_never_count_as_broken(norm):
    x = torch.full((6, 1, 4, 4), 0.2)
    y = torch.ones(6, dtype=torch.long)
    model = Constant()
    assert (model(torch.ones_like(x)).argmax(1) != y).all()  # the far point would fool the model
    eps = 0.5 if norm == "Linf" else 2.0  # Linf distance 0.8 > 0.5; L2 distance 3.2 > 2.0 (Linf 0.8 < 2.0)
    res = Teleport(eps=eps, norm=norm).run(model, x, y, progress=False)
    assert bool(res.robust_correct.all()) and res.components[0].newly_broken == 0
    inside = Teleport(eps=4.0, norm=norm).run(model, x, y, progress=False)  # now within the ball: broken
    assert not bool(inside.robust_correct.any())
