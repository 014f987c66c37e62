"""Built-in attacks, all registered here through the attack hook like any third party's
(``mixzoo bench --attack NAME``)."""

from __future__ import annotations

from typing import Any

from mixzoo.core.plugins import hookimpl

PROVIDES = {  # what `mixzoo plugins` lists
    "attacks": ["adaptive", "adaptive-apgd", "adaptive-smoothing-apgd", "adaptive-smoothing-gate", "adaptive-strong",
                "apgd", "autoattack", "fast", "local-smoothing-policy-gate", "min-margin-square", "pgd"]}


@hookimpl
def mixzoo_attacks() -> dict[str, Any]:
    """``pgd``, ``apgd``, ``autoattack``, ``adaptive``, ``adaptive-strong`` and ``adaptive-apgd``
    (see :mod:`mixzoo.attacks.suites`); ``min-margin-square``, the minimum-margin Square attack as a gradient-free
    robustness evaluation (forward queries only, so usable on black boxes; Bai et al. 2024a, App. D.5);
    ``adaptive-smoothing-apgd`` (setting D and the attack on the mixing network alone,
    :mod:`mixzoo.methods.adaptive.attacks`); ``adaptive-smoothing-gate`` and ``local-smoothing-policy-gate`` (the
    attacks on a learned gate's logit, :mod:`mixzoo.methods.adaptive.gate_attacks`,
    :mod:`mixzoo.methods.local_smoothing.policy_attacks`); ``fast``, the screening attack with MALT's target
    selection (:mod:`mixzoo.attacks.screening`)."""
    from mixzoo.attacks.screening import FastScreening
    from mixzoo.attacks.suites import (
        AdaptiveAPGD,
        AdaptiveAutoAttack,
        AdaptiveStrong,
        APGDEnsemble,
        AutoAttackEval,
        MinMarginSquareAttack,
        PGDAttack,
    )
    from mixzoo.methods.adaptive.attacks import AlphaAPGD
    from mixzoo.methods.adaptive.gate_attacks import AdaptiveGateAttack
    from mixzoo.methods.local_smoothing.policy_attacks import PolicyGateAttack

    return {
        "pgd": PGDAttack,
        "apgd": APGDEnsemble,
        "autoattack": AutoAttackEval,
        "adaptive": AdaptiveAutoAttack,
        "adaptive-apgd": AdaptiveAPGD,
        "adaptive-strong": AdaptiveStrong,
        "min-margin-square": MinMarginSquareAttack,
        "fast": FastScreening,
        "adaptive-smoothing-apgd": AlphaAPGD,
        "adaptive-smoothing-gate": AdaptiveGateAttack,
        "local-smoothing-policy-gate": PolicyGateAttack,
    }
