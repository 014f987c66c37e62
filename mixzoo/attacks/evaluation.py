"""Former home of the robustness evaluations, kept so that imports from it keep working: the evaluation base
(:class:`Attack`, :class:`Component`, the run loop) is :mod:`mixzoo.attacks.base`, the components around the
installed AutoAttack (:class:`FiniteGuard`) :mod:`mixzoo.attacks.adapters`, the evaluations by name
(``pgd``, ``apgd``, ``autoattack``, ``adaptive``, ...) :mod:`mixzoo.attacks.suites`."""

from mixzoo.attacks.adapters import FiniteGuard, _ours, _pyautoattack, _square_each, _standard_exact
from mixzoo.attacks.base import (
    FORWARD_ONLY_BATCHES,
    SQUARE_MASKING,
    Attack,
    Component,
    _select,
    forward_only_batches,
    square_masking_note,
    within_threat_model,
)
from mixzoo.attacks.suites import (
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
    "ADAPTIVE_COMPONENTS", "ADAPTIVE_DEFAULT", "APGDEnsemble", "AUTOATTACK_COMPONENTS", "AdaptiveAPGD",
    "AdaptiveAutoAttack", "AdaptiveStrong", "Attack", "AutoAttackEval", "Component", "EXACT_APGD",
    "FORWARD_ONLY_BATCHES", "FiniteGuard", "MinMarginSquareAttack", "PGDAttack", "SQUARE_MASKING",
    "STRONG_COMPONENTS", "_ours", "_pyautoattack", "_select", "_square_each", "_standard_exact", "extra_apgd",
    "forward_only_batches", "square_masking_note", "within_threat_model",
]
