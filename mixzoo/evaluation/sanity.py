"""Is the attack finding what there is to find? Robust accuracy over growing epsilon, with two checks it must pass.

A robust accuracy measured by an attack is an upper bound on the true one; it can be trusted only as far as the
attack is strong on the model at hand, which matters most for mixed classifiers, whose gradients an attack must
work around (Bai et al. 2024a, App. B.2). Carlini et al. (2019, "On Evaluating Adversarial Robustness", Sec. 5) ask
every evaluation to show that robust accuracy falls as epsilon grows and reaches chance level when the threat model
allows any answer. :func:`eps_sweep` runs the bench attack at several radii on the card's ABC, RBC, matched baseline and
the card's own classifier (each mixture's row its worst case over the attack and the extra attacks its method
declares, as in ``mixzoo bench``) and checks two facts that hold for every classifier, example by example:

1. **Monotonicity.** A point inside the eps-ball is inside every larger ball, so an example broken at eps is
   breakable at every eps' > eps. The attack left it robust at eps' anyway: a miss at eps'.
2. **The grey image.** Images live in [0, 1], so the constant image x0 = 1/2 lies within r_i = ||x_i - x0|| of
   example i (r_i <= 1/2 in L-inf). Once eps >= r_i, x0 is a legal adversarial input for example i, and the
   model's class at x0 is a legal answer: when it differs from the label, the example is breakable. The attack left
   it robust anyway: a miss. At eps >= max_i r_i this caps any model's robust accuracy at the share of one class.

Misses mean the attack under-explores the model (gradient masking or too weak a configuration): its robust accuracy
at those radii, and very likely at the nominal one, overstates robustness. The converse does not hold: passing
rules out gross failures (an attack that cannot move, gradients that point nowhere), not a few examples missed at
the nominal eps; for those, compare attacks (``--attack adaptive-strong``, ``benchmarks/attack_strength.py``).
Writes ``sanity.json``, ``sanity.md`` and ``sanity.png``.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mixzoo.attacks import runner
from mixzoo.attacks.result import Outcome
from mixzoo.core.budget import counts_of
from mixzoo.core.cache import Cache, atomic_write_text, staged_directory
from mixzoo.core.errors import InputError
from mixzoo.core.labels import eps_text, row_label
from mixzoo.core.machine import machine_line, run_record
from mixzoo.core.paths import check_output, json_with
from mixzoo.core.progress import next_phase
from mixzoo.core.record import RunRecord
from mixzoo.core.request import EvalRequest
from mixzoo.core.settings import RunSettings, settings_of
from mixzoo.evaluation.job import MatchSettings, budgeted, sweep_steps
from mixzoo.evaluation.loading import card_evaluation, check_run_settings, resolved_batch_size
from mixzoo.evaluation.matching import matched_linear_alpha
from mixzoo.evaluation.report import options_text, precision_text
from mixzoo.evaluation.worst_case import declared_attacks, evaluate_card
from mixzoo.methods.base import baseline_method
from mixzoo.zoo.data import shortfall_note
from mixzoo.zoo.pairs import card_key_parts, model_device, model_hash, model_key

GREY = 0.5


def grey_distance(images: torch.Tensor, norm: str) -> torch.Tensor:
    """Per example, the distance from the image to the constant image 1/2 (the centre of the [0, 1] box)."""
    delta = (images - GREY).flatten(1)
    return delta.abs().amax(dim=1) if norm == "Linf" else delta.norm(dim=1)


def default_radii(eps: float, images: torch.Tensor, norm: str) -> list[float]:
    """eps, 2 eps, 4 eps, and the radius at which the grey image reaches every example; none beyond that one."""
    reach = math.ceil(float(grey_distance(images, norm).max()) * 1e6) / 1e6  # rounded up: it must reach them all
    return sorted({round(r, 6) for r in (eps, 2 * eps, 4 * eps) if r < reach} | {max(reach, eps)})


def checked_robust(robust: torch.Tensor, grey_breakable: torch.Tensor) -> torch.Tensor:
    """Robust flags that survive both checks, ``robust[e, i]`` for radius ``e`` (ascending) and example ``i``.

    An example counts as robust at radius e only if, at e and at every smaller radius, the attack left it robust
    and the grey image does not break it (``grey_breakable[e, i]``): whatever breaks it in a smaller ball breaks
    it in this one.
    """
    return (robust & ~grey_breakable).to(torch.uint8).cummin(dim=0).values.bool()


@dataclass
class SweepRow:
    """One model over the radii: the attack's robust accuracy, what survives the checks, and the misses."""

    name: str
    kind: str  # abc | rbc | the mixing method of a mixed row
    clean_accuracy: float
    robust_accuracy: list[float]  # the attack's, per radius
    checked_robust_accuracy: list[float]  # after both checks (still an upper bound on the truth)
    monotone_misses: list[int]  # left robust here, broken at a smaller radius (by the attack or the grey image)
    grey_misses: list[int]  # left robust here, though the grey image breaks them here
    grey_class: int  # the model's class at the grey image
    grey_bound: list[float]  # per radius, the share of examples the grey image cannot break: a cap for this model
    n: int
    seconds: list[float]
    cached: list[bool] = field(default_factory=list)
    alpha: float | None = None  # the linear baseline's constant mixing weight

    @property
    def misses(self) -> list[int]:
        """Per radius, the examples the checks removed (the two kinds are disjoint)."""
        return [a + b for a, b in zip(self.monotone_misses, self.grey_misses, strict=True)]


@dataclass
class EpsSweep:
    """Everything ``mixzoo sanity`` prints and writes."""

    radii: list[float]
    models: list[SweepRow]
    attack: str
    norm: str
    eps: float  # the card's (nominal) radius
    n: int
    dataset: dict[str, Any]
    reach: float  # max over the examples of the distance to the grey image
    seconds: float
    notes: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    attack_options: dict[str, Any] = field(default_factory=dict)  # as given; the attack's defaults for the rest
    precision: str = "float32"  # the attacks' arithmetic (bf16: breaks confirmed in float32)
    budget: str = "standard"  # mixzoo.core.budget: what every component spent
    # each component's attack and options under the budget (the shared attack, the declared ones, the baseline's)
    components: dict[str, Any] = field(default_factory=dict)
    # versions, commit, machine, time (mixzoo.core.machine.run_record)
    run: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not any(sum(m.misses) for m in self.models)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for row, model in zip(out["models"], self.models, strict=True):
            row["misses"] = model.misses
        return {**out, "passed": self.passed}


def _row(name: str, kind: str, model: nn.Module, outcomes: list[Outcome], radii: list[float],
         images: torch.Tensor, labels: torch.Tensor, norm: str, alpha: float | None = None) -> SweepRow:
    evs = [Outcome.of(ev) for ev in outcomes]
    robust = torch.tensor([ev.robust_correct for ev in evs], dtype=torch.bool)
    clean = torch.tensor(evs[0].clean_correct, dtype=torch.bool)
    with torch.no_grad():
        grey_class = int(model(torch.full_like(images[:1], GREY).to(model_device(model))).argmax(dim=1))
    reach = grey_distance(images, norm)[None, :] <= torch.tensor(radii)[:, None]
    grey_breakable = reach & (labels.cpu() != grey_class)[None, :]
    checked = checked_robust(robust, grey_breakable)
    return SweepRow(
        name=name, kind=kind, clean_accuracy=float(clean.double().mean()),
        robust_accuracy=robust.double().mean(dim=1).tolist(),
        checked_robust_accuracy=checked.double().mean(dim=1).tolist(),
        monotone_misses=(robust & ~grey_breakable & ~checked).sum(dim=1).tolist(),
        grey_misses=(robust & grey_breakable).sum(dim=1).tolist(), grey_class=grey_class,
        grey_bound=(~grey_breakable).double().mean(dim=1).tolist(), n=len(labels),
        seconds=[float(ev.seconds) for ev in evs], cached=[bool(ev.cached) for ev in evs],
        alpha=alpha)


def _name(model: nn.Module, digest: str, recorded: dict[str, Any] | None, role: str) -> str:
    """The registry name, else the card's name when the weights are the card's, else the module's class."""
    spec = getattr(model, "spec", None)
    if spec is not None:
        return spec.name
    recorded = recorded or {}
    if recorded.get("name") and recorded.get("weight_hash") == digest:
        return recorded["name"]
    return f"{role} ({type(model).__name__})"


def _notes(sweep: EpsSweep) -> list[str]:
    notes = []
    for m in sweep.models:
        for r, mono, grey in zip(sweep.radii, m.monotone_misses, m.grey_misses, strict=True):
            why = " and ".join(part for part in (
                f"{mono} examples broken at a smaller eps" if mono else "",
                f"{grey} examples the grey image breaks" if grey else "") if part)
            if why:
                notes.append(f"{m.name} at eps {r:g}: the attack left robust {why}; its robust accuracy there"
                             " overstates robustness (possible gradient masking or too weak an attack)")
    if not notes:
        notes.append(f"no misses: for every model robust accuracy falls with eps and at eps {sweep.radii[-1]:g} is"
                     " at or below what the grey image allows")
    return notes


SWEEP_ATTACK = "adaptive-apgd"  # the shared attack when neither the settings nor their budget name one


def eps_sweep(card: Any, settings: RunSettings | None = None, *, radii: list[float] | None = None,
              baseline: MatchSettings | float | bool | None = True, out: str | Path | None = None, plots: bool = True,
              **changes: Any) -> EpsSweep:
    """Robust accuracy of the card's ABC, RBC, matched baseline and the card's own classifier at each radius in
    ``radii`` (default :func:`default_radii`), on the first ``n`` evaluation images, with the monotonicity and
    grey-image checks of the module docstring. ``settings`` (:class:`~mixzoo.core.settings.RunSettings`, 200 images by
    default; keyword arguments named after its fields change it), budget (:mod:`mixzoo.core.budget`) and ``-O`` counts
    included, are ``mixzoo bench``'s (``attack=None``: the budget's attack, else ``adaptive-apgd``), and so are the
    cached evaluations: at the card's eps, with the same attack, ``n`` and batch size, the bench's rows are reused.

    ``baseline``: the baseline method's row (linear) matched to the card's worst case as ``mixzoo bench`` matches it
    (:class:`~mixzoo.evaluation.bench.MatchSettings`; ``True``: the settings' budget's, read from the cache after
    such a bench), at a given alpha (a number), or ``None``: no baseline row.
    """
    s = settings_of(settings, changes, attack=None, n=200)
    given = dict(s.attack_options or {})  # the user's -O, before the budget's caps
    s, match, _ = budgeted(s, baseline if not isinstance(baseline, int | float) or isinstance(
        baseline, bool) else None, None, default_attack=SWEEP_ATTACK)
    check_run_settings(s, out)
    linear_alpha = _checked_inputs(out, radii, baseline)
    t0 = time.perf_counter()
    ce = card_evaluation(card, s)
    card, abc_m, rbc_m, data, eps, norm = ce.card, ce.abc, ce.rbc, ce.data, ce.eps, ce.norm
    s = s.changed(batch_size=resolved_batch_size(s.batch_size, abc_m, rbc_m, data, str(model_device(rbc_m))))
    images, labels = data.images, data.labels
    reach = float(grey_distance(images, norm).max())
    radii = default_radii(eps, images, norm) if radii is None else sorted({float(r) for r in radii})
    # every radius's request: the run's record at that eps (sanity's rows in the settings' precision)
    request = EvalRequest(RunRecord.from_settings(s, eps=eps, norm=norm, count_overrides=counts_of(given)),
                          Cache(s.cache_dir, enabled=s.use_cache), progress=s.progress)
    models, components = _sweep_models(ce, request, match, linear_alpha)
    components = {"attack": {"attack": s.attack, "options": dict(s.attack_options)}, **components}
    rows = []
    for name, kind, model, key, row_card, alpha in models:
        next_phase()
        at = [request.replace(eps=r, key_parts=key, label=f"{name} at eps {r:g}") for r in radii]
        evs = [runner.evaluate(model, images, labels, r) if row_card is None else
               evaluate_card(row_card, abc_m, rbc_m, images, labels, r)
               for r in at]
        rows.append(_row(name, kind, model, evs, radii, images, labels, norm, alpha=alpha))
    sweep = EpsSweep(radii=radii, models=rows, attack=s.attack, norm=norm, eps=eps, n=len(labels),
                     dataset={"name": card.dataset, "split": "evaluation", "n": len(labels),
                              "fingerprint": data.fingerprint, "source": getattr(data, "source", "")},
                     reach=reach, seconds=0.0, attack_options=dict(s.attack_options or {}),
                     precision=s.precision, budget=s.budget, components=components)
    sweep.notes = ce.notes + [note for note in [shortfall_note(data, s.n, "--n")] if note] + _notes(sweep)
    if max(radii) < reach:
        sweep.notes.append(f"the largest eps ({max(radii):g}) is below {reach:g}, where the grey image reaches every"
                           " example; add it to --eps for the chance-level check")
    sweep.seconds = time.perf_counter() - t0
    sweep.run = run_record(s.device)
    if out is not None:
        write_sweep(sweep, Path(out), plots=plots)
    return sweep


def _checked_inputs(out: str | Path | None, radii: list[float] | None,
                    baseline: MatchSettings | float | bool | None) -> float | None:
    """One-line errors for a foreign file where a sanity file goes, non-positive radii or a given linear alpha
    outside [1/2, 1]; the given alpha (``None`` when the baseline is matched or left out)."""
    if out is not None:  # a sanity.json mixzoo did not write, or a FIFO where one of its files goes
        check_output(out, directory=True, files={name: json_with("radii") if name == "sanity.json" else None
                                                 for name in ("sanity.json", "sanity.md", "sanity.png")})
    if radii is not None and (not radii or min(radii) <= 0):
        raise InputError(f"--eps values must be positive, got {radii}")
    linear_alpha = float(baseline) if isinstance(baseline, int | float) and not isinstance(baseline, bool) else None
    if linear_alpha is not None and not 0.5 <= linear_alpha <= 1.0:
        raise InputError(f"--linear-alpha must be in [0.5, 1] (Bai et al. 2024a, footnote 1), got {linear_alpha}")
    return linear_alpha


def _sweep_models(ce: Any, request: EvalRequest, match: MatchSettings | None, linear_alpha: float | None
                  ) -> tuple[list[tuple], dict[str, Any]]:
    """The sweep's rows to attack, ``(name, kind, classifier, cache key, card, alpha)`` (a card row's worst case is
    over the shared attack and its method's extras): the ABC, the RBC, the baseline method's row (at
    ``linear_alpha``, else matched to the card's worst case as the bench matches it) and the card; with the
    components record."""
    card, abc_m, rbc_m, data = ce.card, ce.abc, ce.rbc, ce.data
    base = {"data": data.fingerprint}
    base_method = baseline_method()
    record = request.record
    components: dict[str, Any] = {}
    models: list[tuple] = []
    for step in sweep_steps(card, matched=match is not None, alpha_given=linear_alpha is not None):
        if step.kind in ("abc", "rbc"):
            model = getattr(ce, step.kind)
            models.append((_name(model, model_hash(model), getattr(card, step.kind), step.kind.upper()), step.kind,
                           model, {**base, "model": model_key(model)}, None, None))
        elif step.kind == "match":
            next_phase()  # the phases of mixzoo.evaluation.plan.plan_sanity, in its order
            matching = request.replace(attack=match.attack, attack_options=match.options, precision="float32")
            linear_alpha, _, _ = matched_linear_alpha(ce, matching, match_n=match.n)
            components["baseline"] = {"attack": match.attack, "options": dict(match.options),
                                      "n": min(match.n, len(data.labels))}
        elif step.kind == "baseline":
            base_card = base_method.card_at(linear_alpha, card)
            models.append((f"{base_method.title} (alpha={linear_alpha:.2f})", base_method.name,
                           base_method.build(abc_m, rbc_m, base_card), card_key_parts(base_card, abc_m, rbc_m, data),
                           base_card, linear_alpha))
    title = card.mixing_method.title or card.method
    models.append((title, card.method, ce.mixed, card_key_parts(card, abc_m, rbc_m, data), card,
                   linear_alpha if base_method is not None and card.method == base_method.name else None))
    if record.extra_attacks:
        components.update({f"{title}: {extra.name}": {"attack": extra.attack, "options": opts}
                           for extra, opts in declared_attacks(card, record.budget, record.counts())})
    return models, components


def markdown(sweep: EpsSweep) -> str:
    """``sanity.md``: robust accuracy per model and radius, misses marked, and the notes."""
    head = " | ".join(f"eps {eps_text(r)}" for r in sweep.radii)
    lines = [f"# mixzoo sanity: robust accuracy over eps ({sweep.budget} budget)", "",
             f"`{sweep.attack}`{options_text(sweep.attack_options)}{precision_text(sweep.precision)}, {sweep.norm},"
             f" nominal eps {eps_text(sweep.eps)}, "
             f"first {sweep.n} images of the "
             f"{sweep.dataset['name']} evaluation split (fingerprint `{sweep.dataset['fingerprint']}`). Each cell: "
             "the attack's robust %, then (if the checks remove examples) the checked % and the misses. The grey "
             f"image reaches every example at eps {eps_text(sweep.reach)}.", "",
             f"| model | clean % | class at grey | {head} |", "|---|---|---|" + "---|" * len(sweep.radii)]
    for m in sweep.models:
        cells = [f"{100 * r:.1f}" if not k else f"{100 * r:.1f} -> {100 * c:.1f} ({k} missed)"
                 for r, c, k in zip(m.robust_accuracy, m.checked_robust_accuracy, m.misses, strict=True)]
        lines.append(f"| {row_label(m)} | {100 * m.clean_accuracy:.1f} | {m.grey_class} | {' | '.join(cells)} |")
    lines += ["", f"**{'Passed' if sweep.passed else 'FAILED'}.**", ""] + [f"- {note}" for note in sweep.notes]
    if sweep.files:
        lines += ["", *(f"![{f}]({f})" for f in sweep.files)]
    lines += ["", f"Took {sweep.seconds:.0f} s. Run on: {machine_line(sweep.run)}."]
    return "\n".join(lines) + "\n"


def plot_sweep(sweep: EpsSweep, path: Path) -> None:
    """Robust accuracy over eps per model (solid: the attack's; dotted: after the checks, where they differ;
    dashed: the cap the grey image puts on the model's robust accuracy)."""
    from mixzoo.core.figures import figure_module, save_png

    plt = figure_module()
    fig, ax = plt.subplots(figsize=(7.5, 4))
    # lines that coincide (every model at 0 % at a large radius) stay apart: own marker, line style and size
    markers, styles = ("o", "s", "^", "D", "v", "P"), ("-", "--", "-.", (0, (1, 1)), (0, (5, 1)), (0, (3, 1, 1, 1)))
    for k, m in enumerate(sweep.models):
        line, = ax.plot(sweep.radii, [100 * v for v in m.robust_accuracy], marker=markers[k % len(markers)],
                        ls=styles[k % len(styles)], ms=9 - 1.5 * (k % 4), mfc="none" if k % 2 else None, lw=1.4,
                        label=row_label(m))
        if any(m.misses):
            ax.plot(sweep.radii, [100 * v for v in m.checked_robust_accuracy], ls=":", marker="x",
                    color=line.get_color(), label=f"{row_label(m)}, checked")
    caps: dict[tuple[float, ...], list[str]] = {}
    for m in sweep.models:
        caps.setdefault(tuple(m.grey_bound), []).append(row_label(m))
    cap_styles = (("black", "--"), ("0.45", (0, (1, 2))), ("0.65", "-."), ("0.3", (0, (6, 2))))
    for k, (cap, names) in enumerate(caps.items()):  # a step: the cap holds from one radius up to the next
        who = "all models" if len(caps) == 1 else ", ".join(names)
        color, style = cap_styles[k % len(cap_styles)]
        ax.plot(sweep.radii, [100 * v for v in cap], ls=style, lw=1.1, color=color, drawstyle="steps-post",
                label=f"grey-image cap ({who})")
    ax.axvline(sweep.eps, color="grey", lw=0.8, ls=":")
    ax.set_xlabel(f"{sweep.norm} eps (dotted: nominal)")
    ax.set_ylabel(f"robust accuracy % ({sweep.attack}, n={sweep.n})")
    ax.set_ylim(-2, 102)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    ax.set_title("robust accuracy must fall with eps and stay under the grey-image cap", fontsize=9)
    save_png(fig, path)
    plt.close(fig)


def write_sweep(sweep: EpsSweep, out: Path, *, plots: bool = True) -> list[Path]:
    """Write ``sanity.json``, ``sanity.md`` and ``sanity.png`` into ``out``, all or none
    (:func:`mixzoo.core.cache.staged_directory`)."""
    names = ["sanity.png"] if plots else []
    with staged_directory(out, ("sanity.json", "sanity.md", "sanity.png")) as stage:
        if plots:
            plot_sweep(sweep, stage / "sanity.png")
        sweep.files = list(names)
        atomic_write_text(stage / "sanity.json", json.dumps(sweep.to_dict(), indent=2))
        atomic_write_text(stage / "sanity.md", markdown(sweep))
    return [out / name for name in ("sanity.json", "sanity.md", *names)]
