"""Every built-in attack, registered here in one place through the attack hook like any third party's (``mixzoo
bench --attack NAME``)."""

from __future__ import annotations

from typing import Any

from mixzoo.core.plugins import hookimpl


@hookimpl
def mixzoo_attacks() -> dict[str, Any]:
    """``pgd``, ``apgd``, ``autoattack``, ``adaptive``, ``adaptive-strong`` and ``adaptive-apgd``
    (see :mod:`mixzoo.attacks.evaluation`), and ``adaptive-smoothing-apgd`` (setting D and the attack on the mixing
    network alone, :mod:`mixzoo.methods.adaptive.attacks`); ``adaptive-smoothing-gate`` and
    ``local-smoothing-policy-gate`` (the attacks on a learned gate's logit, :mod:`mixzoo.methods.adaptive.gate_attacks`,
    :mod:`mixzoo.methods.local_smoothing.policy_attacks`); ``fast``, the screening attack with MALT's target
    selection (:mod:`mixzoo.attacks.screening`); ``min-margin-square``, the minimum-margin Square attack as a
    gradient-free evaluation (forward queries only: any model, black boxes included; Bai et al. 2024a, App. D.5)."""
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

    attacks: dict[str, Any] = {
        "pgd": PGDAttack,
        "apgd": APGDEnsemble,
        "autoattack": AutoAttackEval,
        "adaptive": AdaptiveAutoAttack,
        "adaptive-apgd": AdaptiveAPGD,
        "adaptive-strong": AdaptiveStrong,
        "fast": FastScreening,
        "adaptive-smoothing-apgd": AlphaAPGD,
        "adaptive-smoothing-gate": AdaptiveGateAttack,
        "local-smoothing-policy-gate": PolicyGateAttack,
        "min-margin-square": MinMarginSquareAttack,
    }
    return attacks
