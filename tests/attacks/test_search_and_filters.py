"""Pieces whose bugs would shift reported numbers without failing loudly (found by mutation testing): the linear
baseline's alpha search, the threat-model filter of evaluations, PGD's projection and defaults, APGD-T's target
count and the eps sweep's miss counts."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import mixzoo.attacks.runner as runner_module
from mixzoo.attacks.apgd import effective_n_targets
from mixzoo.attacks.evaluation import Attack, Component
from mixzoo.attacks.pgd import pgd, project
from mixzoo.cache import Cache
from mixzoo.methods.linear import linear_alpha_grid, match_linear_alpha

K = 10


def robust_of(alpha: float) -> float:
    """A made-up linear mixture whose robust accuracy grows with alpha, in steps of 1/200."""
    return round(200 * max(0.0, (alpha - 0.5) * 1.4)) / 200


@pytest.mark.parametrize("target", [0.0, 0.301, 0.4475, 0.7, 1.0] + [robust_of(0.5 + k / 100) for k in range(1, 50, 3)])
def test_linear_alpha_search_finds_the_closest_grid_point(monkeypatch, tmp_path, target):
    seen: list[float] = []

    def fake_evaluate(model, images, labels, **kwargs):
        seen.append(model.alpha)
        r = robust_of(model.alpha)
        n = 200
        return {"robust_correct": [True] * round(r * n) + [False] * (n - round(r * n))}

    monkeypatch.setattr(runner_module, "evaluate", fake_evaluate)
    grid = linear_alpha_grid()
    alpha, tried = match_linear_alpha(nn.Identity(), nn.Identity(), torch.zeros(1), torch.zeros(1), target,
                                      attack="apgd", eps=0.1, norm="Linf", seed=0, batch_size=10,
                                      cache=Cache(tmp_path), key_parts={}, attack_options=None, progress=False)
    best = min(abs(robust_of(a) - target) for a in grid)
    assert abs(robust_of(alpha) - target) == pytest.approx(best)
    # among equally close alphas, the largest (the most robust mixture) is chosen
    assert alpha == max(a for a in grid if abs(abs(robust_of(a) - target) - best) < 1e-12
                        and abs(robust_of(a) - robust_of(alpha)) < 1e-12)
    assert len(set(seen)) <= 8  # a bisection over 51 points, not a scan
    assert [t["alpha"] for t in tried] == sorted(set(seen))


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


def test_l2_projection_keeps_points_inside_the_ball():
    g = torch.Generator().manual_seed(0)
    delta = torch.randn(5, 3, 4, 4, generator=g)
    norms = delta.flatten(1).norm(dim=1)
    eps = float(norms.median())
    out = project(delta, eps, "L2")
    inside = norms <= eps
    assert torch.equal(out[inside], delta[inside])  # not pushed out to the sphere
    assert torch.allclose(out[~inside].flatten(1).norm(dim=1), torch.full((int((~inside).sum()),), eps))


def test_pgd_default_step_is_two_and_a_half_eps_over_steps():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, K))
    x = torch.rand(4, 1, 4, 4, generator=torch.Generator().manual_seed(1))
    y = torch.arange(4)
    default = pgd(model, x, y, eps=0.1, steps=4, generator=torch.Generator().manual_seed(2))
    explicit = pgd(model, x, y, eps=0.1, steps=4, step_size=2.5 * 0.1 / 4, generator=torch.Generator().manual_seed(2))
    other = pgd(model, x, y, eps=0.1, steps=4, step_size=0.001, generator=torch.Generator().manual_seed(2))
    assert torch.equal(default, explicit) and not torch.equal(default, other)


def test_apgd_t_never_targets_the_true_class():
    assert effective_n_targets(10, 20) == 9 and effective_n_targets(10, 9) == 9 and effective_n_targets(10, 3) == 3
    assert effective_n_targets(4, 100) == 3


def test_eps_sweep_counts_each_miss_once():
    """A robust example the grey image would break is a grey miss, not also a monotonicity miss."""
    from mixzoo.sanity import _row

    class Grey(nn.Module):  # the grey image is classified 0
        def forward(self, x):
            out = torch.zeros(len(x), K)
            out[:, 0] = 1.0
            return out

    images = torch.stack([torch.full((1, 2, 2), v) for v in (0.5, 0.45, 0.0, 1.0)])  # grey distance .0,.05,.5,.5
    labels = torch.tensor([1, 1, 1, 1])
    radii = [0.1, 0.6]
    evs = [{"robust_correct": [True, True, True, False], "clean_correct": [True] * 4, "seconds": 1.0},
           {"robust_correct": [False, True, True, False], "clean_correct": [True] * 4, "seconds": 1.0}]
    row = _row("m", "rbc", Grey(), evs, radii, images, labels, "Linf")
    # eps 0.1: examples 0 and 1 are within reach of the grey image (class 0 != 1) yet reported robust -> 2 grey
    # misses; eps 0.6: example 1 and 2 are robust and grey-breakable -> 2 grey misses, and no monotone miss counted
    assert row.grey_misses == [2, 2] and row.monotone_misses == [0, 0]
