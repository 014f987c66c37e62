"""Robustness evaluations by name (Bai et al. 2024a, Sec. 5, App. B.2), each a sequence of components run by
:class:`mixzoo.attacks.base.Attack`; the components built on the installed AutoAttack are in
:mod:`mixzoo.attacks.adapters`.

* ``pgd``: plain fixed-step PGD on the cross-entropy (:func:`mixzoo.attacks.pgd.pgd`).
* ``apgd``: our APGD-CE + APGD-T (targeted DLR, 9 targets) on the model's own output and gradient (a mixing
  method's gradient variant when the model was built as one, :mod:`mixzoo.attacks.variants`).
* ``autoattack``: standard AutoAttack (APGD-CE, APGD-T, FAB-T, Square) from the installed ``pyautoattack`` package,
  on the model's ``bypass`` gradient variant where it offers one (App. B.2.2, how the RobustBench entry was
  evaluated).
* ``adaptive``: transfer-based adaptive AutoAttack (App. B.2.1) that contains standard AutoAttack
  (:class:`AdaptiveAutoAttack`). Its components (:data:`ADAPTIVE_COMPONENTS`, by default :data:`ADAPTIVE_DEFAULT`):
  ``apgd-ce`` / ``apgd-t`` take loss and gradients from the auxiliary differentiable mixture (second output of
  ``forward_pair``, Eq. 8) while success and the kept point are judged on the true MixedNUTS output;
  ``apgd-ce-exact`` / ``apgd-t-exact``, the same APGD on the exact gradient of the mixture formula (what standard
  AutoAttack run on the classifier uses); ``fab-t-exact`` and ``fab-t``, pyautoattack's FAB-T on the exact and on
  the bypass gradient (output values MixedNUTS's, gradients the auxiliary mixture's, App. B.2.2); then Square on
  the true output. ``apgd-t-exact`` and ``fab-t`` are left out of the default: run after the default's gradient
  stages they broke no example on the measured runs (``benchmarks/autoattack_parity.md``,
  ``benchmarks/eval_speed_digits_cpu_all7.md``) while costing almost half of standard AutoAttack's time. A model
  without ``forward_pair`` gets standard AutoAttack. Our APGD drops an example the moment a misclassified point is
  recorded for it, and on a GPU runs APGD-T's targets as one stacked batch as far as the free memory holds them
  (:func:`mixzoo.attacks.apgd.apgd_t`), and Square on :data:`mixzoo.attacks.base.FORWARD_ONLY_BATCHES` attack
  batches at once; none of this changes which examples break.
* ``adaptive-strong``: more gradient attacks and AutoAttack's own standard evaluation (:class:`AdaptiveStrong`).

Why each component uses the gradient it does: the design note "Parity with AutoAttack" (``docs/design.md``). FAB-T
with one restart draws no random numbers, so ``fab-t-exact`` breaks every example standard AutoAttack's FAB-T
breaks; APGD and Square draw per example here (below), so their breaks match AutoAttack's in distribution.

Per-example randomness (the bench's default). Given the examples' indices (``run(..., index=...)``), ``adaptive``
draws every random number per example: our APGD-CE / APGD-T (AutoAttack's algorithm and trajectories) replace
pyautoattack's for single models, and Square is :func:`mixzoo.attacks.square.min_margin_square` with AutoAttack's
margin loss on the logits (``loss="logit"``, ``p_init`` 0.8). So an example's outcome does not depend on the batch
size or the number of processes. Components that keep their batch's stream (pyautoattack's APGD in
``autoattack``, ``autoattack-standard``, PGD) say so in the result's warnings. Without indices, pyautoattack's
Square runs instead.
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
# the adaptive attack's components, in order (module docstring)
ADAPTIVE_COMPONENTS = ("apgd-ce", "apgd-t", "apgd-ce-exact", "apgd-t-exact", "fab-t", "fab-t-exact", "square")
ADAPTIVE_DEFAULT = ("apgd-ce", "apgd-t", "apgd-ce-exact", "fab-t-exact", "square")  # the others by components=
EXACT_APGD = ("apgd-ce-exact", "apgd-t-exact")
# adaptive-strong adds, last, the whole standard AutoAttack on the exact classifier from the clean images
STRONG_COMPONENTS = (*ADAPTIVE_COMPONENTS, "autoattack-standard")


def _n_targets(attack: Attack, n_classes: int) -> int:
    """The APGD-T / FAB-T targets ``attack``'s options ask for on a model of ``n_classes`` outputs."""
    return effective_n_targets(n_classes, int(attack.options["n_target_classes"]))


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
        n_targets = _n_targets(self, n_classes)
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
        n_targets = _n_targets(self, n_classes)
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
        n_targets = _n_targets(self, n_classes)
        run = (self.options, self.eps, self.norm, self.seed)
        if not isinstance(model, PairedOutput):
            # a single model: standard AutoAttack, whose components already have the model's own (exact) gradient,
            # so "apgd-ce-exact" asks for "apgd-ce"; with per-example randomness our APGD (the same algorithm,
            # AutoAttack's trajectories) replaces its APGD
            chosen = list(dict.fromkeys(k.removesuffix("-exact") for k in chosen))
            comps = self._standard(model, n_classes, chosen)
            if self.per_example:
                comps = [_ours(c.name, model, *run, n_targets) if c.name in ("apgd-ce", "apgd-t")
                         else _square_each(model, *run) if c.name == "square" else c for c in comps]
            if "autoattack-standard" in chosen and hasattr(model, "gradient"):  # a mixed classifier without Eq. 8
                comps.append(_standard_exact(model, *run, n_targets))
            return comps
        out = []
        for kind in chosen:
            base = kind.removesuffix("-exact")
            if base in ("apgd-t", "fab-t") and not n_targets:
                continue
            if kind in ("apgd-ce", "apgd-t"):
                out.append(_ours(kind, model.forward_pair, *run, n_targets))
            elif kind in EXACT_APGD:
                out.append(_ours(base, with_gradient(model, "exact"), *run, n_targets, name=kind))
            elif kind == "fab-t-exact":
                out.append(_pyautoattack(base, model, *run, n_targets, "exact", name=kind))
            elif kind == "autoattack-standard":
                out.append(_standard_exact(model, *run, n_targets))
            elif kind == "square" and self.per_example:
                out.append(_square_each(model, *run))
            else:
                out.append(_pyautoattack(kind, model, *run, n_targets, "bypass" if kind == "fab-t" else None))
        return out


def extra_apgd(model: nn.Module, opts: dict[str, Any], eps: float, norm: str, n_targets: int, *,
               modes: tuple[str, ...] = (), seeds: dict[str, int] | None = None, seed: int = 0) -> list[Component]:
    """APGD-CE (+ APGD-T) on other gradients than the adaptive attack's: for each gradient ``mode`` of a mixed
    classifier (``exact``, ``bypass``; App. B.2.2) at ``seed``, named ``KIND-MODE``, and with the transfer gradient
    (the model's own for a single model) for each labelled seed, named ``KIND-LABEL``."""
    kinds = ["apgd-ce"] + (["apgd-t"] if n_targets else [])
    forward = model.forward_pair if isinstance(model, PairedOutput) else model
    runs = [(mode, with_gradient(model, mode), seed) for mode in modes]
    runs += [(label, forward, value) for label, value in (seeds or {}).items()]
    return [_ours(kind, fwd, opts, eps, norm, at, n_targets, name=f"{kind}-{label}")
            for label, fwd, at in runs for kind in kinds]


class AdaptiveStrong(AdaptiveAutoAttack):
    """The adaptive attack plus more gradient attacks before FAB-T and Square, for numbers one can lean on.

    App. B.2.1's transfer-based APGD leaves examples that other gradients break (``benchmarks/attack_strength.py``:
    on the Fashion-MNIST pair, exact-gradient, bypass-gradient and re-seeded transfer APGD each broke 1-2 of the
    ~690 examples the adaptive attack then left robust, different ones). So after ``adaptive``'s components (all of
    them by default) this runs, on what is still robust before FAB-T and Square, APGD-CE + APGD-T on the exact
    and the bypass gradient of App. B.2.2 (:func:`extra_apgd`; the exact one only if ``components`` left it out) and
    with the transfer gradient again for each of ``extra_seeds`` new seeds; single models get the re-seeded APGD-CE
    + APGD-T. Last, for mixed classifiers, ``autoattack-standard`` (:func:`~mixzoo.attacks.adapters._standard_exact`):
    the installed AutoAttack's standard evaluation on the exact classifier from the clean images, so the worst case
    contains what a user's own AutoAttack run finds on the same batch and seed. Costs about 2-4x the gradient part
    of ``adaptive`` plus one standard AutoAttack run.
    """

    name: ClassVar[str] = "adaptive-strong"
    # autoattack-standard records its stand-alone breaks and runs on every mixed classifier (those without
    # forward_pair too, e.g. adaptive smoothing): outcomes cached before are attacked again
    code_version: ClassVar[str | None] = "aa-standard-2"
    available: ClassVar[tuple[str, ...]] = STRONG_COMPONENTS
    default_components: ClassVar[tuple[str, ...] | None] = None  # all of them
    options_spec: ClassVar[dict[str, OptionSpec]] = {
        **AdaptiveAutoAttack.options_spec,
        "extra_seeds": OptionSpec("extra re-seeded APGD runs of each gradient (0: none)", int, 1, low=0, high=100)}

    def components(self, model: nn.Module, n_classes: int) -> list[Component]:
        base = super().components(model, n_classes)
        mixed = isinstance(model, PairedOutput) and offers(model, "bypass")
        extra = extra_apgd(model, self.options, self.eps, self.norm, _n_targets(self, n_classes),
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
