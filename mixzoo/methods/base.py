"""The contract of a mixing method (hook ``mixzoo_mixing_methods``).

Every method of the family combines a frozen accurate base classifier g (ABC) and a frozen robust one h (RBC) into
one classifier ``[0, 1] images -> log-probabilities``; the constant-alpha member is Bai et al. 2024b, Eq. 3.4,
``log((1 - alpha) softmax(g / T) + alpha softmax(h))``, MixedNUTS Bai et al. 2024a, Eq. 5 replaces softmax(h) by
softmax(M(s, p, c)(h)). :class:`MixingMethod` lists every capability the rest of mixzoo uses; nothing outside a
method's own folder asks a method for anything else. Each capability has a documented default, so a method
overrides only :meth:`~MixingMethod.validate`, :meth:`~MixingMethod.build` and :meth:`~MixingMethod.fit`:

==============================  =====================================================================================
card section                    :meth:`~MixingMethod.validate`, :meth:`~MixingMethod.check_card`,
                                :meth:`~MixingMethod.summary_line`,
                                :meth:`~MixingMethod.key_parts`, schema-1 cards: :meth:`~MixingMethod.upgrade_v1`,
                                :meth:`~MixingMethod.v1_warning`
classifier and its gradients    :meth:`~MixingMethod.build` with ``gradient=NAME`` for a name of
                                :meth:`~MixingMethod.gradients` (the gradient-variant protocol below)
honest evaluation               :meth:`~MixingMethod.extra_attacks` (run by bench, sanity and the matched baseline's
                                target on top of the shared attack; worst case per example)
fitting                         :meth:`~MixingMethod.fit` from a :class:`FitRequest`; :attr:`~MixingMethod.options`
                                (:class:`~mixzoo.core.options.OptionSpec` s, checked by
                                :meth:`~MixingMethod.check_options`),
                                :attr:`~MixingMethod.fit_cost`, :meth:`~MixingMethod.fit_summary` (``mixzoo mix``'s
                                table)
report                          computed during the bench: :meth:`~MixingMethod.tradeoff_curve`,
                                :meth:`~MixingMethod.figure_data`; rendered: :meth:`~MixingMethod.figures`,
                                :meth:`~MixingMethod.markdown_lines`
roles                           :attr:`~MixingMethod.default` (``mixzoo mix`` without ``--method``),
                                :attr:`~MixingMethod.baseline` (the bench's matched row: :meth:`~MixingMethod.match`,
                                :meth:`~MixingMethod.card_at`), :meth:`~MixingMethod.certified_mixture`
==============================  =====================================================================================

Gradient variants. ``build(abc, rbc, card, gradient=NAME)`` returns a classifier whose *values* are the card's
classifier's (the same log-probabilities, up to float rounding) and whose *gradient* is variant NAME, e.g. the
gradient of a differentiable surrogate where the exact one is masked (Bai et al. 2024a, App. B.2.2's bypass).
``"exact"`` is the classifier itself and every method has it. An attack that needs a variant of a model it was handed
(the ``adaptive`` attack's FAB-T on MixedNUTS's bypass gradient) asks the model through
:class:`mixzoo.attacks.variants.GradientVariants`; a method offers that by returning modules that implement it.
The bench judges every break on the classifier's values: an extra attack's candidate counts when the built
variant's output misclassifies it, and variants share the values, so a break on the variant is a break of the card.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from mixzoo.core.errors import InputError, PluginWarning
from mixzoo.core.options import OptionSpec, fill_options, parse_value
from mixzoo.methods.card_fields import number
from mixzoo.methods.extra_attacks import ExtraAttack, square_extra, weight_hashes
from mixzoo.methods.fit_request import FitRequest, FitResult

__all__ = ["ExtraAttack", "FitRequest", "FitResult", "MixingMethod", "baseline_method", "check_method",
           "default_method", "number", "square_extra", "weight_hashes"]

if TYPE_CHECKING:
    from torch import nn

    from mixzoo.core.card import MixCard
    from mixzoo.core.request import EvalRequest, ReportRequest


class MixingMethod:
    """Base class of a mixing method; a third party subclasses it and returns an instance from
    ``mixzoo_mixing_methods()``. Override :meth:`validate`, :meth:`build` and :meth:`fit`; every other member has
    the default documented on it (see the module docstring for the whole contract)."""

    name: str = ""
    title: str = ""  # the row label in reports, e.g. "MixedNUTS" (default: name)
    paper: str = ""  # where the formula comes from
    fit_cost: str = ""  # one line: what fitting costs (training-free calibration, training, ...)
    # fit options (``mixzoo mix -O key=value`` / ``--key value``): name -> OptionSpec (a plain string is its help,
    # of any type); default: none
    options: dict[str, OptionSpec | str] = {}
    default: bool = False  # fitted by ``mixzoo mix`` when no --method is given (one method at most)
    baseline: bool = False  # the bench's matched row (one method at most): implements match() and card_at()
    certificate: str | None = None  # why no certified radius exists, when none does (``mixzoo certify``)
    not_exportable: str | None = None  # why its classifier cannot be one deployable artifact (``mixzoo export``)
    curve_points: int | None = None  # how many classifiers :meth:`tradeoff_curve` attacks (the bench's plan)
    # bump (e.g. "NAME-2") when the classifier :meth:`build` returns changes for the same card: reports record it,
    # and a quoted report made with another version is stale (mixzoo.evaluation.versions)
    code_version: str | None = None

    # --------------------------------------------------------------------------------------------- card
    def validate(self, params: dict[str, Any], source: str) -> dict[str, Any]:
        """Check (and normalise: defaults, float conversion) the card section; raise a one-line
        :class:`~mixzoo.core.errors.InputError` naming ``SECTION.FIELD`` (SECTION is :attr:`name`)."""
        raise NotImplementedError

    def check_card(self, card: MixCard, source: str) -> None:
        """Check the card's tables besides the section that this method's fit writes (e.g. MixedNUTS's attack and
        data records), after :meth:`validate`, when a card is made or loaded; raise a one-line
        :class:`~mixzoo.core.errors.InputError` naming ``TABLE.FIELD`` (:func:`mixzoo.core.card.field_error`).
        Default: accept."""
        return None

    def upgrade_v1(self, data: dict[str, Any], source: str) -> dict[str, Any] | None:
        """The section for a schema-1 card (parameters at the top level) this method claims; default ``None``:
        not this method's. Called only by :meth:`MixCard.load <mixzoo.core.card.MixCard.load>`."""
        return None

    def v1_warning(self, data: dict[str, Any]) -> str | None:
        """A warning for a schema-1 card this method claimed (e.g. what to re-run); default ``None``."""
        return None

    def summary_line(self, card: MixCard) -> str:
        """One line for terminals: the method and its main parameters; default: the section's numbers and
        strings."""
        shown = ", ".join(f"{k}={_short(v)}" for k, v in card.params.items() if isinstance(v, int | float | str))
        return f"{self.name}: {shown}"

    def key_parts(self, card: MixCard) -> dict[str, Any]:
        """What a cached evaluation of this card's classifier depends on, besides the models and the data; default:
        the whole section and the weight files' hashes."""
        from mixzoo.core.card import plain_values

        return {"method": self.name, "params": plain_values(card.params), "weights": weight_hashes(card)}

    # --------------------------------------------------------------------------------------------- model
    def gradients(self, card: MixCard) -> tuple[str, ...]:
        """The gradient variants :meth:`build` accepts for this card, ``"exact"`` first; default: ``"exact"`` and
        the variants :meth:`extra_attacks` names."""
        return tuple(dict.fromkeys(["exact", *(extra.gradient for extra in self.extra_attacks(card))]))

    def build(self, abc: nn.Module | None, rbc: nn.Module | None, card: MixCard, *,
              gradient: str = "exact") -> nn.Module:
        """The mixed classifier ([0, 1] images -> log-probabilities) with gradient variant ``gradient`` (one of
        :meth:`gradients`): the same values for every variant, the variant's gradient (module docstring)."""
        raise NotImplementedError

    def extra_attacks(self, card: MixCard) -> list[ExtraAttack]:
        """Attacks an adversary who knows this method adds to the shared attack; default none."""
        return []

    def certified_mixture(self, card: MixCard) -> tuple[float, float]:
        """``(alpha, temperature)`` of a card that mixes the ABC's and the RBC's probabilities with one constant
        alpha (Bai et al. 2024b, Eq. 3.4), which is what the certified radii of Bai et al. 2024b, Lemma 3.2 / Thm 3.5 /
        Thm A.2 need (``mixzoo certify``). Default: a one-line error saying why not (:attr:`certificate`).
        """
        why = self.certificate or ("it does not mix probabilities with one constant alpha, which Bai et al. 2024b,"
                                   " Lemma 3.2"
                                   " needs; certify a linear card (`mixzoo mix --method linear`) instead")
        raise InputError(f"{self.title or self.name} cards have no certified radius: {why}")

    # --------------------------------------------------------------------------------------------- fitting
    def fit(self, request: FitRequest) -> FitResult:
        """Fit the card section from data; write the card to ``request.out`` when given (``card.save``)."""
        raise NotImplementedError

    def plan_fit(self, request: FitRequest) -> list[tuple[str, str, float | None]]:
        """What :meth:`fit` will run, for ``mixzoo mix``'s plan and ``--dry-run``: phases as (name, what, estimated
        seconds or None), estimated by timing a few real calls; nothing written. Default: one phase, not
        estimated."""
        return [("fit", f"{self.title or self.name} on the calibration split", None)]

    def option_specs(self) -> dict[str, OptionSpec]:
        """:attr:`options` with every entry as an :class:`~mixzoo.core.options.OptionSpec` (a plain string as the
        spec of that help, any type, no default)."""
        return {k: v if isinstance(v, OptionSpec) else OptionSpec(str(v)) for k, v in self.options.items()}

    def check_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """The options converted to their declared types and ranges, with the default of every absent
        :class:`~mixzoo.core.options.OptionSpec` filled in (but for a spec whose ``fills_default`` is false: its
        default is documentation); refuses, before any work, an option this method does not declare or a bad value
        (one line naming the option and the fix)."""
        specs = self.option_specs()
        filled = fill_options(specs, options, f"mixing method {self.name!r}")
        return {k: v for k, v in filled.items() if k in options or getattr(specs[k], "fills_default", True)}

    def options_from_args(self, args: list[str]) -> dict[str, Any]:
        """Options from command-line words ``--key VALUE``, ``--key=VALUE``, ``--flag`` / ``--no-flag`` (bool
        options), dashes read as underscores; values as :func:`~mixzoo.core.options.parse_value` reads them. What
        ``mixzoo mix`` passes for the words it does not know itself; :meth:`check_options` checks the result."""
        specs = self.option_specs()
        out: dict[str, Any] = {}
        words = list(args)
        while words:
            word = words.pop(0)
            if not word.startswith("--") or len(word) == 2:
                raise InputError(f"unexpected argument {word!r}; give method options as --KEY VALUE or -O KEY=VALUE")
            key, has_value, text = word[2:].partition("=")
            key = key.replace("-", "_")
            spec = specs.get(key)
            if not has_value and key.startswith("no_") and (flag := specs.get(key[3:])) is not None \
                    and flag.type is bool:
                out[key[3:]] = False
                continue
            if not has_value and spec is not None and spec.type is bool and (not words or words[0].startswith("--")):
                out[key] = True
                continue
            if not has_value:
                if not words:
                    raise InputError(f"option --{key.replace('_', '-')} needs a value")
                text = words.pop(0)
            out[key] = parse_value(text)
        return out

    def fit_summary(self, result: FitResult) -> list[tuple[str, str]]:
        """Rows ``(label, value)`` of ``mixzoo mix``'s table; default: the section's numbers and strings, then those
        of :attr:`FitResult.summary` the section does not hold, then the total seconds (``seconds["total"]``, else
        the sum of the steps')."""
        shown = {**result.card.params, **{k: v for k, v in result.summary.items() if k not in result.card.params}}
        rows = [(k, f"{v:.4g}" if isinstance(v, float) else str(v)) for k, v in shown.items()
                if isinstance(v, int | float | str)]
        rows.append(("seconds", f"{result.seconds.get('total', sum(result.seconds.values())):.1f}"))
        return rows

    # --------------------------------------------------------------------------------------------- report
    def tradeoff_curve(self, card: MixCard, abc: nn.Module, rbc: nn.Module, data: Any, request: ReportRequest
                       ) -> dict[str, Any] | None:
        """A clean / robust trade-off curve for the bench report (``report.curve``), or ``None`` (default), computed
        during the bench. ``request`` (:class:`~mixzoo.core.request.ReportRequest`): the curve's
        :class:`~mixzoo.core.request.EvalRequest` (its record names the curve's attack, options, eps, norm, seed and
        batch size; the cache; progress), ``data_dir``, ``device``, ``n`` (the curve's images) and ``points`` (the
        most points per curve, the bench's budget; ``None``: the method's own)."""
        return None

    def curve_size(self, card: MixCard, points: int | None) -> int | None:
        """How many classifiers :meth:`tradeoff_curve` attacks for ``card`` with at most ``points`` per curve
        (``None``: all), what the bench's plan counts; default: :attr:`curve_points` capped at ``points`` as
        :func:`mixzoo.core.budget.curve_points` caps them (``None``: unknown)."""
        from mixzoo.core.budget import curve_points

        total = self.curve_points
        return total if total is None or points is None else len(curve_points(tuple(range(total)), points))

    def report_data_seconds(self, card: MixCard, abc: nn.Module, rbc: nn.Module, data: Any, request: ReportRequest
                            ) -> float:
        """Seconds :meth:`tradeoff_curve` and :meth:`figure_data` spend with ``request`` beyond attacking the curve's
        :meth:`curve_size` points: data they compute once and share (e.g. on the calibration split; the first of
        them computes it, the other finds it cached), for the bench's plan. Estimated without any uncached heavy work
        (``--dry-run`` answers in seconds); ``0.0`` when the cache holds it (the plan then replays the curve from the
        cache, so the curve must then compute nothing but its points' attacks). Default ``0.0``."""
        return 0.0

    def figure_data(self, card: MixCard, abc: nn.Module, rbc: nn.Module, data: Any, request: ReportRequest
                    ) -> dict[str, Any] | None:
        """What :meth:`figures` will plot for ``card`` beyond the report's rows, card and curve, computed during the
        bench (with ``request``, as :meth:`tradeoff_curve`) and kept in ``report.figure_data``: plain JSON values
        (it is written to report.json). Default ``None``."""
        return None

    def figures(self, report: Any, card: MixCard, stage: Path, *, prefix: str = "",
                data: dict[str, Any] | None = None) -> list[str]:
        """Write PNG figures for the bench report into ``stage`` (file names start with ``prefix``) and return their
        names; default none. Only renders, from the report, the card and ``data`` (what :meth:`figure_data`
        returned for this card during the bench): writing a report computes and attacks nothing."""
        return []

    def markdown_lines(self, report: Any, card: MixCard) -> list[str]:
        """Lines this method adds to ``report.md``; default none."""
        return []

    # --------------------------------------------------------------------------------------------- baseline role
    def match(self, abc: nn.Module, rbc: nn.Module, images: Any, labels: Any, target: float,
              request: EvalRequest) -> tuple[float, list[dict[str, Any]]]:
        """(baseline methods) The parameter whose robust accuracy on ``images`` is closest to ``target`` and every
        value tried, evaluating with ``request`` (:class:`~mixzoo.core.request.EvalRequest`: the matching attack in
        its record, the cache and the cache key's parts)."""
        raise InputError(f"mixing method {self.name!r} is not a baseline method")

    def card_at(self, alpha: float, template: MixCard | None = None) -> MixCard:
        """(baseline methods) A card at ``alpha`` for the pair of ``template``."""
        raise InputError(f"mixing method {self.name!r} is not a baseline method")


# ------------------------------------------------------------------------------------------------ helpers
def _short(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)

def default_method() -> str:
    """The method ``mixzoo mix`` fits when none is named: the one plugin method marked ``default``."""
    from mixzoo.core.errors import PluginError
    from mixzoo.core.plugins import table

    names = sorted(n for n, m in table("method").items() if m.default)
    if len(names) != 1:
        raise PluginError(f"{'no' if not names else 'several'} mixing methods are marked default"
                          f" ({', '.join(names) or 'none'}); pass --method NAME (see `mixzoo plugins`)")
    return names[0]


def baseline_method() -> MixingMethod | None:
    """The plugin method marked ``baseline`` (the bench's matched row), if exactly one is."""
    from mixzoo.core.plugins import table

    found = [m for _, m in sorted(table("method").items()) if m.baseline]
    return found[0] if len(found) == 1 else None


# ------------------------------------------------------------------------------------------------ a plugin's method
# what a MixingMethod subclass must define: the line to add
_REQUIRED = {"validate": "def validate(self, params, source) -> dict",
             "build": "def build(self, abc, rbc, card, *, gradient='exact') -> nn.Module",
             "fit": "def fit(self, request: FitRequest) -> FitResult"}


def check_method(value: Any, plugin_name: str) -> Any:
    """``value`` from a plugin's hook ``mixzoo_mixing_methods``, as it is; a
    :class:`~mixzoo.core.errors.PluginWarning` naming the lines to add when its class is a :class:`MixingMethod`
    lacking ``validate``, ``build`` or ``fit``."""
    import warnings

    if isinstance(value, MixingMethod):
        lacking = [line for key, line in _REQUIRED.items() if getattr(type(value), key) is getattr(MixingMethod, key)]
        if lacking:
            warnings.warn(f"mixing method {value.name!r} of plugin {plugin_name!r} cannot run: add"
                          f" `{'`, `'.join(lacking)}` to class {type(value).__name__}", PluginWarning, stacklevel=2)
    return value
