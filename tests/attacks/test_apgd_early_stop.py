"""APGD's early stop (an example leaves the run once a misclassified point is recorded for it) and APGD-T's stacked
runs (all targets through the model as one batch): same outcome per example as the plain sequential runs, with
fewer examples pushed through the model."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from digits_models import train_digits_mlp

from mixzoo.attacks.apgd import ApgdSettings, apgd_ce, apgd_t

EPS = 0.12


class Counting(torch.nn.Module):
    """``model`` that counts the rows it is given."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model, self.rows = model, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.rows += x.shape[0]
        return self.model(x)


@pytest.fixture(scope="module")
def digits():
    model, x, y = train_digits_mlp()
    return model, x[:120], y[:120]


def _same_outcome(a, b, model, y):
    assert torch.equal(a.misclassified, b.misclassified)
    robust = ~a.misclassified
    torch.testing.assert_close(a.key[robust], b.key[robust], rtol=1e-4, atol=1e-5)
    # every recorded break is a confirmed one: the model misclassifies the returned point
    for rec in (a, b):
        with torch.no_grad():
            wrong = model(rec.x).argmax(dim=1) != y
        assert torch.equal(wrong, rec.misclassified)


@pytest.mark.parametrize("norm", ["Linf", "L2"])
def test_early_stop_keeps_each_examples_outcome_and_skips_broken_examples(digits, norm):
    model, x, y = digits
    eps = EPS if norm == "Linf" else 1.0
    index = torch.arange(len(y))
    full, lean = Counting(model), Counting(model)
    plain = apgd_ce(full, x, y, ApgdSettings(eps=eps, norm=norm, n_iter=40), index=index)
    early = apgd_ce(lean, x, y, ApgdSettings(eps=eps, norm=norm, n_iter=40, early_stop=True), index=index)
    assert 0 < int(plain.misclassified.sum()) < len(y)  # the check has both kinds of examples
    _same_outcome(plain, early, model, y)
    assert lean.rows < 0.8 * full.rows, (lean.rows, full.rows)


def test_stacked_targets_give_the_sequential_runs_outcome(digits):
    model, x, y = digits
    index = torch.arange(len(y))
    cfg = ApgdSettings(eps=0.06, n_iter=30, n_target_classes=4, early_stop=True)
    seq = apgd_t(model, x, y, cfg, index=index, stack=False)
    counted = Counting(model)
    stacked = apgd_t(counted, x, y, cfg, index=index, stack=True)
    assert 0 < int(seq.misclassified.sum()) < len(y)
    _same_outcome(seq, stacked, model, y)
    # all copies of a broken example leave the stacked batch
    everything = Counting(model)
    apgd_t(everything, x, y, replace(cfg, early_stop=False), index=index, stack=True)
    assert counted.rows < 0.9 * everything.rows, (counted.rows, everything.rows)
    # and an example's outcome does not depend on the batch it is stacked in
    halves = [apgd_t(model, x[s], y[s], cfg, index=index[s], stack=True)
              for s in (slice(0, 37), slice(37, None))]
    assert torch.equal(torch.cat([h.misclassified for h in halves]), stacked.misclassified)


def test_early_stop_with_restarts_and_without_index(digits):
    model, x, y = digits
    plain = apgd_ce(model, x, y, ApgdSettings(eps=EPS, n_iter=20, n_restarts=2, seed=3))
    early = apgd_ce(model, x, y, ApgdSettings(eps=EPS, n_iter=20, n_restarts=2, seed=3, early_stop=True))
    _same_outcome(plain, early, model, y)
