"""Built-in attacks for any classifier, registered through the attack hook like any third party's
(``mixzoo bench --attack NAME``); the attacks made for one method's classifier are registered by the methods' plugin,
beside the method (:mod:`mixzoo_plugins.methods`)."""

from __future__ import annotations

from typing import Any

from mixzoo.core.plugins import hookimpl

PROVIDES = {  # what `mixzoo plugins` lists
    "attacks": ["adaptive", "adaptive-apgd", "adaptive-strong", "apgd", "autoattack", "fast", "min-margin-square",
                "pgd"]}


@hookimpl
def mixzoo_attacks() -> dict[str, Any]:
    """``pgd``, ``apgd``, ``autoattack``, ``adaptive``, ``adaptive-strong`` and ``adaptive-apgd``
    (see :mod:`mixzoo.attacks.suites`); ``min-margin-square``, the minimum-margin Square attack as a gradient-free
    robustness evaluation (forward queries only, so usable on black boxes; Bai et al. 2024a, App. D.5); ``fast``,
    the screening attack with MALT's target selection (:mod:`mixzoo.attacks.screening`)."""
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

    return {"pgd": PGDAttack, "apgd": APGDEnsemble, "autoattack": AutoAttackEval, "adaptive": AdaptiveAutoAttack,
            "adaptive-apgd": AdaptiveAPGD, "adaptive-strong": AdaptiveStrong,
            "min-margin-square": MinMarginSquareAttack, "fast": FastScreening}
