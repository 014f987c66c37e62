"""The evaluations registered through the attack hook: pgd, apgd, autoattack, adaptive (paper Sec. 5, App. B.2)."""

from __future__ import annotations

import pytest
import torch
from autoattack_reference import NaNOff, run_autoattack_apgd
from digits_models import train_digits_mlp
from torch import nn

from mixzoo.attacks import AdaptiveAutoAttack, APGDEnsemble, AutoAttackEval, EvalResult, PGDAttack
from mixzoo.errors import InputError, UnknownNameError
from mixzoo.plugins import lookup

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
    ``gradient = "bypass"`` routes the true output's gradient through the auxiliary one (App. B.2.2)."""

    def __init__(self, model, aux_sign: float = 1.0):
        super().__init__()
        self.model, self.gradient, self.modes_seen, self.aux_sign = model, "exact", set(), aux_sign

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
    from mixzoo.mixing import MixedClassifier

    abc, x, y = digits
    rbc = train_digits_mlp(seed=1)[0]
    mix = MixedClassifier(abc, rbc, s=2.0, p=2.0, c=0.0, alpha=0.7, temperature=0.0)
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


def test_mixed_classifier_is_a_drop_in_model_for_robustbench_benchmark(digits, monkeypatch):
    """RobustBench's ``benchmark()`` (clean accuracy, then standard AutoAttack) runs on a MixedClassifier in bypass
    mode. Only its data loader is replaced: CIFAR-10 cannot be downloaded here, so it gets digits images."""
    from mixzoo.compat import import_robustbench
    from mixzoo.mixing import MixedClassifier

    import_robustbench()
    import robustbench.eval as rb_eval

    abc, x, y = digits
    x, y = x[:24], y[:24]
    mix = MixedClassifier(abc, train_digits_mlp(seed=1)[0], s=2.0, p=2.0, c=0.0, alpha=0.7, gradient="bypass")
    monkeypatch.setattr(rb_eval, "load_clean_dataset", lambda *args, **kwargs: (x, y))
    clean, robust = rb_eval.benchmark(mix, n_examples=len(y), dataset="cifar10", threat_model="Linf", eps=0.1,
                                      batch_size=len(y))
    with torch.no_grad():
        expected = float((mix(x).argmax(1) == y).float().mean())
    assert clean == pytest.approx(expected)
    assert 0.0 <= robust < clean


def test_adaptive_strong_adds_gradient_attacks_and_never_reports_more_robustness(digits):
    """``adaptive-strong`` = the adaptive attack's components, then exact-, bypass- and re-seeded APGD on what is
    still robust (before FAB-T / Square): its robust set is a subset of ``adaptive``'s with the same seed."""
    from mixzoo.attacks import AdaptiveStrong
    from mixzoo.mixing import MixedClassifier

    abc, x, y = digits
    rbc = train_digits_mlp(seed=1)[0]
    mix = MixedClassifier(abc, rbc, s=2.0, p=2.0, c=0.0, alpha=0.7, temperature=0.0)
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
    from mixzoo.attacks.evaluation import AdaptiveAPGD, PGDAttack

    with pytest.raises(InputError, match="unknown option.*n_iters.*did you mean n_iter\\?"):
        PGDAttack.check_options({"n_iters": 3})
    with pytest.raises(InputError, match="must be a number, got 'many'"):
        AdaptiveAPGD.check_options({"n_iter": "many"})
    with pytest.raises(InputError, match="must be a number"):
        AdaptiveAPGD.check_options({"n_iter": True})
    with pytest.raises(InputError, match="n_iter must be at least 1"):
        AdaptiveAPGD.check_options({"n_iter": 0})
    merged = AdaptiveAPGD.check_options({"components": "apgd-ce", "n_iter": 7})
    assert merged["components"] == ["apgd-ce"] and merged["n_iter"] == 7
    assert merged["n_target_classes"] == AdaptiveAPGD.defaults["n_target_classes"]
    assert PGDAttack(eps=0.1, n_iter=3).options["n_iter"] == 3


def test_adaptive_strong_breaks_every_example_standard_autoattack_breaks(digits):
    """Issue 30: standard AutoAttack (pyautoattack, run directly on the exact mixed classifier, same images and
    seed) must break nothing that ``adaptive-strong`` reports robust. With mixzoo's earlier layer norm AutoAttack's
    own exact-gradient APGD broke one example (index 66) here that every other component missed; with the authors'
    layer norm (issue 25) the other components break it too, so the component's own count may be 0 and the test
    checks the containment itself. Square gets 100 queries on both sides, and the bypass FAB-T and Square components
    of ``adaptive`` are left out, for time."""
    from mixzoo.compat import import_autoattack
    from mixzoo.mixing import MixedClassifier

    aa = import_autoattack()
    abc, x, y = digits
    mix = MixedClassifier(abc, train_digits_mlp(seed=1)[0], s=2.0, p=2.0, c=0.0, alpha=0.7, temperature=0.0)
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
