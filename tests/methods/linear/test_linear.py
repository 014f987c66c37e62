"""The linear baseline (mixzoo/methods/linear.py): the alpha search that matches a target robust accuracy."""

from __future__ import annotations

import pytest
import torch
from eval_requests import ask
from torch import nn

import mixzoo.attacks.runner as runner_module
from mixzoo.core.cache import Cache
from mixzoo.methods.linear import alpha_grid, match_linear_alpha


def robust_of(alpha: float) -> float:
    """A made-up linear mixture whose robust accuracy grows with alpha, in steps of 1/200."""
    return round(200 * max(0.0, (alpha - 0.5) * 1.4)) / 200


@pytest.mark.parametrize("target", [0.0, 0.301, 0.4475, 0.7, 1.0] + [robust_of(0.5 + k / 100) for k in range(1, 50, 3)])
def test_linear_alpha_search_finds_the_closest_grid_point(monkeypatch, tmp_path, target):
    seen: list[float] = []

    def fake_evaluate(model, images, labels, request):
        seen.append(model.alpha)
        r = robust_of(model.alpha)
        n = 200
        return {"robust_correct": [True] * round(r * n) + [False] * (n - round(r * n))}

    monkeypatch.setattr(runner_module, "evaluate", fake_evaluate)
    grid = alpha_grid()
    alpha, tried = match_linear_alpha(nn.Identity(), nn.Identity(), torch.zeros(1), torch.zeros(1), target,
                                      ask(attack="apgd", eps=0.1, norm="Linf", seed=0, batch_size=10,
                                          cache=Cache(tmp_path), progress=False))
    best = min(abs(robust_of(a) - target) for a in grid)
    assert abs(robust_of(alpha) - target) == pytest.approx(best)
    # among equally close alphas, the largest (the most robust mixture) is chosen
    assert alpha == max(a for a in grid if abs(abs(robust_of(a) - target) - best) < 1e-12
                        and abs(robust_of(a) - robust_of(alpha)) < 1e-12)
    assert len(set(seen)) <= 8  # a bisection over 51 points, not a scan
    assert [t["alpha"] for t in tried] == sorted(set(seen))


def test_old_style_match_calls_keep_working_with_a_deprecation_warning(monkeypatch, tmp_path):
    """Linear.match with evaluate's former keyword arguments (mixzoo 0.1's contract) still matches, the same
    alpha and the same requests as with an EvalRequest, and warns; both at once is a one-line error."""
    from mixzoo.core.errors import InputError
    from mixzoo.methods.linear import Linear

    asked = []

    def fake_evaluate(model, images, labels, request):
        asked.append(request)
        r = robust_of(model.alpha)
        return {"robust_correct": [True] * round(r * 200) + [False] * (200 - round(r * 200))}

    monkeypatch.setattr(runner_module, "evaluate", fake_evaluate)
    args = (nn.Identity(), nn.Identity(), torch.zeros(1), torch.zeros(1), 0.4)
    old = dict(attack="apgd", eps=0.1, norm="Linf", seed=3, batch_size=10, cache=Cache(tmp_path), key_parts={"k": 1},
               attack_options={"n_iter": 4}, progress=False, per_example_seeds=True)
    with pytest.warns(DeprecationWarning, match=r"Linear.match\(\.\.\., attack=\.\.\."):
        alpha_old, tried_old = Linear().match(*args, **old)
    old_requests, asked[:] = list(asked), []
    request = ask(**{k: v for k, v in old.items()})
    alpha_new, tried_new = Linear().match(*args, request)
    assert (alpha_old, tried_old) == (alpha_new, tried_new)
    assert [(r.record, r.key_parts, r.label) for r in old_requests] == [(r.record, r.key_parts, r.label)
                                                                        for r in asked]
    with pytest.raises(InputError, match="a request or keyword arguments, not both"):
        Linear().match(*args, request, attack="apgd")
