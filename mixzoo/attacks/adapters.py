"""Components that wrap an attack routine: our APGD-CE / APGD-T (:func:`_ours`), the installed AutoAttack's
components (:func:`_pyautoattack`, :func:`_standard_exact`) behind :class:`FiniteGuard`, and Square with per-example
randomness (:func:`_square_each`). The evaluations of :mod:`mixzoo.attacks.suites` assemble them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from mixzoo.attacks.apgd import ApgdSettings, apgd_ce, apgd_t
from mixzoo.attacks.base import Component
from mixzoo.attacks.square import SquareSettings, min_margin_square
from mixzoo.attacks.variants import with_gradient
from mixzoo.core.errors import NaNLogitsError


def _ours(kind: str, forward: Callable, opts: dict[str, Any], eps: float, norm: str, seed: int,
          n_targets: int, name: str | None = None) -> Component:
    """Our APGD-CE / APGD-T as a component named ``name`` (default ``kind``); given the examples' indices, its random
    starts are drawn per example (:func:`mixzoo.attacks.apgd.apgd_ce`)."""
    def fn(x: torch.Tensor, y: torch.Tensor, index: torch.Tensor | None = None) -> torch.Tensor:
        cfg = ApgdSettings(eps, norm, int(opts["n_iter"]), seed=seed, early_stop=True,
                           n_restarts=int(opts["n_restarts"]), n_target_classes=n_targets)
        if kind == "apgd-ce":
            rec = apgd_ce(forward, x, y, cfg, index=index)
        else:
            rec = apgd_t(forward, x, y, cfg, index=index, stack=None)
        rec.check_finite()
        comp.zero_grad.append(int(rec.zero_grad.sum()))
        return rec.x

    comp = Component(name or kind, fn, per_example=True)
    return comp


def _pyautoattack(kind: str, model: nn.Module, opts: dict[str, Any], eps: float, norm: str, seed: int,
                  n_targets: int, gradient: str | None, name: str | None = None) -> Component:
    """A component (named ``name``, default ``kind``) of the installed AutoAttack with the settings of its
    'standard' version, on the model's gradient variant ``gradient`` where it offers one."""
    from mixzoo.core.compat import import_autoattack

    aa = import_autoattack()
    n_iter, n_restarts = int(opts["n_iter"]), int(opts["n_restarts"])
    model = FiniteGuard(with_gradient(model, gradient), f"at points visited by {kind}")

    def fn(x: torch.Tensor, y: torch.Tensor, index: torch.Tensor | None = None) -> torch.Tensor:
        common = dict(eps=eps, norm=norm, seed=seed, verbose=False, device=x.device)
        apgd = dict(n_restarts=n_restarts, n_iter=n_iter, eot_iter=1, rho=0.75, **common)
        if kind == "apgd-ce":
            attack = aa.autopgd_base.APGDAttack(model, loss="ce", **apgd)
        elif kind == "apgd-t":
            attack = aa.autopgd_base.APGDAttack_targeted(model, n_target_classes=n_targets, **apgd)
        elif kind == "fab-t":
            attack = aa.fab_pt.FABAttack_PT(model, n_restarts=1, n_iter=n_iter, targeted=True,
                                            n_target_classes=n_targets, **common)
        else:
            attack = aa.square.SquareAttack(model, p_init=0.8, n_queries=int(opts["n_queries"]), n_restarts=1,
                                            resc_schedule=False, **common)
        model.reset()
        with torch.no_grad():
            adv = attack.perturb(x.clone(), y.clone())
        model.finish()  # NaN outputs since the guard's last periodic check
        return adv

    # FAB-T with one restart draws no random number: its run on an example is the same in any batch, so it counts
    # as per-example; the index is not needed
    return Component(name or kind, fn, gradient_based=kind != "square", per_example=kind == "fab-t")


def _square_each(model: nn.Module, opts: dict[str, Any], eps: float, norm: str, seed: int) -> Component:
    """Square on the model's output with every random draw per example (:func:`mixzoo.attacks.square.
    min_margin_square` with ``loss="logit"``, AutoAttack's margin loss, ``p_init`` 0.8, ``n_queries`` of the
    options), replacing AutoAttack's batch-seeded Square when the examples' indices are known."""
    def fn(x: torch.Tensor, y: torch.Tensor, index: torch.Tensor | None = None) -> torch.Tensor:
        return min_margin_square(model, x, y,
                                 SquareSettings(eps=eps, norm=norm, n_queries=int(opts["n_queries"]), p_init=0.8,
                                                seed=seed, loss="logit"),
                                 layer_norm=False, batch_size=len(x), progress=False, index=index).adv_images

    return Component("square", fn, gradient_based=False, per_example=True, forward_only=True)


class FiniteGuard(nn.Module):
    """``model`` that raises :class:`~mixzoo.core.errors.NaNLogitsError` soon after its first NaN output, so that an
    attack we do not control (the installed AutoAttack's components) stops within a few steps of the first bad one
    instead of running its whole budget. The largest number of NaN rows in one output is kept on the device and read
    (one host synchronisation) after every call on the CPU (:attr:`EAGER_ON_CPU`), else every :attr:`CHECK_EVERY`
    calls and by :meth:`finish`, which the caller runs when the attack returns. Outcomes do not depend on when the
    check runs: it only decides whether the run is refused."""

    CHECK_EVERY = 32
    EAGER_ON_CPU = True

    def __init__(self, model: nn.Module, where: str):
        super().__init__()
        self.model, self.where = model, where
        self._nan: torch.Tensor | None = None
        self._calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.model(x)
        if isinstance(out, torch.Tensor):
            rows = torch.isnan(out.detach()).flatten(1).any(dim=1).sum()
            self._nan = rows if self._nan is None else torch.maximum(self._nan, rows)
            self._calls += 1
            if (self.EAGER_ON_CPU and out.device.type == "cpu") or self._calls % self.CHECK_EVERY == 0:
                self._check()
        return out

    def _check(self) -> None:
        if self._nan is not None and bool(self._nan > 0):
            count = int(self._nan)
            self.reset()
            raise NaNLogitsError(count, self.where)

    def reset(self) -> None:
        """Forget the outputs seen so far (a new attack run)."""
        self._nan, self._calls = None, 0

    def finish(self) -> None:
        """Raise the NaN-logits error if an output since the last reset had NaN rows; then reset."""
        try:
            self._check()
        finally:
            self.reset()


def _standard_exact(model: nn.Module, opts: dict[str, Any], eps: float, norm: str, seed: int,
                    n_targets: int) -> Component:
    """``autoattack-standard``: the installed AutoAttack's whole standard evaluation (APGD-CE, APGD-T, FAB-T,
    Square, chained as AutoAttack chains them) on the model's exact output, run afresh on every clean-correct
    example of the batch (``scope="clean"``) with the evaluation's seed: what a user who runs
    ``AutoAttack(model, version="standard", seed=seed).run_standard_evaluation`` on the same batch finds, example
    by example. The options (``n_iter``, ``n_restarts``, ``n_target_classes``, ``n_queries``) are the standard
    version's by default."""
    from mixzoo.core.compat import import_autoattack

    aa = import_autoattack()
    model = with_gradient(model, "exact")

    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        attack = aa.AutoAttack(model, norm=norm, eps=eps, seed=seed, version="standard", device=x.device)
        attack.verbose = False
        n_iter, n_restarts = int(opts["n_iter"]), int(opts["n_restarts"])
        for part in (attack.apgd, attack.apgd_targeted, attack.fab):
            part.n_iter, part.n_restarts = n_iter, n_restarts
        attack.apgd_targeted.n_target_classes = attack.fab.n_target_classes = n_targets
        attack.fab.n_restarts = 1  # AutoAttack runs FAB-T with one restart whatever it was given
        attack.square.n_queries = int(opts["n_queries"])
        if not n_targets:
            attack.attacks_to_run = [k for k in attack.attacks_to_run if k not in ("apgd-t", "fab-t")]
        with torch.no_grad():
            adv, _ = attack.run_standard_evaluation(x.clone(), y.clone(), batch_size=len(x))
        return adv

    return Component("autoattack-standard", fn, scope="clean")

