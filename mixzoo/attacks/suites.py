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
  and Square, which holds no autograd graph, on :data:`mixzoo.attacks.base.FORWARD_ONLY_BATCHES` attack batches
  at once; none of this changes which examples break.
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

The run loop every evaluation shares is :class:`mixzoo.attacks.base.Attack`; the components built on the
installed AutoAttack are in :mod:`mixzoo.attacks.adapters`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

import torch
from torch import nn

from mixzoo.attacks.adapters import _ours, _pyautoattack, _square_each, _standard_exact
from mixzoo.attacks.apgd import effective_n_targets
from mixzoo.attacks.base import (
    BATCH_SIZE,
    COMPONENTS_OPTION,
    N_ITER,
    N_QUERIES,
    N_RESTARTS,
    N_TARGET_CLASSES,
    Attack,
    Component,
    select_components,
)
from mixzoo.attacks.pgd import pgd
from mixzoo.attacks.square import SquareSettings, min_margin_square
from mixzoo.attacks.variants import PairedOutput, offers, with_gradient
from mixzoo.core.options import OptionSpec

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


class PGDAttack(Attack):
    """Plain PGD (fixed step 2.5 * eps / n_iter, cross-entropy, random start), ``n_iter`` steps."""

    name: ClassVar[str] = "pgd"
    options_spec: ClassVar[dict[str, OptionSpec]] = {
        "n_iter": replace(N_ITER, help="PGD steps", default=20),
        "step_size": OptionSpec("step size (default 2.5 * eps / n_iter)", float, low=0),
        "batch_size": BATCH_SIZE}

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
    options_spec: ClassVar[dict[str, OptionSpec]] = {
        "n_iter": N_ITER, "n_target_classes": N_TARGET_CLASSES, "n_restarts": N_RESTARTS, "batch_size": BATCH_SIZE,
        "components": replace(COMPONENTS_OPTION, help="apgd-ce, apgd-t (default: both)")}

    def components(self, model: nn.Module, n_classes: int) -> list[Component]:
        n_targets = effective_n_targets(n_classes, int(self.options["n_target_classes"]))
        kinds = [k for k in select_components(self.options, ("apgd-ce", "apgd-t"), self.name)
                 if k != "apgd-t" or n_targets]
        return [_ours(k, model, self.options, self.eps, self.norm, self.seed, n_targets) for k in kinds]


class AutoAttackEval(Attack):
    """Standard AutoAttack from ``pyautoattack`` (APGD-CE, APGD-T, FAB-T, Square), run component by component;
    models with a ``gradient`` attribute are attacked in ``"bypass"`` mode (App. B.2.2)."""

    name: ClassVar[str] = "autoattack"
    options_spec: ClassVar[dict[str, OptionSpec]] = {
        "n_iter": N_ITER, "n_target_classes": N_TARGET_CLASSES, "n_restarts": N_RESTARTS, "n_queries": N_QUERIES,
        "batch_size": BATCH_SIZE, "components": COMPONENTS_OPTION}

    def components(self, model: nn.Module, n_classes: int) -> list[Component]:
        return self._standard(model, n_classes, select_components(self.options, AUTOATTACK_COMPONENTS, self.name))

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
        chosen = select_components(self.options, self.available, self.name, self.default_components)
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
    options_spec: ClassVar[dict[str, OptionSpec]] = {
        **AdaptiveAutoAttack.options_spec,
        "extra_seeds": OptionSpec("extra re-seeded APGD runs of each gradient (0: none)", int, 1, low=0)}

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
    options_spec: ClassVar[dict[str, OptionSpec]] = {
        **AdaptiveAutoAttack.options_spec, "components": replace(COMPONENTS_OPTION, default=["apgd-ce", "apgd-t"])}
    code_version: ClassVar[str | None] = None  # its components are unaffected by adaptive's code_version


class MinMarginSquareAttack(Attack):
    """Min-margin Square as a robustness evaluation (attack hook name ``min-margin-square``): a purely
    gradient-free check, judged on the model's own output (App. B.2.1 uses Square to detect gradient masking)."""

    name: ClassVar[str] = "min-margin-square"
    options_spec: ClassVar[dict[str, OptionSpec]] = {
        "n_queries": N_QUERIES,
        "p_init": OptionSpec("initial share of pixels a Square update changes (Andriushchenko et al.)", float, 0.8,
                             low=0, high=1),
        "batch_size": BATCH_SIZE,
        "layer_norm": OptionSpec("search on the layer-normed logits (MixedNUTS App. D.5) instead of the raw ones",
                                 bool, False)}

    def components(self, model: nn.Module, n_classes: int) -> list[Component]:
        opts = self.options

        def fn(x: torch.Tensor, y: torch.Tensor, index: torch.Tensor | None = None) -> torch.Tensor:
            return min_margin_square(model, x, y,
                                     SquareSettings(eps=self.eps, norm=self.norm, n_queries=int(opts["n_queries"]),
                                                    p_init=float(opts["p_init"]), seed=self.seed),
                                     layer_norm=bool(opts["layer_norm"]), batch_size=int(opts["batch_size"]),
                                     progress=False, index=index).adv_images

        return [Component("min-margin-square", fn, gradient_based=False, per_example=True)]
