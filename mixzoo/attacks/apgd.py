"""APGD (Croce & Hein 2020) with a pluggable loss and per-iteration margin tracking (Bai et al. 2024a, App. B.1, B.2.1).

One core, :func:`apgd_run`, reproduces ``pyautoattack.autopgd_base.APGDAttack.attack_single_run`` for L-inf and L2:
random start on the eps-sphere, step size 2 * eps halved at the checkpoints p_j (first after 22% of the iterations,
then every max(k - 3%, 6%) iterations) when the loss oscillated (rho = 0.75) or stalled, restart from the best-loss
point, momentum 0.75 (none on the first step). Random starts are drawn on the CPU from a seeded
:class:`torch.Generator` exactly as AutoAttack draws them from the global generator after ``manual_seed(seed)``, so
with the same seed our runs follow AutoAttack's trajectories (and are identical on CPU and GPU draws).

The model is any callable returning logits, or a pair ``(judged, loss)`` of logits (e.g. ``forward_pair`` of a
:class:`mixzoo.methods.mixednuts.mixing.MixedClassifier`: the true MixedNUTS output is judged, the differentiable
auxiliary mixture of Eq. 8 gives the loss and gradients, App. B.2.1). Every forward pass the attack already makes
(including the starting point) offers its judged logits to a :class:`~mixzoo.attacks.margins.MarginRecord`; no pass
is added for tracking.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace

import torch

from mixzoo.attacks.arguments import check_attack_settings, settings_from
from mixzoo.attacks.ball import NORMS, normalize, project_step, random_start, start_noise, view  # noqa: F401 - re-exported
from mixzoo.attacks.losses import LOSSES, Forward, LossFn, ce_loss, dlr_targeted_loss, pair  # noqa: F401 - re-exported
from mixzoo.attacks.margins import MarginFn, MarginRecord, signed_margin
from mixzoo.core.errors import InputError

OnIter = Callable[[int], None]
_EXTRA_SEED_OFFSET = 0x5EED_0FF5E7  # generator for examples AutoAttack would not attack (MMAA only)
DROP_EVERY = 4  # with early_stop: iterations between checks for misclassified examples (each check syncs once)


def _loss_and_grad(forward: Forward, x_adv: torch.Tensor, labels: torch.Tensor, loss_fn: LossFn,
                   target: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One forward and one backward pass: judged logits, per-example loss, input gradient (zeros if none flows)."""
    x_adv = x_adv.detach().requires_grad_(True)
    with torch.enable_grad():
        judged, loss_logits = pair(forward(x_adv))
        loss = loss_fn(loss_logits, labels, target)
    grad = None
    if loss.requires_grad:
        (grad,) = torch.autograd.grad(loss.sum(), x_adv, allow_unused=True)
    if grad is None:
        grad = torch.zeros_like(x_adv)
    return judged.detach(), loss.detach(), grad.detach()


@dataclass(frozen=True)
class ApgdSettings:
    """APGD's settings (Croce & Hein 2020, AutoAttack's APGD-CE and APGD-T), shared by every run of one attack;
    ``loss`` is :func:`apgd_run`'s (``ce``, ``dlr``, ``dlr-targeted`` or a loss function; :func:`apgd_ce` and
    :func:`apgd_t` use their own), ``n_restarts`` runs per target for APGD-T, ``rho`` the step-size checkpoint
    fraction, ``on_iter(n_examples)`` called after each iteration."""

    eps: float
    norm: str = "Linf"
    n_iter: int = 100
    loss: str | LossFn = "ce"
    seed: int = 0
    rho: float = 0.75
    on_iter: OnIter | None = None
    early_stop: bool = False
    n_restarts: int = 1
    n_target_classes: int = 9

    @property
    def loss_name(self) -> str:
        """The loss's name in the per-example random streams (``custom`` for a loss function)."""
        return self.loss if isinstance(self.loss, str) else "custom"


def apgd_run(forward: Forward, x: torch.Tensor, labels: torch.Tensor, record: MarginRecord,
             settings: ApgdSettings | None = None, *, eps: float | None = None, norm: str = ApgdSettings.norm,
             n_iter: int = ApgdSettings.n_iter, loss: str | LossFn = ApgdSettings.loss, rho: float = ApgdSettings.rho,
             on_iter: OnIter | None = None, early_stop: bool = ApgdSettings.early_stop,
             target: torch.Tensor | None = None, generator: torch.Generator | None = None,
             draw: tuple[int, str, torch.Tensor] | None = None, noise: torch.Tensor | None = None,
             group: torch.Tensor | None = None) -> torch.Tensor:
    """One APGD run from a random start (``attack_single_run`` of AutoAttack, L-inf / L2), its options as keywords
    or as ``settings`` (:class:`ApgdSettings`, whose seed, n_restarts and n_target_classes are the callers').

    Offers the judged logits of all ``n_iter + 1`` visited points to ``record`` (same examples as ``x``) and returns
    the per-example best loss. The start comes from ``generator``, the per-example ``draw`` or ``noise``
    (:func:`random_start`). ``early_stop``: an example leaves the active batch once the record holds a
    misclassified point for it (a confirmed break), checked every :data:`DROP_EVERY` iterations and at the step-size
    checkpoints (each check synchronises with the device); the other examples' trajectories are unchanged.
    ``group`` (with ``early_stop``): rows that are copies of one example (its runs towards several targets,
    stacked) share an id in ``0..n_groups-1`` and leave together. Without ``early_stop`` every example runs all
    iterations (MMAA needs every visited margin)."""
    cfg = settings_from(ApgdSettings, settings, locals())
    eps, norm, n_iter, rho, on_iter, early_stop = cfg.eps, cfg.norm, cfg.n_iter, cfg.rho, cfg.on_iter, cfg.early_stop
    loss_fn = LOSSES[cfg.loss] if isinstance(cfg.loss, str) else cfg.loss
    n = x.shape[0]
    x = x.detach()
    n_iter_2, n_iter_min, size_decr = max(int(0.22 * n_iter), 1), max(int(0.06 * n_iter), 1), max(int(0.03 * n_iter), 1)

    x_adv = random_start(x, eps, norm, generator, draw=draw, noise=noise)
    judged, loss_indiv, grad = _loss_and_grad(forward, x_adv, labels, loss_fn, target)
    record.update(x_adv, judged)
    record.check_finite()  # NaN at a visited point: stop now, not after the whole attack
    record.zero_grad |= grad.flatten(1).abs().sum(dim=1) == 0
    s = _Trajectory(x, labels, target, x_adv, x_adv.clone(), x_adv.clone(), grad, grad.clone(), loss_indiv.clone(),
                    view(torch.full((n,), 2.0 * eps, device=x.device, dtype=x.dtype), x.ndim),
                    torch.zeros(n_iter, n, device=x.device, dtype=loss_indiv.dtype), loss_indiv.clone(),
                    torch.ones_like(loss_indiv))
    k, counter3 = n_iter_2, 0
    # the active rows (positions in x) and their part of the record; full size until an example is dropped
    active, rec, loss_out = None, record, s.loss_best
    if early_stop:
        loss_out = s.loss_best.clone()
        n_groups = int(group.max()) + 1 if group is not None and n else 0

    for i in range(n_iter):
        with torch.no_grad():
            prev_step = s.x_adv - s.x_adv_old
            s.x_adv_old = s.x_adv.clone()
            a = 0.75 if i > 0 else 1.0
            direction = s.grad.sign() if norm == "Linf" else normalize(s.grad, "L2")
            s.x_adv = project_step(s.x, s.x_adv, s.x_adv + s.step_size * direction, eps, norm, a, prev_step)

        judged, loss_indiv, s.grad = _loss_and_grad(forward, s.x_adv, s.labels, loss_fn, s.target)
        rec.update(s.x_adv, judged)

        with torch.no_grad():
            s.loss_steps[i] = loss_indiv
            better = loss_indiv > s.loss_best
            s.x_best = torch.where(view(better, x.ndim), s.x_adv, s.x_best)  # no host synchronisation per step
            s.grad_best = torch.where(view(better, x.ndim), s.grad, s.grad_best)
            s.loss_best = torch.where(better, loss_indiv, s.loss_best)
            counter3 += 1
            checkpoint = counter3 == k
            if checkpoint:
                s.reduce_step(i, k, rho)
                k = max(k - size_decr, n_iter_min)
                counter3 = 0
            if checkpoint or (i + 1) % DROP_EVERY == 0 or i == n_iter - 1:
                rec.check_finite()  # one synchronisation every few steps, not per step
        if on_iter is not None:
            on_iter(n)
        if early_stop and i < n_iter - 1 and (checkpoint or (i + 1) % DROP_EVERY == 0):
            active, rec = _drop_broken(s, record, rec, active, group, n_groups, loss_out)
            if active is not None and not active.numel():
                break
    if active is not None:
        if active.numel():
            loss_out[active] = s.loss_best
            record.merge(active, rec)
        return loss_out
    return s.loss_best


@dataclass
class _Trajectory:
    """One APGD run's per-example state (:func:`apgd_run`): every tensor has the active examples along its first
    dimension, ``loss_steps`` (``[n_iter, examples]``) along its second."""

    x: torch.Tensor
    labels: torch.Tensor
    target: torch.Tensor | None
    x_adv: torch.Tensor
    x_adv_old: torch.Tensor
    x_best: torch.Tensor
    grad: torch.Tensor
    grad_best: torch.Tensor
    loss_best: torch.Tensor
    step_size: torch.Tensor
    loss_steps: torch.Tensor
    loss_best_last_check: torch.Tensor
    reduced_last_check: torch.Tensor

    def reduce_step(self, i: int, k: int, rho: float) -> None:
        """AutoAttack's checkpoint at iteration ``i``: halve the step size of the examples whose loss oscillated
        over the last ``k`` steps or did not improve since the last checkpoint, and restart them at their best
        point. Index ``i - k`` wraps to the (still zero) last row exactly as AutoAttack's check_oscillation does at
        the first checkpoint; ``torch.where``, not boolean indexing behind ``any()``: no host synchronisation."""
        n_iter = self.loss_steps.shape[0]
        js = torch.arange(i, i - k, -1, device=self.x.device)
        increases = (self.loss_steps[js % n_iter] > self.loss_steps[(js - 1) % n_iter]).sum(dim=0)
        fl_osc = (increases <= k * rho).to(self.loss_best.dtype)
        fl_no_impr = (1.0 - self.reduced_last_check) * (self.loss_best_last_check >= self.loss_best).to(
            self.loss_best.dtype)
        fl_osc = torch.max(fl_osc, fl_no_impr)
        self.reduced_last_check = fl_osc.clone()
        self.loss_best_last_check = self.loss_best.clone()
        reduce = view(fl_osc > 0, self.x.ndim)
        self.step_size = torch.where(reduce, self.step_size / 2.0, self.step_size)
        self.x_adv = torch.where(reduce, self.x_best, self.x_adv)
        self.grad = torch.where(reduce, self.grad_best, self.grad)

    def keep(self, rows: torch.Tensor) -> None:
        """Keep only the examples where the boolean mask ``rows`` is True."""
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None:
                setattr(self, f.name, value[:, rows] if f.name == "loss_steps" else value[rows])


def _drop_broken(s: _Trajectory, record: MarginRecord, rec: MarginRecord, active: torch.Tensor | None,
                 group: torch.Tensor | None, n_groups: int,
                 loss_out: torch.Tensor) -> tuple[torch.Tensor | None, MarginRecord]:
    """``early_stop`` of :func:`apgd_run`: the examples ``rec`` (the active rows' part of ``record``) holds a
    misclassified point for leave the trajectory ``s`` (with ``group``: every copy of an example once one copy is
    misclassified); their best loss goes to ``loss_out`` and their record part back into ``record``. Returns the
    new active rows (positions in ``record``; None while nothing was dropped, empty when all left) and their part
    of the record."""
    with torch.no_grad():
        done = rec.misclassified
        if group is not None:  # all copies of an example leave once one of them is misclassified
            rows = group if active is None else group[active]
            hit = torch.zeros(n_groups, dtype=torch.bool, device=done.device)
            hit.index_fill_(0, rows[done], True)
            done = hit[rows]
        keep = ~done
        n_keep = int(keep.sum())
    if n_keep == keep.shape[0]:
        return active, rec
    pos = torch.arange(loss_out.shape[0], device=s.x.device) if active is None else active
    loss_out[pos] = s.loss_best
    if active is not None:
        record.merge(active, rec)
    active = pos[keep] if n_keep else pos[:0]
    if n_keep:
        s.keep(keep)
    return active, record.subset(active)


def clean_record(model: Forward, images: torch.Tensor, labels: torch.Tensor,
                 margin_fn: MarginFn = signed_margin) -> MarginRecord:
    """A record starting at the clean images (one forward pass, no gradient)."""
    with torch.no_grad():
        judged, _ = pair(model(images))
    return MarginRecord.start(images, judged, labels, margin_fn)


def _groups(record: MarginRecord, attack_all: bool) -> list[tuple[torch.Tensor, bool]]:
    """Index groups to attack: the not-yet-misclassified examples (AutoAttack's set, main generator) and, if
    ``attack_all``, the misclassified ones as a separate batch (extra generator), so that the first group's runs are
    exactly AutoAttack's."""
    broken = record.misclassified
    groups = [(torch.nonzero(~broken).squeeze(1), True)]
    if attack_all:
        groups.append((torch.nonzero(broken).squeeze(1), False))
    return [(idx, main) for idx, main in groups if idx.numel()]


def stack_runs_default(device: torch.device | str) -> bool:
    """Whether APGD-T's runs (targets x restarts) go through the model as one stacked batch by default: on a GPU,
    where the small passes leave the device idle. On the CPU the sequential runs skip an example once one target
    broke it: stacking was 3x faster for the digits MLP, 1.35x *slower* for the Fashion-MNIST CNN
    (``benchmarks/apgd_stack_speed_digits_cpu.json``, ``benchmarks/apgd_stack_speed_fmnist60_cpu.json``)."""
    return torch.device(device).type == "cuda"


def _runs(model: Forward, images: torch.Tensor, labels: torch.Tensor, record: MarginRecord, cfg: ApgdSettings, *,
          plan: list[torch.Tensor | None], attack_all: bool, index: torch.Tensor | None = None,
          stack: bool = False, stack_rows: int | None = None) -> MarginRecord:
    """Run APGD once per entry of ``plan`` (targets, or None for untargeted), each on the current groups.

    With ``index`` (each example's index in its whole data set) every run's random start is drawn per example from
    (seed, loss, run number, index) instead of from the batch's generators, so an example's trajectory does not
    depend on the batch it is in. ``stack`` (with ``index``, without ``attack_all``): the runs go through the model
    together, as one batch of ``[runs x examples]`` rows, each with its own run's start; an example counts as broken
    when any of its runs breaks it, so the outcome is the sequential runs'. ``stack_rows``: at most that many rows
    per pass, the runs in chunks (at least one run each) on the examples no earlier chunk broke; the starts do not
    depend on the chunking."""
    if stack and index is not None and not attack_all and len(plan) > 1:
        per = len(plan)
        if stack_rows is not None:
            m = int((~record.misclassified).sum())
            per = max(1, min(len(plan), int(stack_rows) // max(m, 1)))
        for first in range(0, len(plan), per):
            _stacked_runs(model, images, labels, record, cfg, plan=plan[first:first + per], index=index,
                          first_run=first)
        return record
    main_gen = torch.Generator().manual_seed(cfg.seed)
    extra_gen = torch.Generator().manual_seed((cfg.seed + _EXTRA_SEED_OFFSET) % 2**63)
    for run, target in enumerate(plan):
        for idx, main in _groups(record, attack_all):
            part = record.subset(idx)
            draw = None if index is None else (cfg.seed, f"apgd/{cfg.loss_name}/run{run}",
                                               index[idx.to(index.device)])
            apgd_run(model, images[idx], labels[idx], part, cfg if main else replace(cfg, early_stop=False),
                     target=None if target is None else target[idx], generator=main_gen if main else extra_gen,
                     draw=draw)
            record.merge(idx, part)
    return record


def _stacked_runs(model: Forward, images: torch.Tensor, labels: torch.Tensor, record: MarginRecord, cfg: ApgdSettings,
                  *, plan: list[torch.Tensor | None], index: torch.Tensor, first_run: int = 0) -> MarginRecord:
    """:func:`_runs` with the runs stacked along the batch (see there); per example the record keeps the best
    point over all its runs. ``plan[j]`` is run ``first_run + j`` (its random starts' stream)."""
    idx = torch.nonzero(~record.misclassified).squeeze(1)
    if not idx.numel():
        return record
    m, r = idx.numel(), len(plan)
    where = index[idx.to(index.device)]
    noise = torch.cat([start_noise((cfg.seed, f"apgd/{cfg.loss_name}/run{first_run + run}", where), cfg.norm,
                                   images.shape[1:]) for run in range(r)])
    rows = idx.repeat(r)
    target = None if plan[0] is None else torch.cat([t[idx] for t in plan])
    part = record.subset(rows)
    group = torch.arange(m, device=idx.device).repeat(r)
    apgd_run(model, images[rows], labels[rows], part, cfg, target=target, noise=noise, group=group)
    best = part.key.view(r, m).argmin(dim=0)  # per example, its best run
    record.merge(idx, part.subset(best * m + torch.arange(m, device=best.device)))
    return record


def apgd_ce(model: Forward, images: torch.Tensor, labels: torch.Tensor, settings: ApgdSettings | None = None, *,
            eps: float | None = None, norm: str = ApgdSettings.norm, n_iter: int = ApgdSettings.n_iter,
            n_restarts: int = ApgdSettings.n_restarts, seed: int = ApgdSettings.seed, rho: float = ApgdSettings.rho,
            on_iter: OnIter | None = None, early_stop: bool = ApgdSettings.early_stop,
            record: MarginRecord | None = None, attack_all: bool = False, margin_fn: MarginFn = signed_margin,
            index: torch.Tensor | None = None) -> MarginRecord:
    """Untargeted APGD on the cross-entropy (AutoAttack's APGD-CE) with margin tracking, ``n_restarts`` runs, the
    options as keywords or as ``settings`` (:class:`ApgdSettings`, whose ``loss`` is not read).

    ``model(x)`` returns logits or ``(judged, loss)`` logits. With ``attack_all=False`` (AutoAttack) each restart
    attacks only examples not yet misclassified; with ``attack_all=True`` (MMAA) every example is attacked in every
    restart, the misclassified ones in a separate batch with their own random stream (and without ``early_stop``).
    Returns the (updated) record: per example the visited point of lowest selection key. ``index``: the examples'
    indices in their data set, for per-example random starts (:func:`_runs`).
    """
    cfg = settings_from(ApgdSettings, settings, locals())
    check_attack_settings(cfg.eps, cfg.norm, cfg.n_iter, cfg.n_restarts)
    record = clean_record(model, images, labels, margin_fn) if record is None else record
    return _runs(model, images, labels, record, replace(cfg, loss="ce"), plan=[None] * cfg.n_restarts,
                 attack_all=attack_all, index=index)


def target_classes(loss_logits: torch.Tensor, labels: torch.Tensor, n_target_classes: int) -> torch.Tensor:
    """``[n, n_target_classes]`` target labels: the highest-scoring classes other than the true one, in order.

    For correctly classified examples this is AutoAttack's choice (2nd, 3rd, ... highest class); for misclassified
    ones (attacked only by MMAA) it never targets the true class, which would make the targeted loss constant.
    """
    masked = loss_logits.detach().float().scatter(1, labels[:, None], float("-inf"))
    return masked.argsort(dim=1, descending=True, stable=True)[:, :n_target_classes]


def effective_n_targets(n_classes: int, n_target_classes: int) -> int:
    """Targets actually used: at most ``n_classes - 1``; the targeted DLR loss needs 4 classes."""
    if n_target_classes > 0 and n_classes < 4:
        raise InputError(f"APGD-T's targeted DLR loss needs at least 4 classes, the model has {n_classes};"
                         " use n_target_classes=0")
    return min(n_target_classes, n_classes - 1)


def apgd_t(model: Forward, images: torch.Tensor, labels: torch.Tensor, settings: ApgdSettings | None = None, *,
           eps: float | None = None, norm: str = ApgdSettings.norm, n_iter: int = ApgdSettings.n_iter,
           n_target_classes: int = ApgdSettings.n_target_classes, n_restarts: int = ApgdSettings.n_restarts,
           seed: int = ApgdSettings.seed, rho: float = ApgdSettings.rho, on_iter: OnIter | None = None,
           early_stop: bool = ApgdSettings.early_stop, record: MarginRecord | None = None, attack_all: bool = False,
           margin_fn: MarginFn = signed_margin, index: torch.Tensor | None = None, stack: bool | None = False,
           stack_rows: int | None = None) -> MarginRecord:
    """Targeted APGD on the targeted DLR loss (AutoAttack's APGD-T) with margin tracking, ``n_restarts`` runs
    towards each of ``n_target_classes`` targets; options as in :func:`apgd_ce`.

    Targets come from the clean loss logits (one forward pass for all targets; AutoAttack recomputes them per
    target), see :func:`target_classes`. ``stack`` and ``stack_rows``: see :func:`_runs`; ``stack=None`` is
    :func:`stack_runs_default` for the images' device, ``stack_rows=None`` on a GPU the rows that fit in its free
    memory (:mod:`mixzoo.attacks.memory`), elsewhere no limit.
    """
    cfg = settings_from(ApgdSettings, settings, locals())
    check_attack_settings(cfg.eps, cfg.norm, cfg.n_iter, cfg.n_restarts, cfg.n_target_classes)
    with torch.no_grad():
        judged, loss_logits = pair(model(images))
    if record is None:
        record = MarginRecord.start(images, judged, labels, margin_fn)
    n_targets = effective_n_targets(loss_logits.shape[1], cfg.n_target_classes)
    targets = target_classes(loss_logits, labels, n_targets)
    plan = [targets[:, j] for j in range(n_targets) for _ in range(cfg.n_restarts)]
    stack = stack_runs_default(images.device) if stack is None else stack
    if stack and stack_rows is None and images.device.type == "cuda" and len(plan) > 1:
        from mixzoo.attacks.memory import free_bytes, rows_that_fit, step_bytes_per_image

        per = step_bytes_per_image(model, images, labels)
        stack_rows = rows_that_fit(free_bytes(images.device) or 0, per or 0.0)
    return _runs(model, images, labels, record, replace(cfg, loss="dlr-targeted"), plan=plan, attack_all=attack_all,
                 index=index, stack=stack, stack_rows=stack_rows)
