"""The screening attack ``fast`` (mixzoo.attacks.screening): MALT's target ranking on a linear classifier whose
geometry is known, early stop that keeps only confirmed breaks and leaves every other trajectory unchanged,
outcomes independent of the batch size, the transfer gradient of a paired classifier, option errors, and the
screening note in results and reports."""

from __future__ import annotations

import pytest
import torch
from digits_models import train_digits_mlp
from eval_requests import ask
from torch import nn

from mixzoo.attacks.apgd import ApgdSettings, apgd_ce, apgd_t
from mixzoo.attacks.base import within_threat_model
from mixzoo.attacks.screening import (
    SCREENING_NOTE,
    EarlyStopForward,
    FastScreening,
    Shrink,
    early_stop_apgd,
    malt_scores,
    malt_targets,
)
from mixzoo.attacks.suites import APGDEnsemble
from mixzoo.core.errors import InputError

EPS = 0.2


class Linear(nn.Module):
    """z = W x + b on flattened 1x2x2 images."""

    def __init__(self, w: torch.Tensor, b: torch.Tensor):
        super().__init__()
        self.w, self.b = w, b

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1) @ self.w.T + self.b


def _geometry() -> tuple[Linear, torch.Tensor, torch.Tensor]:
    """At x = 0.5 everywhere: class 0 wins (logit 5); class 1 is second (4) but far (gap 1, ||w1 - w0||_1 = 0.4:
    l-inf distance 2.5); class 2 is third (2) but near (gap 3, ||w2 - w0||_1 = 20: distance 0.15 < EPS); class 3
    last (0, gap 5, ||w3 - w0||_1 = 4: distance 1.25)."""
    w = torch.zeros(4, 4)
    w[1] = 0.1
    w[2] = 5.0
    w[3] = torch.tensor([1.0, -1.0, 1.0, -1.0])
    z_half = w.sum(dim=1) * 0.5
    b = torch.tensor([5.0, 4.0, 2.0, 0.0]) - z_half
    x = torch.full((3, 1, 2, 2), 0.5)
    return Linear(w, b), x, torch.zeros(3, dtype=torch.long)


def test_malt_ranks_the_nearest_linear_boundary_not_the_second_logit():
    model, x, y = _geometry()
    with torch.no_grad():
        assert model(x)[0].tolist() == pytest.approx([5.0, 4.0, 2.0, 0.0])
    scores = malt_scores(model, x, y, "Linf")
    assert scores[0].tolist() == pytest.approx([float("inf"), 1 / 0.4, 3 / 20, 5 / 4])
    targets, runs = malt_targets(model, x, y, 3, "Linf")
    assert targets[0].tolist() == [2, 3, 1]
    assert runs[0].tolist() == [1, 2, 0]  # their ranks by logit: AutoAttack's APGD-T runs on these targets
    # L2: the dual norm is l2 (||w2 - w0||_2 = 10, ||w3 - w0||_2 = 2, ||w1 - w0||_2 = 0.2)
    assert malt_scores(model, x, y, "L2")[0].tolist() == pytest.approx([float("inf"), 5.0, 0.3, 2.5])


def test_malt_scores_only_the_top_candidates_of_many_classes():
    model, x, y = _geometry()
    scores = malt_scores(model, x, y, "Linf", max_candidates=2)  # classes 0, 1, 2 by logit: 3 is not scored
    assert scores[0, 3] == float("inf") and scores[0, 2] == pytest.approx(3 / 20)


def test_malt_target_breaks_where_the_top_logit_target_cannot():
    """One APGD-T target: MALT's (class 2, boundary 0.15 away) breaks every example at eps 0.2; AutoAttack's
    choice (class 1, 2.5 away) none."""
    model, x, y = _geometry()
    opts = dict(n_target_classes=1, components=["apgd-t"], n_iter=20)
    fast = FastScreening(EPS, **opts).run(model, x, y, progress=False, index=torch.arange(3))
    naive = APGDEnsemble(EPS, **opts).run(model, x, y, progress=False, index=torch.arange(3))
    assert fast.robust_accuracy == 0.0 and naive.robust_accuracy == 1.0
    with torch.no_grad():
        assert (model(fast.adv_images).argmax(dim=1) == 2).all()


@pytest.fixture(scope="module")
def digits():
    model, x, y = train_digits_mlp()
    return model, x[:60], y[:60]


@pytest.mark.parametrize("eps", [0.05, 0.15])
def test_early_stop_keeps_the_breaks_of_the_full_run_and_skips_broken_rows(digits, one_thread, eps):
    """Early stop changes no example's outcome (broken examples are frozen, the others follow the same
    trajectory as in a full APGD-CE with the same per-example draws, also after the run restarts on the few left
    at eps 0.15), every returned break is misclassified inside the eps-ball, and broken rows are no longer
    evaluated."""
    model, x, y = digits
    index = torch.arange(len(y))
    full = apgd_ce(model, x, y, ApgdSettings(eps=eps, n_iter=30), index=index)
    rows = []

    def counting(t: torch.Tensor) -> torch.Tensor:
        rows.append(len(t))
        return model(t)

    adv = early_stop_apgd(counting, x, y, eps=eps, norm="Linf", n_iter=30, seed=0, index=index)
    with torch.no_grad():
        broken = model(adv).argmax(dim=1) != y
    assert torch.equal(broken, full.misclassified)
    assert 0 < int(broken.sum()) < len(y)
    assert within_threat_model(adv, x, eps, "Linf").all()
    assert sum(rows[1:]) < 31 * len(y) and rows[-1] <= int((~broken).sum())
    if eps == 0.15:  # over 3/4 broken: the run restarted on the rest (more calls than one run's 31 + the clean one)
        assert int(broken.sum()) > 0.75 * len(y) and len(rows) > 32


def test_with_every_target_fast_breaks_exactly_what_adaptives_apgd_t_breaks(digits, one_thread):
    """Each APGD-T run of ``fast`` on target t is ``adaptive``'s run on t (same start, same steps), stopped early,
    so with all 9 targets the broken sets agree example by example, whatever MALT's order."""
    model, x, y = digits
    index = torch.arange(len(y))
    eps, n_iter = 0.05, 10
    fast = FastScreening(eps, n_iter=n_iter, n_target_classes=9, components=["apgd-t"]).run(
        model, x, y, progress=False, index=index)
    reference = apgd_t(model, x, y, ApgdSettings(eps=eps, n_iter=n_iter, n_target_classes=9), index=index).misclassified
    broken = fast.clean_correct & ~fast.robust_correct
    assert torch.equal(broken, reference & fast.clean_correct)
    assert 0 < int(broken.sum()) < int(fast.clean_correct.sum())


@pytest.mark.parametrize("norm", ["Linf", "L2"])
def test_each_target_run_starts_from_adaptives_draw_for_that_target(norm):
    """Row i's APGD-T start is the per-example draw of stream ``apgd/dlr-targeted/run{runs[i]}`` (the run that
    attacks that target in ``adaptive``), not of the column's position in MALT's order."""
    from mixzoo.attacks.apgd import random_start

    model, x, y = _geometry()
    x = x + torch.tensor([-0.1, 0.0, 0.1]).view(3, 1, 1, 1)
    index = torch.tensor([5, 6, 7])
    runs = torch.tensor([[1], [2], [0]])
    seen = []

    def recording(t: torch.Tensor) -> torch.Tensor:
        seen.append(t.detach().clone())
        return model(t)

    early_stop_apgd(recording, x, y, eps=0.1, norm=norm, n_iter=1, seed=3,
                    targets=(torch.tensor([[2], [3], [1]]), runs), index=index)
    start = seen[1]  # seen[0]: the clean record's pass
    for i, r in enumerate(runs[:, 0].tolist()):
        want = random_start(x[i:i + 1], 0.1, norm, draw=(3, f"apgd/dlr-targeted/run{r}", index[i:i + 1]))
        assert torch.equal(start[i:i + 1], want)
        other = random_start(x[i:i + 1], 0.1, norm, draw=(3, f"apgd/dlr-targeted/run{(r + 1) % 3}", index[i:i + 1]))
        assert not torch.equal(start[i:i + 1], other)


def test_early_stop_forward_freezes_a_broken_row():
    model, x, y = _geometry()
    wrapped = EarlyStopForward(model, torch.tensor([0, 0, 2]))  # the third row counts as broken at once
    judged, _ = wrapped(x)
    assert wrapped.active.tolist() == [True, True, False]
    moved = x + 0.1
    judged2, loss2 = wrapped(moved)
    assert torch.equal(judged2[2], judged[2]) and not torch.equal(judged2[0], judged[0])
    (g,) = torch.autograd.grad(loss2.sum(), moved, allow_unused=True) if loss2.requires_grad else (None,)
    assert g is None or g[2].abs().sum() == 0
    done = EarlyStopForward(model, torch.tensor([1, 1, 1]))  # every row misclassified at the first call
    done(x)
    with pytest.raises(Shrink):
        done(moved)


def test_outcome_per_example_does_not_depend_on_the_batch_size(digits, one_thread):
    model, x, y = digits
    index = torch.arange(100, 100 + len(y))
    runs = [FastScreening(0.08, n_iter=15, batch_size=bs).run(model, x, y, progress=False, index=index)
            for bs in (60, 7)]
    assert torch.equal(runs[0].robust_correct, runs[1].robust_correct)
    assert 0 < runs[0].robust_accuracy < runs[0].clean_accuracy
    broken = runs[0].clean_correct & ~runs[0].robust_correct
    assert torch.allclose(runs[0].adv_images[broken], runs[1].adv_images[broken], atol=1e-6)


class Paired(nn.Module):
    """A classifier whose own output has no gradient (detached) and whose surrogate is the linear model's: the
    transfer attack (loss and MALT's Jacobian from the surrogate, judged on the output) must still break it."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x).detach()

    def forward_pair(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.inner(x)
        return out.detach(), out


def test_paired_classifier_is_attacked_with_the_surrogate_gradient():
    model, x, y = _geometry()
    opts = dict(n_target_classes=1, components=["apgd-t"], n_iter=20)
    res = FastScreening(EPS, **opts).run(Paired(model), x, y, progress=False, index=torch.arange(3))
    assert res.robust_accuracy == 0.0


def test_results_and_reports_label_it_a_screening_attack(digits):
    from mixzoo.evaluation.report import screening_note

    model, x, y = digits
    res = FastScreening(0.05, n_iter=5).run(model, x[:10], y[:10], progress=False)
    assert res.warnings[0] == SCREENING_NOTE and "confirm with adaptive" in SCREENING_NOTE
    assert screening_note("fast") == SCREENING_NOTE
    assert screening_note("adaptive") is None and screening_note("no-such-attack") is None


@pytest.mark.parametrize(("options", "match"), [
    ({"n_restarts": 2}, "unknown option"),
    ({"n_iter": 0}, r"option n_iter \(-O n_iter\) of attack '[a-z-]+' must be at least 1"),
    ({"n_target_classes": -1}, r"option n_target_classes \(-O n_target_classes\) of attack 'fast' must be at least 0"),
    ({"batch_size": 0}, r"option batch_size \(-O batch_size\) of attack '[a-z-]+' must be at least 1"),
])
def test_bad_options_are_refused(options, match):
    with pytest.raises(InputError, match=match):
        FastScreening(EPS, **options)


def test_unknown_component_is_refused(digits):
    model, x, y = digits
    with pytest.raises(InputError, match="unknown component"):
        FastScreening(EPS, components=["square"]).run(model, x[:4], y[:4], progress=False)
    with pytest.raises(InputError, match="unknown norm"):
        malt_scores(model, x[:4], y[:4], "L1")


def _report(attack: str):
    from mixzoo.core.card import MixCard
    from mixzoo.evaluation.bench import ModelResult, Report

    card = MixCard("linear", {"alpha": 0.7, "fit": "given"})
    rows = [ModelResult(name=f"{kind}-model", kind=kind, clean_accuracy=0.9, robust_accuracy=r, attack=attack,
                        epsilon=0.2, norm="Linf", n=60, seconds=1.0, alpha=a, device="cpu",
                        method=None if a is None else "linear", card=None if a is None else card.to_dict())
            for kind, r, a in (("abc", 0.0, None), ("rbc", 0.5, None), ("linear", 0.4, 0.7))]
    return Report(models=rows, card=card, cards=[card],
                  dataset={"name": "digits", "split": "evaluation", "n": 60, "fingerprint": "f" * 16},
                  settings={"attack": attack, "norm": "Linf", "eps": 0.2, "seed": 0, "device": "cpu", "seconds": 3.0})


def test_markdown_and_terminal_reports_name_a_screening_attack_as_such():
    from rich.console import Console

    from mixzoo.evaluation.report import markdown, print_report

    text = markdown(_report("fast"))
    attack_line = next(line for line in text.splitlines() if line.startswith("Attack: `fast`"))
    assert SCREENING_NOTE in text.split(attack_line, 1)[1].split("|", 1)[0]  # right below the attack's name
    assert "screening attack" not in markdown(_report("adaptive"))
    console = Console(record=True, width=200)
    print_report(_report("fast"), to=console)
    assert "not a reported robustness figure" in console.export_text()


def test_registered_as_fast_and_run_by_the_bench_runner_with_the_note(digits, tmp_path):
    from mixzoo.attacks.runner import evaluate
    from mixzoo.core.cache import Cache
    from mixzoo.core.plugins import lookup

    assert lookup("attack", "fast") is FastScreening
    model, x, y = digits
    ev = evaluate(model, x[:20], y[:20], ask(attack="fast", eps=0.05, norm="Linf", seed=0, batch_size=8,
                                             cache=Cache(tmp_path), key_parts={"model": "digits-mlp"}, label="mlp",
                                             attack_options={"n_iter": 5}, progress=False))
    assert any(w.startswith(SCREENING_NOTE) for w in ev["warnings"])
    assert [c["name"] for c in ev["components"]] == ["apgd-ce", "apgd-t"]
