"""Reference runs of the installed AutoAttack (pyautoattack) and a model that turns NaN off the digits grid, shared
by the attack tests."""

from __future__ import annotations

import torch
from torch import nn

from mixzoo.attacks.margins import layer_norm
from mixzoo.core.compat import import_autoattack

N_ITER = 30


class LN(nn.Module):
    """h^LN as a plain single-output model, for AutoAttack."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x):
        return layer_norm(self.model(x))


def run_autoattack_apgd(model, x, y, eps, norm, n_iter=N_ITER, seed=0):
    """pyautoattack's APGD-CE + APGD-T (custom version) with the given iterations."""
    aa = import_autoattack()
    attack = aa.AutoAttack(model, eps=eps, norm=norm, seed=seed, version="custom", attacks=["apgd-ce", "apgd-t"])
    attack.apgd = aa.autopgd_base.APGDAttack(model, n_restarts=1, n_iter=n_iter, eps=eps, norm=norm, seed=seed)
    attack.apgd_targeted = aa.autopgd_base.APGDAttack_targeted(model, n_restarts=1, n_iter=n_iter, eps=eps, norm=norm,
                                                               seed=seed, n_target_classes=9)
    attack.verbose = False
    x_adv, _ = attack.run_standard_evaluation(x, y, batch_size=1000)
    return x_adv


class NaNOff(nn.Module):
    """Finite on the 1/16 grid of the digits images, NaN once an input leaves it by more than ``tol``."""

    def __init__(self, model, tol=0.01, clean_nan=0):
        super().__init__()
        self.model, self.tol, self.clean_nan = model, tol, clean_nan

    def forward(self, x):
        out = self.model(x)
        off = (x - torch.round(x * 16) / 16).flatten(1).abs().max(1).values > self.tol
        bad = off.clone()
        bad[: self.clean_nan] = True
        return torch.where(bad[:, None], torch.full_like(out, float("nan")), out)
