"""How an evaluation runs, as data: one :class:`RunSettings` shared by ``bench``, ``sanity``, ``certify`` and
``verify`` (:func:`mixzoo.evaluation.bench.bench`, :func:`mixzoo.evaluation.sanity.eps_sweep`,
:func:`mixzoo.certify.certify`, :func:`mixzoo.evaluation.verify.verify_report`).

Each of those functions takes a card (or report), a ``RunSettings`` and the few arguments only it has; keyword
arguments named after settings fields change a copy of the settings (``bench(card, n=200)`` is
``bench(card, RunSettings(n=200))``). A field a function does not use is ignored by it (``verify`` runs no attack).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mixzoo.core.errors import InputError

if TYPE_CHECKING:
    from torch import nn

DEFAULT_ATTACK = "adaptive"  # the shared attack when neither the command nor its budget names one


@dataclass(frozen=True)
class RunSettings:
    """The settings every evaluation of a card shares.

    ``attack`` / ``attack_options``: the shared attack (an attack plugin's name and options; every row gets it, a
    card's row also its method's extra attacks unless ``extra_attacks`` is false); ``eps`` / ``norm``: the threat
    model (default: the card's, else the RBC's); ``n``: evaluation images (the first n of the split);
    ``batch_size``: images per attack batch (``"auto"``: :func:`mixzoo.attacks.memory.auto_batch_size`);
    ``seed`` and ``per_example_seeds``: every random draw is a function
    of (seed, example index) when true (:mod:`mixzoo.core.rng`), else of (seed + batch number); ``abc`` / ``rbc``:
    models replacing the card's; ``precision``: the arithmetic of the attacks' forward and backward passes,
    ``"float32"``, ``"tf32"``, ``"bf16"`` (bfloat16 autocast) or ``"auto"`` (:mod:`mixzoo.attacks.precision`;
    every break is re-checked in float32 on the exact classifier, :meth:`mixzoo.attacks.base.Attack.run`);
    ``budget``: how much every component of the evaluation spends, ``"quick"``, ``"standard"`` or ``"strong"``
    (:data:`mixzoo.core.budget.BUDGETS`: caps on the shared and the declared attacks' counts, the matched
    baseline's and the curve's settings; ``attack=None`` takes the budget's attack, else the command's default);
    ``device`` (``"auto"``: ``"cuda"`` when a GPU is visible, else ``"cpu"``, resolved when the settings are made),
    ``data_dir``, ``cache_dir`` / ``use_cache``, ``allow_unsafe`` (pickled checkpoints) and ``progress`` (bars on
    stderr) as their names say.
    """

    attack: str | None = DEFAULT_ATTACK
    attack_options: dict[str, Any] = field(default_factory=dict)
    eps: float | None = None
    norm: str | None = None
    n: int = 1000
    batch_size: int | str = 250  # or "auto" (mixzoo bench: from the device's free memory)
    seed: int = 0
    per_example_seeds: bool = True
    extra_attacks: bool = True
    abc: str | nn.Module | None = None
    rbc: str | nn.Module | None = None
    device: str = "cpu"
    precision: str = "float32"
    budget: str = "standard"
    data_dir: str | None = None
    cache_dir: str | Path | None = None
    use_cache: bool = True
    allow_unsafe: bool = False
    progress: bool = True

    def __post_init__(self) -> None:
        check_precision(self.precision)
        if self.device == "auto":  # resolved once, here, so that reports record the device that ran
            from mixzoo.core.machine import resolve_device

            object.__setattr__(self, "device", resolve_device(self.device))
        from mixzoo.core.budget import budget_of

        budget_of(self.budget)

    def changed(self, **changes: Any) -> RunSettings:
        """A copy with ``changes``; an unknown name is a one-line error listing the fields."""
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            names = ", ".join(f.name for f in dataclasses.fields(self))
            raise InputError(f"unknown setting {unknown[0]!r}; the settings are {names}")
        if changes.get("attack_options") is None and "attack_options" in changes:
            changes["attack_options"] = {}
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The settings as plain values (models as their names or class names), for reports."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for role in ("abc", "rbc"):
            if out[role] is not None and not isinstance(out[role], str):
                out[role] = type(out[role]).__name__
        out["cache_dir"] = None if out["cache_dir"] is None else str(out["cache_dir"])
        return out


PRECISIONS = ("float32", "tf32", "bf16", "auto")


def check_precision(precision: Any) -> str:
    """``precision`` if it is one of :data:`PRECISIONS`, else a one-line error naming them."""
    if precision not in PRECISIONS:
        raise InputError(f"unknown precision {precision!r}; choose {', '.join(PRECISIONS)} (--precision)")
    return precision


def settings_of(settings: RunSettings | None, changes: dict[str, Any], **defaults: Any) -> RunSettings:
    """``settings`` (else ``RunSettings(**defaults)``) with ``changes``."""
    base = settings if settings is not None else RunSettings().changed(**defaults)
    return base.changed(**changes) if changes else base


__all__ = ["PRECISIONS", "RunSettings", "check_precision", "settings_of"]
