"""Robustness evaluations by name: ``pgd``, ``apgd``, ``autoattack`` and ``adaptive`` (Bai et al. 2024a, Sec. 5, App.
B.2).

Each evaluation is a sequence of components run as AutoAttack runs them: every component attacks only the examples
still classified correctly, and the per-component count of newly broken examples is reported. A component's output
counts only if it lies in the eps-ball and in [0, 1] and the model (its ordinary output) misclassifies it.

* ``pgd``: plain fixed-step PGD on the cross-entropy (:func:`mixzoo.attacks.pgd.pgd`).
* ``apgd``: our APGD-CE + APGD-T (targeted DLR, 9 targets) on the model's own output and gradient (a mixing
  method's gradient variant when the model was built as one, :mod:`mixzoo.attacks.variants`).
* ``autoattack``: standard AutoAttack (APGD-CE, APGD-T, FAB-T, Square) from the installed ``pyautoattack`` package,
  on the model's ``bypass`` gradient variant where it offers one (App. B.2.2, how the RobustBench entry was
  evaluated; :func:`mixzoo.attacks.variants.with_gradient`).
* ``adaptive``: transfer-based adaptive AutoAttack (App. B.2.1) that contains standard AutoAttack. By default
  (:data:`ADAPTIVE_DEFAULT`): ``apgd-ce`` and ``apgd-t`` take loss and gradients from the auxiliary differentiable
  mixture (second output of ``forward_pair``, Eq. 8) while success and the kept point are judged on the true
  MixedNUTS output (first output); ``apgd-ce-exact``, the same APGD-CE on the exact gradient of the mixture
  formula (what standard AutoAttack run on the classifier uses); ``fab-t-exact``, pyautoattack's FAB-T on the exact
  gradient; then Square on the true output. Selectable with ``components=`` (:data:`ADAPTIVE_COMPONENTS`):
  ``apgd-t-exact`` (APGD-T on the exact gradient) and ``fab-t`` (pyautoattack's FAB-T on the model in bypass mode:
  its output values are MixedNUTS's, its gradients the auxiliary mixture's, App. B.2.2). They are left out of the
  default because, run after the default components' gradient stages, they broke no example on the measured runs
  (``benchmarks/autoattack_parity.md``, ``benchmarks/eval_speed_digits_cpu_all7.md``) while costing almost half of
  standard AutoAttack's time between them; FAB-T on the bypass gradient aims at the auxiliary model's boundary,
  and every example standard AutoAttack's FAB-T breaks ``fab-t-exact`` breaks (below). A model without
  ``forward_pair`` gets standard AutoAttack (its APGD and FAB-T already have the model's own gradient).
  Our APGD components drop an example the moment a misclassified point is recorded for it, and on a GPU run
  APGD-T's targets as one stacked batch as far as the free memory holds them (:func:`mixzoo.attacks.apgd.apgd_t`),
  and Square, which holds no autograd graph, on :data:`FORWARD_ONLY_BATCHES` attack batches at once; none of this
  changes which examples break.
* ``adaptive-strong``: all of ``adaptive``'s components (those outside its default too) plus bypass- and
  re-seeded APGD before FAB-T, and last
  ``autoattack-standard``: the installed AutoAttack's whole standard evaluation on the exact classifier, run afresh
  on every clean-correct example of the batch with the evaluation's seed (:class:`AdaptiveStrong`).

Which gradient each component uses and why (``fab-t-exact`` and ``apgd-*-exact`` run AutoAttack's components on the
exact gradient, so that a break standard AutoAttack finds on the classifier is one ``adaptive`` can find): the design
note "Parity with AutoAttack" (``docs/design.md``). FAB-T with one restart draws no random numbers, so every example
standard AutoAttack's FAB-T breaks is broken by ``fab-t-exact``; APGD and Square draw per example here and per batch
in AutoAttack, so their breaks match in distribution, not draw for draw. ``adaptive-strong``'s
``autoattack-standard`` runs AutoAttack's own evaluation with the bench's batch and seed.

Per-example randomness (the bench's default). Given the examples' indices (``run(..., index=...)``), ``adaptive``
draws every random number per example: the APGD-CE / APGD-T here (AutoAttack's algorithm and trajectories, random
starts from :mod:`mixzoo.core.rng`) replace pyautoattack's for single models, and Square is
:func:`mixzoo.attacks.square.min_margin_square` with AutoAttack's margin loss on the logits (``loss="logit"``),
``p_init`` 0.8 and windows, signs and eta patterns drawn per example. FAB-T with one restart draws nothing. So an
example's outcome does not depend on the batch size or the number of processes. Components that keep their batch's
stream (pyautoattack's APGD in ``autoattack``, ``autoattack-standard``, PGD) say so in the result's warnings.
Without indices, pyautoattack's Square runs instead.

Precision. ``run(..., precision="bf16")`` runs every component under bfloat16 autocast
(:mod:`mixzoo.attacks.precision`); the clean accuracy and every candidate are still judged on the model's float32
output outside autocast, so a break bfloat16 rounding alone produced is dropped (and that component attacks those
examples again in float32), and each component reports how many candidates bfloat16 saw as broken, how many of
those float32 confirmed, and how many the float32 re-run broke. Gradient-free components (Square) run in float32:
their search accepts a step when the loss improves, and bfloat16 rounds small improvements away.

When the black-box Square breaks examples the gradient components missed, the result carries the warning
"potentially unreliable: ..." (gradient masking, App. B.2.1); examples with an all-zero loss gradient at an APGD
starting point, and AutoAttack's own warnings, are reported too.
"""

from __future__ import annotations

import time
import warnings as pywarnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from mixzoo.attacks.apgd import apgd_ce, apgd_t, check_attack_settings, effective_n_targets
from mixzoo.attacks.pgd import pgd
from mixzoo.attacks.precision import (
    as_channels_last,
    attack_arithmetic,
    channels_last,
    check_precision_device,
    exact_arithmetic,
    uses_channels_last,
)
from mixzoo.attacks.result import ComponentStat, EvalResult, nan_error
from mixzoo.attacks.square import min_margin_square
from mixzoo.attacks.variants import PairedOutput, offers, with_gradient
from mixzoo.core.checks import check_typed_options
from mixzoo.core.errors import InputError
from mixzoo.core.progress import progress_bar
from mixzoo.zoo.models import check_images, check_labels

AUTOATTACK_COMPONENTS = ("apgd-ce", "apgd-t", "fab-t", "square")
# the adaptive attack's components, in order: "apgd-ce" / "apgd-t" are App. B.2.1's transfer APGD, "-exact" the same
# APGD on the exact gradient of the mixture formula (what standard AutoAttack runs on the classifier, see the module
# docstring), "fab-t" App. B.2.1's FAB-T (bypass gradient), "fab-t-exact" the same FAB-T on the exact gradient
ADAPTIVE_COMPONENTS = ("apgd-ce", "apgd-t", "apgd-ce-exact", "apgd-t-exact", "fab-t", "fab-t-exact", "square")
# what ``adaptive`` runs by default (the others stay selectable with ``components=``), see the module docstring
ADAPTIVE_DEFAULT = ("apgd-ce", "apgd-t", "apgd-ce-exact", "fab-t-exact", "square")
EXACT_APGD = ("apgd-ce-exact", "apgd-t-exact")
# adaptive-strong adds, last, the whole standard AutoAttack on the exact classifier from the clean images
STRONG_COMPONENTS = (*ADAPTIVE_COMPONENTS, "autoattack-standard")
SQUARE_MASKING = "potentially unreliable: Square broke"


def square_masking_note(count: int) -> str:
    """AutoAttack's gradient-masking flag: the black-box Square attack broke examples the gradient attacks missed."""
    return f"{SQUARE_MASKING} {count} examples the gradient attacks missed (possible gradient masking)"


@dataclass
class Component:
    """One stage of an evaluation: ``fn(x, y)`` returns candidate adversarial images for still-robust examples."""

    name: str
    fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    gradient_based: bool = True
    zero_grad: list[int] = field(default_factory=list)
    # "robust": attack the examples still robust (AutoAttack's chaining); "clean": attack every clean-correct example
    # afresh (a whole evaluation reproduced as it runs on its own), only its breaks of still-robust ones are new
    scope: str = "robust"
    # True: ``fn(x, y, index)`` takes the examples' indices in the whole data set and draws its randomness per
    # example from them (mixzoo.core.rng), so its outcome per example does not depend on the batch
    per_example: bool = False
    # a forward-only search (Square): no autograd graph, so on a GPU it takes this many attack batches at once
    # (only with per-example randomness, where the batch does not change any example's outcome)
    forward_only: bool = False


FORWARD_ONLY_BATCHES = 4  # attack batches per forward-only chunk on a GPU (forward_only_batches)


def forward_only_batches(comp: Component, device: torch.device, per_example: bool) -> int:
    """How many attack batches a component attacks at once: :data:`FORWARD_ONLY_BATCHES` for a forward-only,
    per-example component on a GPU (its queries hold no autograd graph, so the memory sized for a gradient attack's
    batch holds several, and a small network's queries leave a GPU idle), else 1. The outcome per example is the
    same either way."""
    if comp.forward_only and comp.per_example and per_example and device.type == "cuda":
        return FORWARD_ONLY_BATCHES
    return 1


def within_threat_model(adv: torch.Tensor, x: torch.Tensor, eps: float, norm: str) -> torch.Tensor:
    """Per example: ``adv`` is finite, in [0, 1] and within the eps-ball around ``x`` (float tolerance)."""
    delta = (adv - x).flatten(1)
    size = delta.abs().max(dim=1).values if norm == "Linf" else delta.norm(dim=1)
    flat = adv.flatten(1)
    return (size <= eps * (1 + 1e-5) + 1e-6) & (flat.min(dim=1).values >= -1e-6) & (flat.max(dim=1).values
                                                                                     <= 1 + 1e-6) \
        & torch.isfinite(flat).all(dim=1)


def _logits(model: nn.Module, images: torch.Tensor, batch_size: int) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([model(chunk) for chunk in images.split(batch_size)]) if len(images) else torch.empty(0)


class Attack:
    """Base class of evaluations: ``Attack(eps, norm, seed, **options).run(model, images, labels)``.

    Subclasses set ``name``, ``defaults`` (every accepted option with its default) and :meth:`components`.
    """

    name: ClassVar[str] = "attack"
    defaults: ClassVar[dict[str, Any]] = {"batch_size": 500}
    # each option's type where its default does not say it (a default None); the others have their default's type
    option_types: ClassVar[dict[str, type]] = {"step_size": float, "components": list}
    # a subclass changes it when its outcomes change for the same options: the bench's cache key includes it, so
    # outcomes cached by the older code are attacked again (and no other attack's cache is touched)
    code_version: ClassVar[str | None] = None
    per_example: bool = False  # set by run(): the examples' indices were given (per-example randomness wanted)

    def __init__(self, eps: float, norm: str = "Linf", seed: int = 0, **options: Any):
        check_attack_settings(eps, norm)
        self.eps, self.norm, self.seed = float(eps), norm, int(seed)
        self.options = self.check_options(options)

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> dict[str, Any]:
        """The options merged over :attr:`defaults`; one-line errors for unknown keys (with close names) and
        counts out of range, so a run can refuse bad options before it attacks anything."""
        import difflib

        unknown = sorted(set(options) - set(cls.defaults))
        if unknown:
            close = [c for k in unknown for c in difflib.get_close_matches(k, cls.defaults, n=1, cutoff=0.6)]
            hint = f"did you mean {', '.join(close)}? " if close else ""
            raise InputError(f"unknown option(s) {', '.join(unknown)} for attack {cls.name!r}; {hint}"
                             f"known: {', '.join(sorted(cls.defaults))}")
        if isinstance(options.get("components"), str):
            options = {**options, "components": [options["components"]]}
        merged = {**cls.defaults, **options}
        check_typed_options(f"attack {cls.name!r}", options, cls.defaults, cls.option_types)
        for key in ("n_iter", "n_restarts", "n_queries", "batch_size"):
            if key in merged and int(merged[key]) < 1:
                raise InputError(f"option {key} must be at least 1, got {merged[key]}")
        if int(merged.get("n_target_classes", 0)) < 0:
            raise InputError(f"option n_target_classes must be non-negative, got {merged['n_target_classes']}")
        return merged

    def components(self, model: nn.Module, n_classes: int) -> list[Component]:
        raise NotImplementedError

    def run(self, model: nn.Module, images: torch.Tensor, labels: torch.Tensor, progress: bool = True,
            index: torch.Tensor | None = None, precision: str = "float32") -> EvalResult:
        """Clean accuracy, then each component on the examples still correct; see the module docstring.

        ``index`` (each example's index in its whole data set) is handed to the components that draw their
        randomness per example (:attr:`Component.per_example`); the others use their batch's stream.
        ``precision="bf16"`` runs the components under bfloat16 autocast (:mod:`mixzoo.attacks.precision`); clean
        accuracy and every candidate are judged on the model's float32 output outside autocast; a component whose
        bfloat16 candidate is not confirmed runs again on that example in float32, and each component's stat counts
        the candidates bfloat16 saw as broken, those float32 confirmed and the breaks of the float32 re-run.
        ``precision="tf32"`` does the same with TF32 matrix products and convolutions; ``tf32`` (and ``bf16`` on a
        GPU) run a network with 2-D convolutions in channels-last memory format for the whole run, restored after;
        ``"auto"`` is resolved for the images' device (:mod:`mixzoo.attacks.precision`) and the result records
        the concrete policy."""
        precision = check_precision_device(precision, images.device)  # "auto" resolved for this device
        nhwc = isinstance(model, nn.Module) and uses_channels_last(model, precision, images.device)
        with channels_last(model, nhwc):
            return self._run(model, as_channels_last(images, nhwc), labels, progress, index, precision)

    def _run(self, model: nn.Module, images: torch.Tensor, labels: torch.Tensor, progress: bool,
             index: torch.Tensor | None, precision: str) -> EvalResult:
        t0 = time.perf_counter()
        check_images(images)
        n, bs = images.shape[0], int(self.options["batch_size"])
        if n == 0:
            raise InputError("no images to attack; pass at least one example")
        with exact_arithmetic():
            clean = _logits(model, images, bs).float()
        if torch.isnan(clean).any():
            raise nan_error(int(torch.isnan(clean).any(dim=1).sum()), "on the clean images")
        check_labels(labels, n, clean.shape[1])
        labels = labels.to(images.device)
        clean_correct = clean.argmax(dim=1) == labels
        robust, adv = clean_correct.clone(), images.clone()
        stats: list[ComponentStat] = []
        notes: list[str] = []
        self.per_example = index is not None
        comps = self.components(model, clean.shape[1])
        if not comps:  # robust accuracy would silently equal clean accuracy
            raise InputError(f"attack {self.name!r} has no component to run on this model with components="
                             f"{self.options.get('components')} and n_target_classes="
                             f"{self.options.get('n_target_classes')}; choose components the model has")
        with progress_bar(progress) as bar:
            for comp in comps:
                todo = torch.nonzero(clean_correct if comp.scope == "clean" else robust).squeeze(1)
                task = bar.add_task(f"{self.name}: {comp.name}", total=len(todo))
                start, newly, outside, own = time.perf_counter(), 0, 0, 0
                found_low, confirmed, rerun = 0, 0, 0
                # gradient-free search (Square) compares loss values step to step, and bfloat16's rounding hides
                # the small improvements it accepts: it runs in float32
                arith = precision if comp.gradient_based else "float32"
                with pywarnings.catch_warnings(record=True) as caught:
                    pywarnings.simplefilter("always")
                    chunk = bs * forward_only_batches(comp, images.device, index is not None)
                    for idx in todo.split(chunk) if len(todo) else ():  # an empty tensor splits into one empty part
                        x, y = images[idx], labels[idx]
                        cand, inside, out = self._attempt(comp, model, x, y, idx, index, arith)
                        broken = (out.argmax(dim=1) != y) & inside & robust[idx]
                        own += int(((out.argmax(dim=1) != y) & inside).sum())
                        outside += int((~inside).sum())
                        if arith != "float32":  # what the attack's own arithmetic saw
                            with torch.no_grad(), attack_arithmetic(arith, images.device):
                                low = model(cand)
                            seen = (low.argmax(dim=1) != y) & inside & robust[idx]
                            found_low += int(seen.sum())
                            confirmed += int((seen & broken).sum())
                            dropped = seen & ~broken
                            if dropped.any():  # bfloat16 stopped on a false break: this component again, in float32
                                sub = idx[dropped]
                                c2, in2, out2 = self._attempt(comp, model, images[sub], labels[sub], sub, index,
                                                              "float32")
                                again = (out2.argmax(dim=1) != labels[sub]) & in2
                                cand[dropped], out[dropped], inside[dropped] = c2, out2, in2
                                broken[dropped] = again
                                rerun += int(again.sum())
                                own += int(again.sum())
                        robust[idx[broken]] = False
                        adv[idx[broken]] = cand[broken]
                        newly += int(broken.sum())
                        bar.advance(task, len(idx))
                low = arith != "float32"
                stats.append(ComponentStat(comp.name, newly, time.perf_counter() - start,
                                           own if comp.scope == "clean" else None,
                                           found_low if low else None, confirmed if low else None,
                                           rerun if low else None))
                if index is not None and not comp.per_example and len(todo):
                    notes.append(f"{comp.name}: draws its randomness per batch, so its outcome can depend on the"
                                 " batch size and the number of processes")
                notes += [f"{comp.name}: {m}" for m in dict.fromkeys(str(w.message) for w in caught)]
                if outside:
                    notes.append(f"{comp.name} returned {outside} points outside the eps-ball or [0, 1];"
                                 " they were not counted")
                if sum(comp.zero_grad):
                    notes.append(f"{comp.name}: {sum(comp.zero_grad)} example runs had an all-zero loss gradient at"
                                 " the starting point (possible gradient masking)")
        square = [s for s in stats if s.name == "square"]
        if square and square[0].newly_broken and len(stats) > 1:
            notes.append(square_masking_note(square[0].newly_broken))
        return EvalResult(self.name, self.eps, self.norm, n, clean_correct.cpu(), robust.cpu(), adv, stats, notes,
                          time.perf_counter() - t0, precision)

    def _attempt(self, comp: Component, model: nn.Module, x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor,
                 index: torch.Tensor | None, precision: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``comp``'s candidates for ``x`` (dataset rows ``idx``) in ``precision``, whether each lies in the
        threat model, and the model's float32 logits there (outside autocast: the judgement)."""
        with attack_arithmetic(precision, x.device):
            if comp.per_example and index is not None:
                cand = comp.fn(x, y, index[idx.to(index.device)]).detach()
            else:
                cand = comp.fn(x, y).detach()
        cand = cand.to(x.dtype)
        inside = within_threat_model(cand, x, self.eps, self.norm)
        with torch.no_grad(), exact_arithmetic():
            out = model(cand).float()
        if torch.isnan(out[inside]).any():
            raise nan_error(int(torch.isnan(out[inside]).any(dim=1).sum()), f"at points found by {comp.name}")
        return cand, inside, out


# ---------------------------------------------------------------------------------------------------- components


def _ours(kind: str, forward: Callable, opts: dict[str, Any], eps: float, norm: str, seed: int,
          n_targets: int) -> Component:
    """Our APGD-CE / APGD-T as a component (AutoAttack's behaviour: only still-robust examples); given the examples'
    indices, its random starts are drawn per example (:func:`mixzoo.attacks.apgd.apgd_ce`)."""
    def fn(x: torch.Tensor, y: torch.Tensor, index: torch.Tensor | None = None) -> torch.Tensor:
        common = dict(eps=eps, norm=norm, n_iter=int(opts["n_iter"]), n_restarts=int(opts["n_restarts"]),
                      seed=seed, index=index, early_stop=True)
        if kind == "apgd-ce":
            rec = apgd_ce(forward, x, y, **common)
        else:
            rec = apgd_t(forward, x, y, n_target_classes=n_targets, stack=None, **common)
        rec.check_finite()
        comp.zero_grad.append(int(rec.zero_grad.sum()))
        return rec.x

    comp = Component(kind, fn, per_example=True)
    return comp


def _pyautoattack(kind: str, model: nn.Module, opts: dict[str, Any], eps: float, norm: str, seed: int,
                  n_targets: int, gradient: str | None) -> Component:
    """A component of the installed AutoAttack with the settings of its 'standard' version, on the model's gradient
    variant ``gradient`` where it offers one."""
    from mixzoo.core.compat import import_autoattack

    aa = import_autoattack()
    n_iter, n_restarts = int(opts["n_iter"]), int(opts["n_restarts"])
    model = FiniteGuard(with_gradient(model, gradient), f"at points visited by {kind}")

    def fn(x: torch.Tensor, y: torch.Tensor, index: torch.Tensor | None = None) -> torch.Tensor:
        dev = x.device
        if kind == "apgd-ce":
            attack = aa.autopgd_base.APGDAttack(model, n_restarts=n_restarts, n_iter=n_iter, verbose=False, eps=eps,
                                                norm=norm, eot_iter=1, rho=0.75, seed=seed, device=dev, loss="ce")
        elif kind == "apgd-t":
            attack = aa.autopgd_base.APGDAttack_targeted(model, n_restarts=n_restarts, n_iter=n_iter, verbose=False,
                                                         eps=eps, norm=norm, eot_iter=1, rho=0.75, seed=seed,
                                                         device=dev, n_target_classes=n_targets)
        elif kind == "fab-t":
            attack = aa.fab_pt.FABAttack_PT(model, n_restarts=1, n_iter=n_iter, eps=eps, seed=seed, norm=norm,
                                            verbose=False, device=dev, targeted=True, n_target_classes=n_targets)
        else:
            attack = aa.square.SquareAttack(model, p_init=0.8, n_queries=int(opts["n_queries"]), eps=eps, norm=norm,
                                            n_restarts=1, seed=seed, verbose=False, device=dev, resc_schedule=False)
        model.reset()
        with torch.no_grad():
            adv = attack.perturb(x.clone(), y.clone())
        model.finish()  # NaN outputs since the guard's last periodic check
        return adv

    # FAB-T with one restart draws no random number (see the module docstring): its run on an example is the same
    # in any batch, so it counts as per-example; the index is not needed
    return Component(kind, fn, gradient_based=kind != "square", per_example=kind == "fab-t")


def _square_each(model: nn.Module, opts: dict[str, Any], eps: float, norm: str, seed: int) -> Component:
    """Square on the model's output with every random draw per example (:func:`mixzoo.attacks.square.
    min_margin_square` with ``loss="logit"``, AutoAttack's margin loss, ``p_init`` 0.8, ``n_queries`` of the
    options), replacing AutoAttack's batch-seeded Square when the examples' indices are known."""
    def fn(x: torch.Tensor, y: torch.Tensor, index: torch.Tensor | None = None) -> torch.Tensor:
        return min_margin_square(model, x, y, eps=eps, norm=norm, n_queries=int(opts["n_queries"]), p_init=0.8,
                                 seed=seed, layer_norm=False, batch_size=len(x), progress=False, index=index,
                                 loss="logit").adv_images

    return Component("square", fn, gradient_based=False, per_example=True, forward_only=True)


class FiniteGuard(nn.Module):
    """``model`` that raises :func:`nan_error` soon after its first NaN output, so that an attack we do not control
    (the installed AutoAttack's components) stops within a few steps of the first bad one instead of running its
    whole budget.

    On a GPU the check stays on the device: the largest number of NaN rows in one output is kept there and read
    (one host synchronisation) every :attr:`CHECK_EVERY` calls and by :meth:`finish`, which the caller runs when the
    attack returns; on the CPU, where reading it costs nothing, after every call. Outcomes do not depend on when
    the check runs: it only decides whether the run is refused."""

    CHECK_EVERY = 32
    EAGER_ON_CPU = True  # on the CPU a read costs nothing: check after every call

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
            # on the CPU reading the flag costs nothing: check every call; on a GPU every CHECK_EVERY calls
            if (self.EAGER_ON_CPU and out.device.type == "cpu") or self._calls % self.CHECK_EVERY == 0:
                self._check()
        return out

    def _check(self) -> None:
        if self._nan is not None and bool(self._nan > 0):
            count = int(self._nan)
            self.reset()
            raise nan_error(count, self.where)

    def reset(self) -> None:
        """Forget the outputs seen so far (a new attack run)."""
        self._nan, self._calls = None, 0

    def finish(self) -> None:
        """Raise :func:`nan_error` if an output since the last reset had NaN rows; then reset."""
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


def _select(opts: dict[str, Any], available: tuple[str, ...], attack: str,
            default: tuple[str, ...] | None = None) -> list[str]:
    chosen = opts.get("components") or list(default or available)
    unknown = [c for c in chosen if c not in available]
    if unknown:
        raise InputError(f"unknown component(s) {', '.join(unknown)} for attack {attack!r};"
                         f" choose from {', '.join(available)}")
    return [c for c in available if c in chosen]


# ------------------------------------------------------------------------------------------------------- attacks


class PGDAttack(Attack):
    """Plain PGD (fixed step 2.5 * eps / n_iter, cross-entropy, random start), ``n_iter`` steps."""

    name: ClassVar[str] = "pgd"
    defaults: ClassVar[dict[str, Any]] = {"n_iter": 20, "step_size": None, "batch_size": 500}

    def components(self, model: nn.Module, n_classes: int) -> list[Component]:
        gen: dict[str, torch.Generator] = {}

        def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            if "g" not in gen:
                gen["g"] = torch.Generator(device=x.device).manual_seed(self.seed)
            return pgd(model, x, y, self.eps, steps=int(self.options["n_iter"]), step_size=self.options["step_size"],
                       norm=self.norm, random_start=True, generator=gen["g"])

        return [Component("pgd", fn)]


class APGDEnsemble(Attack):
    """Our APGD-CE then APGD-T (targeted DLR) on the model's own output (exact or bypass gradients)."""

    name: ClassVar[str] = "apgd"
    defaults: ClassVar[dict[str, Any]] = {"n_iter": 100, "n_target_classes": 9, "n_restarts": 1, "batch_size": 500,
                                          "components": None}

    def components(self, model: nn.Module, n_classes: int) -> list[Component]:
        n_targets = effective_n_targets(n_classes, int(self.options["n_target_classes"]))
        kinds = [k for k in _select(self.options, ("apgd-ce", "apgd-t"), self.name) if k != "apgd-t" or n_targets]
        return [_ours(k, model, self.options, self.eps, self.norm, self.seed, n_targets) for k in kinds]


class AutoAttackEval(Attack):
    """Standard AutoAttack from ``pyautoattack`` (APGD-CE, APGD-T, FAB-T, Square), run component by component;
    models with a ``gradient`` attribute are attacked in ``"bypass"`` mode (App. B.2.2)."""

    name: ClassVar[str] = "autoattack"
    defaults: ClassVar[dict[str, Any]] = {"n_iter": 100, "n_target_classes": 9, "n_restarts": 1, "n_queries": 5000,
                                          "batch_size": 500, "components": None}

    def components(self, model: nn.Module, n_classes: int) -> list[Component]:
        return self._standard(model, n_classes, _select(self.options, AUTOATTACK_COMPONENTS, self.name))

    def _standard(self, model: nn.Module, n_classes: int, chosen: list[str]) -> list[Component]:
        n_targets = effective_n_targets(n_classes, int(self.options["n_target_classes"]))
        kinds = [k for k in chosen if k in AUTOATTACK_COMPONENTS and (k not in ("apgd-t", "fab-t") or n_targets)]
        return [_pyautoattack(k, model, self.options, self.eps, self.norm, self.seed, n_targets, "bypass")
                for k in kinds]


class AdaptiveAutoAttack(AutoAttackEval):
    """Transfer-based adaptive AutoAttack (App. B.2.1) plus AutoAttack's own APGD-CE and FAB-T on the exact
    gradient (``apgd-ce-exact``, ``fab-t-exact``; :data:`ADAPTIVE_DEFAULT`, the others of
    :data:`ADAPTIVE_COMPONENTS` by ``components=``); standard AutoAttack for models without ``forward_pair``."""

    name: ClassVar[str] = "adaptive"
    available: ClassVar[tuple[str, ...]] = ADAPTIVE_COMPONENTS
    default_components: ClassVar[tuple[str, ...] | None] = ADAPTIVE_DEFAULT
    code_version: ClassVar[str | None] = "lean-1"  # in the cache key: the default components and early stopping

    def components(self, model: nn.Module, n_classes: int) -> list[Component]:
        chosen = _select(self.options, self.available, self.name, self.default_components)
        if not isinstance(model, PairedOutput):
            # a single model: standard AutoAttack, whose components already have the model's own (exact) gradient,
            # so "apgd-ce-exact" asks for "apgd-ce"; with per-example randomness our APGD (the same algorithm,
            # AutoAttack's trajectories) replaces its APGD
            chosen = list(dict.fromkeys(k.removesuffix("-exact") for k in chosen))
            comps = self._standard(model, n_classes, chosen)
            if self.per_example:
                n_targets = effective_n_targets(n_classes, int(self.options["n_target_classes"]))
                comps = [_ours(c.name, model, self.options, self.eps, self.norm, self.seed, n_targets)
                         if c.name in ("apgd-ce", "apgd-t")
                         else _square_each(model, self.options, self.eps, self.norm, self.seed)
                         if c.name == "square" else c for c in comps]
            if "autoattack-standard" in chosen and hasattr(model, "gradient"):  # a mixed classifier without Eq. 8
                n_targets = effective_n_targets(n_classes, int(self.options["n_target_classes"]))
                comps.append(_standard_exact(model, self.options, self.eps, self.norm, self.seed, n_targets))
            return comps
        n_targets = effective_n_targets(n_classes, int(self.options["n_target_classes"]))
        out = []
        for kind in chosen:
            if kind in ("apgd-t", "apgd-t-exact", "fab-t", "fab-t-exact") and not n_targets:
                continue
            if kind in ("apgd-ce", "apgd-t"):
                out.append(_ours(kind, model.forward_pair, self.options, self.eps, self.norm, self.seed, n_targets))
            elif kind in EXACT_APGD:
                comp = _ours(kind.removesuffix("-exact"), with_gradient(model, "exact"), self.options, self.eps,
                             self.norm, self.seed, n_targets)
                comp.name = kind
                out.append(comp)
            elif kind == "fab-t-exact":
                comp = _pyautoattack("fab-t", model, self.options, self.eps, self.norm, self.seed, n_targets, "exact")
                comp.name = kind
                out.append(comp)
            elif kind == "autoattack-standard":
                out.append(_standard_exact(model, self.options, self.eps, self.norm, self.seed, n_targets))
            elif kind == "square" and self.per_example:
                out.append(_square_each(model, self.options, self.eps, self.norm, self.seed))
            else:
                out.append(_pyautoattack(kind, model, self.options, self.eps, self.norm, self.seed, n_targets,
                                         "bypass" if kind == "fab-t" else None))
        return out


def extra_apgd(model: nn.Module, opts: dict[str, Any], eps: float, norm: str, n_targets: int, *,
               modes: tuple[str, ...] = (), seeds: dict[str, int] | None = None, seed: int = 0) -> list[Component]:
    """APGD-CE (+ APGD-T) on other gradients than the adaptive attack's: for each gradient ``mode`` of a mixed
    classifier (``exact``, ``bypass``; App. B.2.2) at ``seed``, named ``KIND-MODE``, and with the transfer gradient
    (the model's own for a single model) for each labelled seed, named ``KIND-LABEL``."""
    kinds = ["apgd-ce"] + (["apgd-t"] if n_targets else [])
    out: list[Component] = []
    for mode in modes:
        for kind in kinds:
            comp = _ours(kind, with_gradient(model, mode), opts, eps, norm, seed, n_targets)
            comp.name = f"{kind}-{mode}"
            out.append(comp)
    forward = model.forward_pair if isinstance(model, PairedOutput) else model
    for label, value in (seeds or {}).items():
        for kind in kinds:
            comp = _ours(kind, forward, opts, eps, norm, value, n_targets)
            comp.name = f"{kind}-{label}"
            out.append(comp)
    return out


class AdaptiveStrong(AdaptiveAutoAttack):
    """The adaptive attack plus more gradient attacks before FAB-T and Square, for numbers one can lean on.

    App. B.2.1's transfer-based APGD leaves examples that other gradients break (``benchmarks/attack_strength.py``:
    on the Fashion-MNIST pair, exact-gradient, bypass-gradient and re-seeded transfer APGD each broke 1-2 of the
    ~690 examples the adaptive attack then left robust, different ones; the exact-gradient APGD is part of
    ``adaptive``). So after the transfer and exact APGD-CE and APGD-T this runs, on what is still robust, APGD-CE +
    APGD-T on the bypass gradient of App. B.2.2, and with the transfer gradient again for each of ``extra_seeds``
    new seeds (and the exact APGD here if it was left out of ``components``); single models get the
    re-seeded APGD-CE + APGD-T. Last, for mixed classifiers, ``autoattack-standard`` (:func:`_standard_exact`): the
    installed AutoAttack's standard evaluation on the exact classifier from the clean images, so the worst case
    contains what a user's own AutoAttack run finds on the same batch and seed. Costs about 2-4x the
    gradient part of ``adaptive`` plus one standard AutoAttack run.
    """

    name: ClassVar[str] = "adaptive-strong"
    # autoattack-standard records its stand-alone breaks and runs on every mixed classifier (those without
    # forward_pair too, e.g. adaptive smoothing): outcomes cached before are attacked again
    code_version: ClassVar[str | None] = "aa-standard-2"
    available: ClassVar[tuple[str, ...]] = STRONG_COMPONENTS
    default_components: ClassVar[tuple[str, ...] | None] = None  # all of them
    defaults: ClassVar[dict[str, Any]] = {**AdaptiveAutoAttack.defaults, "extra_seeds": 1}

    def components(self, model: nn.Module, n_classes: int) -> list[Component]:
        base = super().components(model, n_classes)
        n_targets = effective_n_targets(n_classes, int(self.options["n_target_classes"]))
        mixed = isinstance(model, PairedOutput) and offers(model, "bypass")
        extra = extra_apgd(model, self.options, self.eps, self.norm, n_targets,
                           modes=("exact", "bypass") if mixed else (), seed=self.seed,
                           seeds={f"seed{k}": self.seed + 1000 * k
                                  for k in range(1, int(self.options["extra_seeds"]) + 1)})
        have = {c.name for c in base}
        extra = [c for c in extra if c.name not in have]  # the exact APGD is already adaptive's, unless deselected
        at = next((i for i, c in enumerate(base) if c.name in ("fab-t", "fab-t-exact", "square",
                                                                "autoattack-standard")), len(base))
        return base[:at] + extra + base[at:]


class AdaptiveAPGD(AdaptiveAutoAttack):
    """The gradient half of the adaptive attack: transfer-based APGD-CE + APGD-T for mixed classifiers (App. B.2.1),
    AutoAttack's APGD-CE + APGD-T for single models. No FAB-T and no Square, so several times cheaper than
    ``adaptive`` on a CPU, but without Square's check for gradient masking."""

    name: ClassVar[str] = "adaptive-apgd"
    defaults: ClassVar[dict[str, Any]] = {**AdaptiveAutoAttack.defaults, "components": ["apgd-ce", "apgd-t"]}
    code_version: ClassVar[str | None] = None  # its components are unaffected by adaptive's code_version


class MinMarginSquareAttack(Attack):
    """Min-margin Square as a robustness evaluation (attack hook name ``min-margin-square``): a purely
    gradient-free check, judged on the model's own output (App. B.2.1 uses Square to detect gradient masking)."""

    name: ClassVar[str] = "min-margin-square"
    defaults: ClassVar[dict[str, Any]] = {"n_queries": 5000, "p_init": 0.8, "batch_size": 500, "layer_norm": False}

    def components(self, model: nn.Module, n_classes: int) -> list[Component]:
        opts = self.options

        def fn(x: torch.Tensor, y: torch.Tensor, index: torch.Tensor | None = None) -> torch.Tensor:
            return min_margin_square(model, x, y, eps=self.eps, norm=self.norm, n_queries=int(opts["n_queries"]),
                                     p_init=float(opts["p_init"]), seed=self.seed,
                                     layer_norm=bool(opts["layer_norm"]), batch_size=int(opts["batch_size"]),
                                     progress=False, index=index).adv_images

        return [Component("min-margin-square", fn, gradient_based=False, per_example=True)]
