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
    # The min-margin Square attack is provided by the transfer plugin (plugins/transfer.py) as "min-margin-square".
    return attacks
