"""Schema-1 mix cards (a method's parameters at the top level) read as schema 2 (:mod:`mixzoo.core.card`): each
method plugin may claim one (:meth:`mixzoo.methods.MixingMethod.upgrade_v1`) and say what to re-run
(:meth:`~mixzoo.methods.MixingMethod.v1_warning`). :meth:`mixzoo.core.card.MixCard.load` upgrades on reading.
"""

from __future__ import annotations

import warnings
from typing import Any

from mixzoo.core.card_fields import COMMON_FIELDS, SCHEMA_VERSION, named_method
from mixzoo.core.errors import InputError


def upgrade_v1(data: dict[str, Any], source: str) -> dict[str, Any]:
    """A schema-1 card as a schema-2 table: the claiming method's section, its ``v1_warning`` issued as a warning."""
    method, params = _claim_v1(data, source)
    note = named_method(method, source).v1_warning(data)
    if note:
        warnings.warn(f"{source}: {note}", stacklevel=3)  # the caller of MixCard.load
    common = {k: data[k] for k in COMMON_FIELDS if k in data and k not in ("schema_version", "method")}
    return {**common, "schema_version": SCHEMA_VERSION, "method": method, method: params}


def _claim_v1(data: dict[str, Any], source: str) -> tuple[str, dict[str, Any]]:
    """The (method, section) of a schema-1 card (or keyword form): the first method plugin that claims it."""
    from mixzoo.core.plugins import mixing_methods

    for name, method in sorted(mixing_methods().items()):
        params = method.upgrade_v1(data, source)
        if params is not None:
            return name, params
    raise InputError(f"{source}: a schema-1 card that no installed mixing method reads; re-create it with"
                     " `mixzoo mix`")


__all__ = ["upgrade_v1"]
