"""Built-in plugin "black-box transfer calibration" (Bai et al. 2024a, App. D.5).

Calibrating MixedNUTS for a robust model without gradients is library code (:mod:`mixzoo.methods.mixednuts.transfer`,
:mod:`mixzoo.zoo.blackbox`, ``mixzoo transfer-params``); through the plugin hooks this plugin contributes the
gradient-free evaluation ``min-margin-square`` (:class:`mixzoo.attacks.evaluation.MinMarginSquareAttack`), usable as
``mixzoo bench --attack min-margin-square`` on any model, black boxes included.
"""

from __future__ import annotations

from typing import Any

from mixzoo.core.plugins import hookimpl


@hookimpl
def mixzoo_attacks() -> dict[str, Any]:
    """``min-margin-square``: the minimum-margin Square attack as a robustness evaluation (forward queries only)."""
    from mixzoo.attacks.evaluation import MinMarginSquareAttack

    return {"min-margin-square": MinMarginSquareAttack}
