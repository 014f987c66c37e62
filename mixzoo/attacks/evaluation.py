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

The code is in three modules: :mod:`mixzoo.attacks.base` (the :class:`Attack` base and its run loop,
:class:`Component`), :mod:`mixzoo.attacks.adapters` (the components: ours and the installed ``pyautoattack``'s)
and :mod:`mixzoo.attacks.suites` (the attacks above); this module gives their names in one place.
"""

from __future__ import annotations

from mixzoo.attacks.adapters import (  # noqa: F401 - re-exported
    FiniteGuard,
    _ours,
    _pyautoattack,
    _square_each,
    _standard_exact,
    select_components,
)
from mixzoo.attacks.base import (  # noqa: F401 - re-exported
    FORWARD_ONLY_BATCHES,
    SQUARE_MASKING,
    Attack,
    Component,
    _logits,
    forward_only_batches,
    square_masking_note,
    within_threat_model,
)
from mixzoo.attacks.suites import (  # noqa: F401 - re-exported
    ADAPTIVE_COMPONENTS,
    ADAPTIVE_DEFAULT,
    AUTOATTACK_COMPONENTS,
    EXACT_APGD,
    STRONG_COMPONENTS,
    AdaptiveAPGD,
    AdaptiveAutoAttack,
    AdaptiveStrong,
    APGDEnsemble,
    AutoAttackEval,
    MinMarginSquareAttack,
    PGDAttack,
    extra_apgd,
)

__all__ = [
    "ADAPTIVE_COMPONENTS", "ADAPTIVE_DEFAULT", "AdaptiveAPGD", "AdaptiveAutoAttack", "AdaptiveStrong",
    "APGDEnsemble", "Attack", "AUTOATTACK_COMPONENTS", "AutoAttackEval", "Component", "EXACT_APGD",
    "extra_apgd", "FiniteGuard", "forward_only_batches", "FORWARD_ONLY_BATCHES", "MinMarginSquareAttack",
    "PGDAttack", "select_components", "SQUARE_MASKING", "square_masking_note", "STRONG_COMPONENTS",
    "within_threat_model",
]
