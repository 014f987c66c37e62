"""The interface of a mixing method (hook ``mixzoo_mixing_methods``).

Every method of the family combines a frozen accurate base classifier g (ABC) and a frozen robust one h (RBC) into
one classifier. A method plugin says, through :class:`MixingMethod`:

- how to check its card section (:meth:`~MixingMethod.validate`: one-line errors naming ``SECTION.FIELD``);
- how to build the mixed ``nn.Module`` ([0, 1] images -> log-probabilities) from an ABC, an RBC and a card
  (:meth:`~MixingMethod.build`);
- how to fit the section from data, and what that costs (:meth:`~MixingMethod.fit`, :attr:`~MixingMethod.fit_cost`);
- which adaptive attacks an honest evaluation needs besides the bench's shared attack
  (:meth:`~MixingMethod.extra_attacks`), so that ``mixzoo bench`` runs them without knowing the method.

The core, the bench and the CLI never name a method: they look it up by the card's ``method`` field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mixzoo.core.errors import InputError

if TYPE_CHECKING:
    from torch import nn

    from mixzoo.core.card import MixCard


@dataclass(frozen=True)
class ExtraAttack:
    """An attack that an honest evaluation of a method needs besides the bench's shared attack.

    ``attack`` names an attack plugin (``mixzoo bench --attack`` names), run with ``options`` on the module
    ``build(abc, rbc, card, gradient=gradient)``; ``name`` is how the report labels its breaks; ``why`` cites the
    paper's reason in one line. Breaks are merged example by example into the row's worst case. ``seed_offset`` is
    added to the bench's seed: random draws are functions of (seed, example index), so an extra attack that repeats
    a component of the shared attack on the same output (Square) must draw at another seed, or it replays the
    shared run example by example and cannot break anything new.
    """

    name: str
    attack: str
    options: dict[str, Any] = field(default_factory=dict)
    gradient: str = "exact"
    why: str = ""
    seed_offset: int = 0


def weight_hashes(card: MixCard) -> list[str]:
    """The sha256 of a card's weight files, for cache keys: the contents, not the file names, so that a copy saved
    under another name (:meth:`MixCard.save_as`, a published card) finds the evaluations cached for the original."""
    return sorted(card.weights.values())


def square_extra(n_queries: int, why: str = "gradient-free: breaks what masked gradients hide (App. B.2.1)"
                 ) -> ExtraAttack:
    """The gradient-free check every gradient-based method declares: a second Square run (a restart at the bench's
    seed + 1) with ``n_queries`` on the model's output, through the ``adaptive`` attack, whose Square draws its
    windows per example (issue 29; AutoAttack's own Square draws per batch, so its outcomes would depend on the
    batch size). At the bench's own seed it would replay the shared attack's Square exactly."""
    return ExtraAttack("square", "adaptive", {"components": ["square"], "n_queries": int(n_queries)}, why=why,
                       seed_offset=1)


@dataclass
class FitRequest:
    """Everything a method's :meth:`~MixingMethod.fit` may use. ``options`` are the method's own (``mixzoo mix
    -O key=value`` or the library's keywords), checked by the method against :attr:`MixingMethod.options`."""

    abc: str | nn.Module | None = None
    rbc: str | nn.Module | None = None
    options: dict[str, Any] = field(default_factory=dict)
    dataset: str | None = None
    n_calib: int = 1000
    eps: float | None = None
    norm: str | None = None
    seed: int = 0
    batch_size: int | None = None
    out: str | Path | None = None
    data_dir: str | None = None
    cache_dir: str | Path | None = None
    use_cache: bool = True
    device: str = "cpu"
    allow_unsafe: bool = False
    progress: bool = True


@dataclass
class FitResult:
    """What :meth:`MixingMethod.fit` returns: the card, where it was written, a summary for the terminal (and
    ``mixzoo mix --json``), seconds per step and which steps came from the cache."""

    card: Any
    path: Path | None
    summary: dict[str, Any] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    cache_hits: dict[str, bool] = field(default_factory=dict)


class MixingMethod:
    """Base class of a mixing method; a third party subclasses it and returns an instance from
    ``mixzoo_mixing_methods()``. Override :meth:`validate`, :meth:`build` and :meth:`fit`; the rest has defaults."""

    name: str = ""
    title: str = ""  # the row label in reports, e.g. "MixedNUTS"
    paper: str = ""  # where the formula comes from
    fit_cost: str = ""  # one line: what fitting costs (training-free calibration, training, ...)
    options: dict[str, str] = {}  # fit options and what each means (``mixzoo mix -O key=value``)
    default: bool = False  # fitted by ``mixzoo mix`` when no --method is given (one method at most)
    certificate: str | None = None  # why no certified radius exists, when none does (``mixzoo certify``)
    not_exportable: str | None = None  # why its classifier cannot be one deployable artifact (``mixzoo export``)

    # --------------------------------------------------------------------------------------------- card
    def validate(self, params: dict[str, Any], source: str) -> dict[str, Any]:
        """Check (and normalise: defaults, float conversion) the card section; raise a one-line
        :class:`~mixzoo.core.errors.InputError` naming ``SECTION.FIELD``."""
        raise NotImplementedError

    def upgrade_v1(self, data: dict[str, Any], source: str) -> dict[str, Any] | None:
        """The section for a schema-1 card this method claims (``None``: not this method's)."""
        return None

    def summary_line(self, card: MixCard) -> str:
        """One line for terminals: the method and its main parameters."""
        shown = ", ".join(f"{k}={_short(v)}" for k, v in card.params.items() if isinstance(v, int | float | str))
        return f"{self.name}: {shown}"

    def key_parts(self, card: MixCard) -> dict[str, Any]:
        """What a cached evaluation of this card's classifier depends on, besides the models and the data."""
        from mixzoo.core.card import _plain

        return {"method": self.name, "params": _plain(card.params), "weights": weight_hashes(card)}

    # --------------------------------------------------------------------------------------------- model
    def build(self, abc: nn.Module | None, rbc: nn.Module | None, card: MixCard, *,
              gradient: str = "exact") -> nn.Module:
        """The mixed classifier ([0, 1] images -> log-probabilities). ``gradient`` names a variant that
        :meth:`extra_attacks` asked for (``"exact"`` is the classifier itself)."""
        raise NotImplementedError

    def extra_attacks(self, card: MixCard) -> list[ExtraAttack]:
        """Attacks an adversary who knows this method would add to the bench's shared attack."""
        return []

    def certified_mixture(self, card: MixCard) -> tuple[float, float]:
        """``(alpha, temperature)`` of a card that mixes the ABC's and the RBC's probabilities with one constant
        alpha (001 Eq. 3.4), which is what the certified radii of 001 Lemma 3.2 / Thm 3.5 / Thm A.2 need
        (``mixzoo certify``). A method without that form raises a one-line error saying why (:attr:`certificate`).
        """
        why = self.certificate or ("it does not mix probabilities with one constant alpha, which 001 Lemma 3.2"
                                   " needs; certify a linear card (`mixzoo mix --method linear`) instead")
        raise InputError(f"{self.title or self.name} cards have no certified radius: {why}")

    # --------------------------------------------------------------------------------------------- fitting
    def fit(self, request: FitRequest) -> FitResult:
        """Fit the card section from data (write the card to ``request.out`` when given)."""
        raise NotImplementedError

    def check_options(self, options: dict[str, Any]) -> None:
        """Refuse an option this method does not take, before any work."""
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            known = ", ".join(sorted(self.options)) or "none"
            raise InputError(f"mixing method {self.name!r} takes no option {unknown[0]!r} (its options: {known});"
                             " see `mixzoo plugins`")


# ------------------------------------------------------------------------------------------------ helpers
def _short(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def number(params: dict[str, Any], key: str, source: str, section: str, *, low: float | None = None,
           high: float | None = None, positive: bool = False, default: Any = ..., allow_none: bool = False) -> None:
    """Check ``params[key]`` is a finite real number (bounds inclusive), converting it to float in place; a
    missing key takes ``default`` (required when no default is given)."""
    if key not in params or (params[key] is None and allow_none):
        if key in params or default is not ...:
            params[key] = None if key in params else default
            return
        raise InputError(f"{source}: missing field '{section}.{key}'; write the card with `mixzoo mix`")
    v = params[key]
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise InputError(f"{source}: field '{section}.{key}' must be a finite number, got {v!r}")
    if (positive and v <= 0) or (low is not None and v < low) or (high is not None and v > high):
        bounds = "positive" if positive else f"in [{low if low is not None else '-inf'}, " \
                                             f"{high if high is not None else 'inf'}]"
        raise InputError(f"{source}: field '{section}.{key}' must be {bounds}, got {v!r}")
    params[key] = float(v)


def method_for(card: MixCard) -> MixingMethod:
    """The method plugin a card names."""
    return card.mixing_method


def default_method() -> str:
    """The method ``mixzoo mix`` fits when none is named: the one plugin method marked ``default``."""
    from mixzoo.core.errors import PluginError
    from mixzoo.core.plugins import mixing_methods

    names = sorted(n for n, m in mixing_methods().items() if getattr(m, "default", False))
    if len(names) != 1:
        raise PluginError(f"{'no' if not names else 'several'} mixing methods are marked default"
                          f" ({', '.join(names) or 'none'}); pass --method NAME (see `mixzoo plugins`)")
    return names[0]
