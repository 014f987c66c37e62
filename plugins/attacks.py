"""Built-in attacks, registered through the attack hook like any third party's (``mixzoo bench --attack NAME``)."""

from __future__ import annotations

from typing import Any

from mixzoo.plugins import hookimpl


@hookimpl
def mixzoo_attacks() -> dict[str, Any]:
    """``pgd``, ``apgd``, ``autoattack`` and ``adaptive`` (see :mod:`mixzoo.attacks.evaluation`)."""
    from mixzoo.attacks.evaluation import AdaptiveAutoAttack, APGDEnsemble, AutoAttackEval, PGDAttack

    attacks: dict[str, Any] = {
        "pgd": PGDAttack,
        "apgd": APGDEnsemble,
        "autoattack": AutoAttackEval,
        "adaptive": AdaptiveAutoAttack,
    }
    # "square" (min-margin Square, mixzoo.attacks.square) is added here by its author when it lands.
    return attacks
