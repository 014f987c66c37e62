"""``fast``: a screening attack with MALT target selection (Melamed, Yehudai & Shamir 2024, arXiv 2407.02240).

What it runs, on the examples still classified correctly (as every evaluation here, :class:`Attack`):

1. ``apgd-ce``: APGD on the cross-entropy (:func:`mixzoo.attacks.apgd.apgd_run`), one restart.
2. ``apgd-t``: APGD on the targeted DLR loss, one restart per target, for the ``n_target_classes`` targets that
   MALT ranks first (:func:`malt_scores`), best first; an example broken by one target is not attacked again.

Both stop early: once an example's judged output is misclassified at a visited point it leaves the forward pass
(:class:`EarlyStopForward`), and that point is its confirmed adversarial example. For a classifier with
``forward_pair`` (MixedNUTS, :class:`~mixzoo.attacks.variants.PairedOutput`) the loss and every gradient, the
Jacobian of the score included, come from the differentiable auxiliary mixture while breaks are judged on the true
output (Bai et al. 2024a, App. B.2.1's transfer attack, as in ``adaptive``'s ``apgd-ce`` / ``apgd-t``). Given the
examples' indices every random start is drawn per example from the same streams as ``adaptive``'s APGD-CE and APGD-T
(:mod:`mixzoo.core.rng`), so an outcome does not depend on the batch, and APGD-T on target t starts where
``adaptive``'s run on t starts (the stream of t's rank by logit): on the same gradient, each of ``fast``'s runs is
one of ``adaptive``'s, stopped early. So when MALT's targets are among those ``adaptive`` attacks (always with 10
classes, where ``adaptive`` attacks all 9), every example ``fast`` breaks ``adaptive`` breaks too (up to float
rounding of batches of other sizes), and the gap between the two is what the targets MALT leaves out and
``adaptive``'s other components find.

MALT's targeting, as implemented here. With logits z and true class y, MALT ranks each target t by the distance to
the t-vs-y decision boundary of the classifier linearised at the clean point x (the DeepFool step):
``score_t = (z_y(x) - z_t(x)) / ||grad_x (z_y - z_t)(x)||_*`` with ``||.||_*`` the dual norm of the threat model
(l1 for L-inf, l2 for L2: the l_p distance from x to the hyperplane where the linearised z_t overtakes z_y), and
attacks the targets of smallest score, not those of largest logit as AutoAttack's APGD-T does. The paper's
"mesoscopic almost linearity" is its argument why this linearisation, taken at x, still ranks the targets at the
scale of eps (it measures how little the gradient changes along the path to the adversarial example); the attack
itself scores at the clean point only, and so does this one: no re-scoring along the path. The Jacobian is one
backward pass per candidate class over the whole batch; with more than :data:`MAX_CANDIDATES` classes only that
many highest-logit classes are scored (a cost bound of this implementation).

A screening result: ``adaptive`` runs more (every target, FAB-T, Square, the exact-gradient APGD) and is the
figure to report; every result and report of ``fast`` says so (:data:`SCREENING_NOTE`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

import torch
from torch import nn

from mixzoo.attacks.apgd import ApgdSettings, apgd_run, clean_record, effective_n_targets, target_classes
from mixzoo.attacks.ball import NORMS, start_noise
from mixzoo.attacks.base import (
    BATCH_SIZE,
    COMPONENTS_OPTION,
    N_ITER,
    N_TARGET_CLASSES,
    Attack,
    Component,
    select_components,
)
from mixzoo.attacks.losses import Forward, pair
from mixzoo.attacks.result import EvalResult
from mixzoo.attacks.variants import PairedOutput
from mixzoo.core.errors import InputError
from mixzoo.core.options import OptionSpec

COMPONENTS = ("apgd-ce", "apgd-t")
MAX_CANDIDATES = 100  # classes scored per example: the highest-logit ones when a model has more
# an APGD run restarts on its unbroken examples alone once they are at most this fraction of at least MIN_SHRINK rows
SHRINK_BELOW, MIN_SHRINK = 0.25, 16
SCREENING_NOTE = "screening attack: not a reported robustness figure; confirm with adaptive (`--attack adaptive`)"


def dual_norm(t: torch.Tensor, norm: str) -> torch.Tensor:
    """Per row (last dimension) the dual norm of the threat model's: l1 for ``Linf``, l2 for ``L2``."""
    return t.abs().sum(dim=-1) if norm == "Linf" else t.norm(dim=-1)


def malt_scores(forward: Forward, x: torch.Tensor, labels: torch.Tensor, norm: str = "Linf",
                max_candidates: int = MAX_CANDIDATES) -> torch.Tensor:
    """``[n, n_classes]`` MALT scores at the clean points ``x`` (lower: a closer boundary; module docstring).

    ``score[i, t] = (z_y - z_t) / ||grad_x (z_y - z_t)||_*`` on the loss logits of ``forward`` (the second output of
    a pair, e.g. the auxiliary mixture of ``forward_pair``); ``+inf`` at the true class and at classes outside the
    ``max_candidates`` highest logits. A zero gradient difference gives ``+inf`` for a positive logit gap (no
    linear path to that boundary) and ``-inf`` for a negative one (already past it). One backward pass per scored
    class over the whole batch.
    """
    return _malt(forward, x, labels, norm, max_candidates)[0]


def _malt(forward: Forward, x: torch.Tensor, labels: torch.Tensor, norm: str, max_candidates: int,
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """(:func:`malt_scores`, the loss logits at ``x``)."""
    if norm not in NORMS:
        raise InputError(f"unknown norm {norm!r}; use Linf or L2")
    x = x.detach().requires_grad_(True)
    with torch.enable_grad():
        _, z = pair(forward(x))
        n, n_classes = z.shape
        k = min(n_classes, max_candidates + 1)  # the true class may be among the top k
        cand = z.detach().topk(k, dim=1).indices if k < n_classes else \
            torch.arange(n_classes, device=z.device).expand(n, n_classes).contiguous()
        diff = z.gather(1, labels[:, None]) - z.gather(1, cand)  # z_y - z_t, [n, k]
        # one backward pass per column over the whole batch (the examples are independent rows); only the norms
        # are kept, so memory stays that of one input gradient
        den = torch.stack([dual_norm(torch.autograd.grad(diff[:, j].sum(), x, retain_graph=j < k - 1)[0].flatten(1),
                                     norm) for j in range(k)], dim=1)
    gap = diff.detach()
    score = torch.where(den > 0, gap / den.clamp_min(torch.finfo(den.dtype).tiny),
                        torch.where(gap > 0, torch.inf, -torch.inf))
    score = torch.where(cand == labels[:, None], torch.inf, score)
    out = torch.full((n, n_classes), torch.inf, device=z.device, dtype=score.dtype)
    return out.scatter(1, cand, score), z.detach()


def malt_targets(forward: Forward, x: torch.Tensor, labels: torch.Tensor, n_targets: int, norm: str = "Linf",
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """``[n, n_targets]`` target classes, the lowest MALT score first (ties: the lower class index), and each
    target's rank among the non-true classes by loss logit, 0 for the highest (the APGD-T run of AutoAttack's
    order, :func:`mixzoo.attacks.apgd.target_classes`, that attacks it)."""
    scores, z = _malt(forward, x, labels, norm, MAX_CANDIDATES)
    targets = scores.argsort(dim=1, stable=True)[:, :n_targets]
    order = target_classes(z, labels, z.shape[1] - 1)  # AutoAttack's targets, best logit first
    rank = torch.zeros_like(z, dtype=torch.long).scatter(1, order, torch.arange(order.shape[1], device=z.device)
                                                          .expand_as(order).contiguous())
    return targets, rank.gather(1, targets)


class Shrink(Exception):
    """Raised by :class:`EarlyStopForward` at a call where no row is left to evaluate, or (with ``shrink_below``)
    where so few are left that the APGD run is better restarted on them alone (:func:`early_stop_apgd`); the run's
    record already holds every breaking point."""


class EarlyStopForward:
    """``forward`` that evaluates only the examples not yet misclassified: once an example's judged output is
    misclassified, later calls return its outputs at that point again (detached: no loss gradient), so APGD's
    record keeps that point, and the model is run on the remaining rows only. A call raises :class:`Shrink` when
    no row is left, or when at most ``shrink_below`` of at least :data:`MIN_SHRINK` rows are. The examples' rows
    must be the same in every call (one APGD run). ``active`` flags the rows still evaluated."""

    def __init__(self, forward: Forward, labels: torch.Tensor, shrink_below: float = 0.0):
        self.forward, self.labels = forward, labels
        self.active = torch.ones(len(labels), dtype=torch.bool, device=labels.device)
        self.judged: torch.Tensor | None = None
        self.loss: torch.Tensor | None = None
        self.limit = shrink_below * len(labels) if len(labels) >= MIN_SHRINK else 0.0

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.judged is None or self.loss is None:
            judged, loss = pair(self.forward(x))
        else:
            idx = torch.nonzero(self.active).squeeze(1)  # a host synchronisation per step: the batch shrinks
            if not idx.numel() or idx.numel() <= self.limit:
                raise Shrink
            part_judged, part_loss = pair(self.forward(x[idx]))
            judged = self.judged.index_put((idx,), part_judged.detach().to(self.judged.dtype))
            loss = self.loss.index_put((idx,), part_loss.to(self.loss.dtype))  # differentiable in the active rows
        self.judged, self.loss = judged.detach(), loss.detach()
        self.active &= judged.detach().argmax(dim=1) == self.labels
        return judged, loss


def _start(seed: int, runs: torch.Tensor | None, index: torch.Tensor | None, generator: torch.Generator,
           shape: tuple[int, ...], norm: str) -> dict[str, Any]:
    """apgd_run's random starts (:func:`early_stop_apgd`): without indices the generator, else per example the
    stream of ``adaptive``'s APGD for its entry of ``runs`` (one draw per distinct run, then selected per row)."""
    if index is None:
        return {"generator": generator}
    if runs is None:
        return {"draw": (seed, "apgd/ce/run0", index)}
    noise = None
    for r in runs.unique().tolist():  # at most n_classes - 1 draws
        t = start_noise((seed, f"apgd/dlr-targeted/run{r}", index), norm, shape)
        pick = (runs.cpu() == r).view(-1, *([1] * len(shape)))
        noise = t if noise is None else torch.where(pick, t, noise)
    return {"noise": noise}


def early_stop_apgd(forward: Forward, x: torch.Tensor, y: torch.Tensor, *, eps: float, norm: str, n_iter: int,
                    seed: int, targets: tuple[torch.Tensor, torch.Tensor | None] | None = None,
                    index: torch.Tensor | None = None, zero_grad: list[int] | None = None) -> torch.Tensor:
    """APGD-CE (``targets`` None) or APGD-T on each column of the target classes in turn, one restart each, with
    early stop (:class:`EarlyStopForward`); each target attacks only the examples no earlier run broke. Returns per
    example the point kept by the margin record (the breaking point where one was found). ``targets`` is
    ``(classes, runs)`` as :func:`malt_targets` returns them (``runs`` may be None). Random starts, given
    ``index``: per example the streams of ``adaptive``'s APGD, ``apgd/ce/run0`` and ``apgd/dlr-targeted/run{r}``
    with ``r = runs[i, j]`` for example i's j-th target (default j; the module docstring says why); without it a
    generator seeded with ``seed``. Given ``index``, once at most :data:`SHRINK_BELOW` of a run's
    examples are left unbroken the run is restarted on them alone: their starts and step-size schedules are their
    own, so they retrace the same trajectories in the smaller batch, and the per-step work shrinks with the batch."""
    record = clean_record(forward, x, y)
    gen = torch.Generator().manual_seed(seed)
    classes, runs = (None, None) if targets is None else targets
    plan = [None] if classes is None else [classes[:, j] for j in range(classes.shape[1])]
    for run, target in enumerate(plan):
        idx = torch.nonzero(~record.misclassified).squeeze(1)
        flagged = record.zero_grad.clone()
        while idx.numel():
            part = record.subset(idx)
            sub_index = None if index is None else index[idx.to(index.device)]
            sub_runs = None if target is None else (runs[idx, run] if runs is not None
                                                    else torch.full((len(idx),), run, dtype=torch.long))
            # restarting on the survivors replays their trajectories only when each start is drawn per example
            wrapped = EarlyStopForward(forward, y[idx], SHRINK_BELOW if index is not None else 0.0)
            try:
                apgd_run(wrapped, x[idx], y[idx], part,
                         ApgdSettings(eps, norm, n_iter, "ce" if target is None else "dlr-targeted"),
                         target=None if target is None else target[idx],
                         **_start(seed, sub_runs, sub_index, gen, tuple(x.shape[1:]), norm))
                survivors = idx[:0]
            except Shrink:  # the few examples left run again from their own starts, alone
                survivors = idx[wrapped.active]
            part.check_finite()
            record.merge(idx, part)
            idx = survivors
        if zero_grad is not None:
            zero_grad.append(int((record.zero_grad & ~flagged).sum()))
    return record.x


class FastScreening(Attack):
    """``fast``: APGD-CE, then APGD-T on MALT's top ``n_target_classes`` targets, one restart, early stop (module
    docstring). A screening attack: its robust accuracy is an upper bound to confirm with ``adaptive``."""

    name: ClassVar[str] = "fast"
    options_spec: ClassVar[dict[str, OptionSpec]] = {
        "n_iter": N_ITER, "n_target_classes": replace(N_TARGET_CLASSES, help="MALT's top target classes for APGD-T",
                                                      default=3),
        "batch_size": BATCH_SIZE, "components": COMPONENTS_OPTION}
    code_version: ClassVar[str | None] = "malt-1"
    screening_note: ClassVar[str] = SCREENING_NOTE  # reports print it beside the attack's name

    def components(self, model: nn.Module, n_classes: int) -> list[Component]:
        chosen = select_components(self.options, COMPONENTS, self.name)
        n_targets = effective_n_targets(n_classes, int(self.options["n_target_classes"]))
        forward = model.forward_pair if isinstance(model, PairedOutput) else model
        opts = dict(eps=self.eps, norm=self.norm, n_iter=int(self.options["n_iter"]), seed=self.seed)
        comps: list[Component] = []
        for kind in chosen:
            if kind == "apgd-t" and not n_targets:
                continue
            zero_grad: list[int] = []

            def fn(x: torch.Tensor, y: torch.Tensor, index: torch.Tensor | None = None, *, kind: str = kind,
                   zero_grad: list[int] = zero_grad) -> torch.Tensor:
                targets = malt_targets(forward, x, y, n_targets, self.norm) if kind == "apgd-t" else None
                return early_stop_apgd(forward, x, y, targets=targets, index=index, zero_grad=zero_grad, **opts)

            comps.append(Component(kind, fn, zero_grad=zero_grad, per_example=True))
        return comps

    def run(self, model: nn.Module, images: torch.Tensor, labels: torch.Tensor, progress: bool = True,
            index: torch.Tensor | None = None, precision: str = "float32") -> EvalResult:
        """:meth:`Attack.run`, with :data:`SCREENING_NOTE` first among the result's warnings."""
        result = super().run(model, images, labels, progress=progress, index=index, precision=precision)
        result.warnings.insert(0, SCREENING_NOTE)
        return result
