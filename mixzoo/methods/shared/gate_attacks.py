"""Attacks on a learned gate through its pre-activation (logit), and the RBC-margin bound that says where to look.

A learned gate mixes the ABC and the RBC with a weight that a network computes from the input: adaptive smoothing's
``alpha(x) = alpha_min + (alpha_max - alpha_min) sigmoid(gamma(x))`` (Bai et al. 2024b, Sec. 4.3), locally biased
smoothing's ``alpha(x) = exp(clip(beta_theta(x), -14, 14))`` (Bai et al. (local smoothing), Eq. 7). Once the gate
saturates the gradient of anything computed from its *output* vanishes (D's ``-log a(x)`` term, Bai et al. 2024b,
Sec. 4.2, steers nothing) and the attack follows the base models alone; the gate's *logit* (gamma, or beta_theta
before its crop and exp) keeps its gradient, so the attacks here maximise

    L(x') - mu * gate_logit(x')

with ``L`` the cross-entropy (``gate-ce``) or APGD-T's targeted DLR loss (``gate-t``) of the exact mixture: lowering
the logit moves the gate toward the ABC whether or not its output still moves. Each is mixzoo's APGD
(:func:`gate_apgd`) over a small sweep of ``mu``, ``n_restarts`` times, every random start drawn per example
(:mod:`mixzoo.core.rng`), so outcomes do not depend on the batch size or the number of processes. ``gate-refine``
then takes, per example, the point of smallest mixture margin the gate attacks visited and walks toward the decision
boundary with small signed steps on the margin (projected to the eps-ball and [0, 1]; a step is kept only if the
margin falls, else halved).

``rbc-screen`` attacks the RBC alone (mixzoo's APGD-CE and APGD-T, ``screen_n_iter`` iterations,
``screen_n_target_classes`` targets) and records each example's smallest RBC probability margin; an example whose
margin stays above :func:`rbc_margin_threshold` is *excluded*: the gate components spend no budget on it. That is an
attack result, not a certificate (a stronger attack on the RBC might go lower); the evaluation's warnings say how
many examples were excluded and label it so. The screen's points are judged on the mixture too, so a break it happens
to find counts. Without a lower bound (``alpha_min = 0``, or a gate with no probability-mixing form) nothing is
excluded.
"""


from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from mixzoo.attacks.apgd import (
    ApgdSettings,
    apgd_ce,
    apgd_run,
    apgd_t,
    clean_record,
    dlr_targeted_loss,
    effective_n_targets,
    target_classes,
)
from mixzoo.attacks.base import (
    BATCH_SIZE,
    COMPONENTS_OPTION,
    N_ITER,
    N_RESTARTS,
    N_TARGET_CLASSES,
    Attack,
    Component,
    select_components,
)
from mixzoo.attacks.margins import MarginRecord
from mixzoo.attacks.result import EvalResult
from mixzoo.core import rng
from mixzoo.core.errors import InputError
from mixzoo.core.options import OptionSpec, numbers
from mixzoo.methods.shared.alpha_attacks import AttackBall
from mixzoo.methods.shared.boundary_refine import GateForward, boundary_refine

GATE_COMPONENTS = ("rbc-screen", "gate-ce", "gate-t", "gate-refine")
SCREEN_LABEL = "an attack result, not a certificate"


def rbc_margin_threshold(alpha_min: float) -> float:
    """``(1 - alpha_min) / alpha_min`` (``inf`` for ``alpha_min = 0``): the RBC probability margin above which a
    probability mixture with ``alpha >= alpha_min > 0`` cannot be fooled.

    Mixing probabilities (Bai et al. 2024b, Eq. 3.4), ``p_y - p_j = (1 - alpha) (g_y - g_j) + alpha (h_y - h_j)`` for
    softmax outputs ``g`` (ABC) and ``h`` (RBC); the ABC term is at least ``-(1 - alpha)``, so the mixture predicts
    ``y`` whenever ``h_y - max_{j != y} h_j > (1 - alpha) / alpha``, a ratio that falls with ``alpha``: Bai et al.
    2024b, Lemma 3.2 with the constant alpha replaced by its lower bound (the proof uses only ``alpha >= alpha_min`` at
    the attacked point)."""
    if not 0.0 <= alpha_min <= 1.0:
        raise InputError(f"alpha_min must lie in [0, 1], got {alpha_min}")
    return math.inf if alpha_min == 0 else (1.0 - alpha_min) / alpha_min


def gate_loss(base: str, mu: torch.Tensor) -> Callable[..., torch.Tensor]:
    """APGD's loss on packed ``[log-probs | gate logit]`` rows: ``L - mu * logit`` with ``L`` the cross-entropy
    (``base="ce"``) or the targeted DLR loss (``"dlr-targeted"``); ``mu`` per row."""
    def loss(packed: torch.Tensor, labels: torch.Tensor, target: torch.Tensor | None) -> torch.Tensor:
        out, logit = packed[:, :-1], packed[:, -1]
        main = F.nll_loss(out, labels, reduction="none") if base == "ce" else dlr_targeted_loss(out, labels, target)
        return main - mu * logit
    return loss


def _packed(gate: GateForward) -> Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    def forward(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out, logit = gate(x)
        return out, torch.cat([out, logit.reshape(-1, 1).to(out.dtype)], dim=1)
    return forward


def gate_apgd(gate: GateForward, x: torch.Tensor, y: torch.Tensor, index: torch.Tensor, ball: AttackBall, *,
              mus: tuple[float, ...], base: str, seed: int, stream: str,
              target: torch.Tensor | None = None) -> MarginRecord:
    """One APGD run of ``L - mu * logit`` for every ``mu`` of ``mus`` at once (the examples stacked once per mu);
    returns, per example, the best point over all mus (a :class:`~mixzoo.attacks.margins.MarginRecord`: any
    misclassified point first, then the smallest probability margin of the mixture). Random starts are per example
    and per mu (stream ``STREAM/muK``), drawn as :func:`mixzoo.attacks.apgd.random_start` draws them: uniform in
    [-1, 1) for L-inf, standard normal for L2, a function of (seed, stream, example index) only."""
    k, n = len(mus), len(x)
    xs, ys = x.repeat(k, *([1] * (x.ndim - 1))), y.repeat(k)
    ts = None if target is None else target.repeat(k)
    mu = torch.tensor(mus, dtype=x.dtype, device=x.device).repeat_interleave(n)
    draw = (lambda *key: 2 * rng.uniform(*key) - 1) if ball.norm == "Linf" else rng.normal
    noise = torch.cat([draw(seed, f"{stream}/mu{j}", index.cpu(), tuple(x.shape[1:])) for j in range(k)])
    forward = _packed(gate)
    record = clean_record(forward, xs, ys)
    apgd_run(forward, xs, ys, record,
             ApgdSettings(eps=ball.eps, norm=ball.norm, n_iter=ball.n_iter, loss=gate_loss(base, mu)), target=ts,
             noise=noise.to(device=x.device, dtype=x.dtype))
    record.check_finite()
    best = record.key.view(k, n).argmin(dim=0) * n + torch.arange(n, device=x.device)
    return record.subset(best)


@dataclass
class _BatchState:
    """What the components of one ``run`` share, one row per example of the batch (looked up by data-set index):
    the RBC's smallest attacked probability margin (``nan``: not screened) and the gate attacks' best point."""

    index: torch.Tensor  # sorted data-set indices of the batch
    rbc_margin: torch.Tensor
    best_x: torch.Tensor
    best_key: torch.Tensor
    broken_by: torch.Tensor  # position in GATE_COMPONENTS of the first component that broke the example, else -1

    @classmethod
    def empty(cls, images: torch.Tensor, index: torch.Tensor) -> _BatchState:
        order = index.argsort()
        n = len(index)
        return cls(index[order].cpu(), torch.full((n,), math.nan), images[order.to(images.device)].clone(),
                   torch.full((n,), math.inf), torch.full((n,), -1, dtype=torch.long))

    def rows(self, index: torch.Tensor) -> torch.Tensor:
        return torch.searchsorted(self.index, index.cpu())

    def offer(self, index: torch.Tensor, record: MarginRecord) -> None:
        rows = self.rows(index)
        better = record.key.cpu() < self.best_key[rows]
        self.best_key[rows[better]] = record.key.cpu()[better]
        self.best_x[rows[better].to(self.best_x.device)] = record.x[better.to(record.x.device)].to(self.best_x)

    def credit(self, index: torch.Tensor, hit: torch.Tensor, kind: str) -> None:
        rows = self.rows(index)[hit.cpu()]
        fresh = self.broken_by[rows] < 0
        self.broken_by[rows[fresh]] = GATE_COMPONENTS.index(kind)


class GateLogitAttack(Attack):
    """``rbc-screen``, ``gate-ce``, ``gate-t``, ``gate-refine`` (module docstring) on a classifier with a learned
    gate. Subclasses say how to read the gate (:meth:`gate`) and the screen's threshold and RBC
    (:meth:`screen`; none: no screen).

    Options: ``n_iter`` APGD iterations per run, ``n_restarts`` runs per mu (and per target), ``n_target_classes``
    targets of ``gate-t``, ``mus`` the sweep of the logit term's weight, ``refine_steps`` / ``refine_first_step``
    (a fraction of eps) the boundary refinement, ``screen_n_iter`` / ``screen_n_target_classes`` the attack on the
    RBC alone. Each component attacks only the examples still robust, and the gate components only those the
    screen did not exclude.
    """

    name: ClassVar[str] = "gate-logit"
    code_version: ClassVar[str] = "gate-logit-1"
    options_spec: ClassVar[dict[str, OptionSpec]] = {
        "n_iter": N_ITER, "n_restarts": N_RESTARTS, "n_target_classes": replace(N_TARGET_CLASSES, default=3),
        "mus": OptionSpec("weights of the gate term in the gate attacks' losses (a sweep)", numbers,
                          [0.0, 0.03, 0.1, 0.3]),
        "refine_steps": OptionSpec("bisection steps of the boundary refinement", int, 50, low=0),
        "refine_first_step": OptionSpec("first step of the boundary refinement, as a fraction of eps", float, 0.1,
                                        low=0),
        "screen_n_iter": replace(N_ITER, help="iterations of the attack on the RBC alone (the screen)"),
        "screen_n_target_classes": replace(N_TARGET_CLASSES, help="APGD-T targets of the screen"),
        "batch_size": BATCH_SIZE, "components": COMPONENTS_OPTION}

    def gate(self, model: nn.Module) -> GateForward:
        """``x -> (log-probabilities of the classifier, the gate's logit)``."""
        raise NotImplementedError

    def screen(self, model: nn.Module) -> tuple[nn.Module, float] | None:
        """``(RBC, threshold)`` of the margin bound, or None where no bound applies."""
        return None

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> dict[str, Any]:
        merged = super().check_options(options)
        mus = merged["mus"]
        if isinstance(mus, int | float) and not isinstance(mus, bool):
            mus = [mus]
        if not isinstance(mus, list | tuple) or not mus or not all(
                isinstance(m, int | float) and not isinstance(m, bool) and math.isfinite(m) and m >= 0 for m in mus):
            raise InputError(f"option mus of attack {cls.name!r} must be a non-empty list of numbers >= 0, e.g."
                             f" [0, 0.03, 0.1, 0.3], got {merged['mus']!r}")
        merged["mus"] = [float(m) for m in mus]
        step = merged["refine_first_step"]  # a number >= 0 (options_spec)
        if not 0 < step <= 1:
            raise InputError(f"option refine_first_step of attack {cls.name!r} must lie in (0, 1] (a fraction of"
                             f" eps), got {step!r}")
        return merged

    def run(self, model: nn.Module, images: torch.Tensor, labels: torch.Tensor, progress: bool = True,
            index: torch.Tensor | None = None) -> EvalResult:
        """:meth:`Attack.run` plus the screen's count in the warnings. Without ``index`` the batch positions stand
        in for it (then outcomes depend on the batch, as for any batch-seeded attack)."""
        if index is None:
            index = torch.arange(len(images))
        self._order = index.long().cpu()
        self._state = _BatchState.empty(images.detach(), self._order)
        self._screened = None
        res = super().run(model, images, labels, progress=progress, index=index)
        if self._screened is not None:
            thr, n_screened, n_excluded = self._screened
            res.warnings.append(f"rbc-screen: {n_excluded} of {n_screened} examples kept an RBC probability margin"
                                f" above (1 - alpha_min) / alpha_min = {thr:.4g} under APGD on the RBC, so the"
                                f" gate attacks skipped them ({SCREEN_LABEL})")
        return res

    def _last(self, what: str) -> tuple[_BatchState, torch.Tensor]:
        """The last :meth:`run`'s state and its rows in the run's order."""
        state = getattr(self, "_state", None)
        if state is None:
            raise InputError(f"{what}() reads the last run; call run() first")
        return state, state.rows(self._order)

    def screen_margins(self) -> torch.Tensor:
        """Per example of the last :meth:`run`, in its order: the RBC's smallest probability margin under
        ``rbc-screen`` (-1 where the RBC was fooled; ``nan`` where it did not run: clean error, or no screen)."""
        state, rows = self._last("screen_margins")
        return state.rbc_margin[rows]

    def best_margins(self) -> torch.Tensor:
        """Per example of the last :meth:`run`, in its order: the mixture's smallest probability margin at the points
        the gate components visited (negative where broken; ``inf`` where they did not attack it)."""
        state, rows = self._last("best_margins")
        key = state.best_key[rows]
        return torch.where(key < -1.0, key + 2.0, key)

    def broken_by(self) -> list[str | None]:
        """Per example of the last :meth:`run`, in its order: the component that broke it (None: not broken)."""
        state, rows = self._last("broken_by")
        return [GATE_COMPONENTS[k] if k >= 0 else None for k in state.broken_by[rows].tolist()]

    def components(self, model: nn.Module, n_classes: int) -> list[Component]:
        opts = self.options
        chosen = select_components(opts, GATE_COMPONENTS, self.name)
        gate = self.gate(model)
        n_targets = effective_n_targets(n_classes, int(opts["n_target_classes"]))
        screen = self.screen(model)
        chosen = [k for k in chosen if (k != "gate-t" or n_targets) and (k != "rbc-screen" or screen is not None)]
        mus = tuple(opts["mus"])
        eps, norm, seed = self.eps, self.norm, self.seed

        def todo(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
            """Rows of this chunk the screen did not exclude."""
            if screen is None:
                return torch.ones(len(x), dtype=torch.bool, device=x.device)
            margin = self._state.rbc_margin[self._state.rows(index)]
            return ~(margin > screen[1]).to(x.device)  # nan (not screened) is attacked

        def screen_fn(x: torch.Tensor, y: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
            assert screen is not None
            rbc, thr = screen
            k = effective_n_targets(n_classes, int(opts["screen_n_target_classes"]))
            cfg = ApgdSettings(eps, norm, int(opts["screen_n_iter"]), seed=seed, n_target_classes=k)
            rec = apgd_ce(rbc, x, y, cfg, index=index)
            if k:
                rec = apgd_t(rbc, x, y, cfg, record=rec, index=index)
            rec.check_finite()
            margin = torch.where(rec.misclassified, torch.full_like(rec.margin, -1.0), rec.margin).cpu()
            self._state.rbc_margin[self._state.rows(index)] = margin
            done = self._screened or (thr, 0, 0)
            self._screened = (thr, done[1] + len(x), done[2] + int((margin > thr).sum()))
            with torch.no_grad():
                self._state.credit(index, gate(rec.x)[0].argmax(1) != y, "rbc-screen")
            return rec.x

        def gate_fn(kind: str) -> Callable[..., torch.Tensor]:
            base = "ce" if kind == "gate-ce" else "dlr-targeted"

            def fn(x: torch.Tensor, y: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
                out = x.clone()
                live = todo(x, index)
                if kind == "gate-t":
                    with torch.no_grad():
                        targets = target_classes(gate(x)[0], y, n_targets)
                    plan = [targets[:, j] for j in range(n_targets) for _ in range(int(opts["n_restarts"]))]
                else:
                    plan = [None] * int(opts["n_restarts"])
                for run, target in enumerate(plan):
                    rows = torch.nonzero(live).squeeze(1)
                    if not len(rows):
                        break
                    rec = gate_apgd(gate, x[rows], y[rows], index[rows.cpu()],
                                    AttackBall(eps, norm, int(opts["n_iter"])), mus=mus, base=base, seed=seed,
                                    stream=f"{kind}/run{run}", target=None if target is None else target[rows])
                    self._state.offer(index[rows.cpu()], rec)
                    hit = rec.misclassified
                    self._state.credit(index[rows.cpu()], hit, kind)
                    out[rows[hit]] = rec.x[hit]
                    live[rows[hit]] = False
                return out
            return fn

        def refine_fn(x: torch.Tensor, y: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
            out = x.clone()
            rows = torch.nonzero(todo(x, index)).squeeze(1)
            if not len(rows) or not int(opts["refine_steps"]):
                return out
            start = self._state.best_x[self._state.rows(index[rows.cpu()]).to(x.device)].to(x)
            rec = boundary_refine(gate, x[rows], y[rows], start, eps=eps, norm=norm,
                                  steps=int(opts["refine_steps"]), first_step=float(opts["refine_first_step"]))
            self._state.offer(index[rows.cpu()], rec)
            self._state.credit(index[rows.cpu()], rec.misclassified, "gate-refine")
            out[rows] = rec.x
            return out

        fns = {"rbc-screen": screen_fn, "gate-ce": gate_fn("gate-ce"), "gate-t": gate_fn("gate-t"),
               "gate-refine": refine_fn}
        return [Component(k, fns[k], per_example=True) for k in chosen]


def gate_logit_extra(attack: str, params: dict[str, Any]) -> Any:
    """The :class:`~mixzoo.methods.base.ExtraAttack` a learned-gate method declares: ``attack`` (this module's or
    :mod:`mixzoo.methods.local_smoothing.policy_attacks`'s) named ``gate-logit``, budgeted from the card's
    ``eval_n_iter`` (K) and ``eval_n_target_classes`` (T): every gate APGD run 2K iterations, 3 restarts per mu
    (and per target), T targets, up to 100 refinement steps; the screen K iterations and T targets. On the
    Fashion-MNIST cards one restart of K iterations missed breaks that this budget finds
    (``benchmarks/gate_attacks.md``); the screen keeps its cost to the few examples near the RBC-margin bound."""
    from mixzoo.methods.base import ExtraAttack

    n_iter, n_targets = int(params["eval_n_iter"]), int(params["eval_n_target_classes"])
    opts = {"n_iter": 2 * n_iter, "n_restarts": 3, "n_target_classes": n_targets, "screen_n_iter": n_iter,
            "screen_n_target_classes": n_targets, "refine_steps": min(100, 2 * n_iter)}
    return ExtraAttack("gate-logit", attack, opts,
                       why="the gate attacked through its logit, which keeps its gradient where the gate saturates:"
                           " APGD on the loss minus mu * logit over a sweep of mu, then a boundary refinement")
