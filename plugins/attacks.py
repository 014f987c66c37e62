"""Built-in attacks, registered through the attack hook like any third party's (``mixzoo bench --attack NAME``)."""

from __future__ import annotations

from typing import Any

from mixzoo.core.plugins import hookimpl


@hookimpl
def mixzoo_attacks() -> dict[str, Any]:
    """``pgd``, ``apgd``, ``autoattack``, ``adaptive``, ``adaptive-strong`` and ``adaptive-apgd``
    (see :mod:`mixzoo.attacks.evaluation`)."""
    from mixzoo.attacks.evaluation import (
        AdaptiveAPGD,
        AdaptiveAutoAttack,
        AdaptiveStrong,
        APGDEnsemble,
        AutoAttackEval,
        PGDAttack,
    )

    attacks: dict[str, Any] = {
        "pgd": PGDAttack,
        "apgd": APGDEnsemble,
        "autoattack": AutoAttackEval,
        "adaptive": AdaptiveAutoAttack,
        "adaptive-apgd": AdaptiveAPGD,
        "adaptive-strong": AdaptiveStrong,
    }
    # The min-margin Square attack is provided by the transfer plugin (plugins/transfer.py) as "min-margin-square".
    return attacks
