"""The evaluation base: :class:`Attack` (options, the run loop) and :class:`Component` (one stage of it).

Each evaluation is a sequence of components run as AutoAttack runs them: every component attacks only the examples
still classified correctly, and the per-component count of newly broken examples is reported. A component's output
counts only if it lies in the eps-ball and in [0, 1] and the model (its ordinary output) misclassifies it.

Precision (:mod:`mixzoo.attacks.precision`): the components run in the chosen arithmetic, the clean accuracy and
every candidate are judged in float32. Gradient-free components (Square) run in float32: their search accepts a step
when the loss improves, and bfloat16 rounds small improvements away.

When the black-box Square breaks examples the gradient components missed, the result carries the warning
"potentially unreliable: ..." (gradient masking, App. B.2.1); examples with an all-zero loss gradient at an APGD
starting point, and AutoAttack's own warnings, are reported too.
"""

from __future__ import annotations

import time
import warnings as pywarnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from mixzoo.attacks.arguments import check_attack_settings
from mixzoo.attacks.precision import (
    as_channels_last,
    attack_arithmetic,
    channels_last,
    check_precision_device,
    exact_arithmetic,
    uses_channels_last,
)
from mixzoo.attacks.result import ComponentStat, EvalResult
from mixzoo.core.errors import InputError, NaNLogitsError, PluginError
from mixzoo.core.options import OptionSpec, did_you_mean, names
from mixzoo.core.progress import progress_bar
from mixzoo.zoo.models import check_images, check_labels

SQUARE_MASKING = "potentially unreliable: Square broke"


def square_masking_note(count: int) -> str:
    """AutoAttack's gradient-masking flag: the black-box Square attack broke examples the gradient attacks missed."""
    return f"{SQUARE_MASKING} {count} examples the gradient attacks missed (possible gradient masking)"


@dataclass
class Component:
    """One stage of an evaluation: ``fn(x, y)`` returns candidate adversarial images for still-robust examples."""

    name: str  # shown in reports, one row per component
    fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (x, y) -> candidates of x's shape
    # False: a gradient-free search (Square), run in float32 under any precision
    gradient_based: bool = True
    zero_grad: list[int] = field(default_factory=list)  # per run: examples with an all-zero starting gradient
    # "robust": attack the examples still robust (AutoAttack's chaining); "clean": attack every clean-correct example
    # afresh (a whole evaluation reproduced as it runs on its own), only its breaks of still-robust ones are new
    scope: str = "robust"
    # True: ``fn(x, y, index)`` takes the examples' indices in the whole data set and draws its randomness per
    # example from them (mixzoo.core.rng), so its outcome per example does not depend on the batch
    per_example: bool = False
    # a forward-only search (Square): no autograd graph, so on a GPU it takes this many attack batches at once
    # (only with per-example randomness, where the batch does not change any example's outcome)
    forward_only: bool = False


FORWARD_ONLY_BATCHES = 4  # attack batches per forward-only chunk on a GPU (forward_only_batches)


def forward_only_batches(comp: Component, device: torch.device, per_example: bool) -> int:
    """How many attack batches a component attacks at once: :data:`FORWARD_ONLY_BATCHES` for a forward-only,
    per-example component on a GPU (its queries hold no autograd graph, so the memory sized for a gradient attack's
    batch holds several, and a small network's queries leave a GPU idle), else 1. The outcome per example is the
    same either way."""
    if comp.forward_only and comp.per_example and per_example and device.type == "cuda":
        return FORWARD_ONLY_BATCHES
    return 1


def within_threat_model(adv: torch.Tensor, x: torch.Tensor, eps: float, norm: str) -> torch.Tensor:
    """Per example: ``adv`` is finite, in [0, 1] and within the eps-ball around ``x`` (float tolerance)."""
    delta = (adv - x).flatten(1)
    size = delta.abs().max(dim=1).values if norm == "Linf" else delta.norm(dim=1)
    flat = adv.flatten(1)
    return (size <= eps * (1 + 1e-5) + 1e-6) & (flat.min(dim=1).values >= -1e-6) & (flat.max(dim=1).values
                                                                                     <= 1 + 1e-6) \
        & torch.isfinite(flat).all(dim=1)


# the options most attacks share in their ``options_spec`` (``dataclasses.replace`` changes a default); upper bounds
# far above any published evaluation (AutoAttack: 100 iterations, 5000 queries), below what a run's records can hold
N_ITER = OptionSpec("iterations of each APGD / PGD run", int, 100, low=1, high=100_000)
N_RESTARTS = OptionSpec("random restarts of each APGD run", int, 1, low=1, high=10_000)
N_TARGET_CLASSES = OptionSpec("target classes of APGD-T (AutoAttack's: 9; 0 leaves APGD-T out)", int, 9, low=0,
                              high=100_000)
N_QUERIES = OptionSpec("queries of the Square attack per example", int, 5000, low=1, high=10_000_000)
BATCH_SIZE = OptionSpec("examples per forward pass", int, 500, low=1, high=10_000_000)
COMPONENTS_OPTION = OptionSpec("the components to run, in the attack's order (default: the attack's own choice)", names)
REQUIRED_OPTIONS: dict[str, OptionSpec] = {"batch_size": BATCH_SIZE}


class Attack:
    """Base class of evaluations: ``Attack(eps, norm, seed, **options).run(model, images, labels)``.

    Subclasses set ``name``, ``options_spec`` (the options of their own: :class:`~mixzoo.core.options.OptionSpec`
    with type, default, range and help; ``mixzoo bench --attack NAME --show-options`` prints them) and
    :meth:`components`. The options the run loop itself reads (:data:`REQUIRED_OPTIONS`: ``batch_size``) are
    merged into every subclass's ``options_spec`` where it does not declare them. A subclass that names itself
    (its own ``name``) without :meth:`components` or ``run`` is refused at class creation with one line saying what
    to add. :attr:`defaults` and :attr:`option_types` are derived from ``options_spec``.
    """

    name: ClassVar[str] = "attack"
    options_spec: ClassVar[dict[str, OptionSpec]] = REQUIRED_OPTIONS
    # every option with its default, from options_spec
    defaults: ClassVar[dict[str, Any]] = {key: spec.default for key, spec in REQUIRED_OPTIONS.items()}
    # each option's type (derived from options_spec; declared by subclasses written before it)
    option_types: ClassVar[dict[str, Any]] = {key: spec.type for key, spec in REQUIRED_OPTIONS.items()}
    # a subclass changes it when its outcomes change for the same options: the bench's cache key includes it, so
    # outcomes cached by the older code are attacked again (and no other attack's cache is touched)
    code_version: ClassVar[str | None] = None
    per_example: bool = False  # set by run(): the examples' indices were given (per-example randomness wanted)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = vars(cls)
        missing = {key: spec for key, spec in REQUIRED_OPTIONS.items() if key not in cls.options_spec}
        if missing:
            cls.options_spec = {**cls.options_spec, **missing}
        if "name" in own and cls.components is Attack.components and cls.run is Attack.run:
            raise PluginError(f"attack class {cls.__qualname__} ({cls.name!r}) has no components(); add `def"
                              " components(self, model, n_classes) -> list[mixzoo.attacks.Component]` (docs:"
                              " Writing a plugin)")
        cls.defaults = {key: spec.default for key, spec in cls.options_spec.items()}
        cls.option_types = {key: spec.type for key, spec in cls.options_spec.items() if spec.type is not None}

    def __init__(self, eps: float, norm: str = "Linf", seed: int = 0, **options: Any):
        check_attack_settings(eps, norm)
        self.eps, self.norm, self.seed = float(eps), norm, int(seed)
        self.options = self.check_options(options)

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> dict[str, Any]:
        """Every option of :attr:`options_spec`: the given ones converted to their types and checked against their
        ranges, the others at their defaults; one-line errors for unknown keys (with the closest name) and bad
        values, so a run refuses bad options before it attacks anything."""
        unknown = sorted(set(options) - set(cls.options_spec))
        if unknown:
            hint = did_you_mean(unknown[0], cls.options_spec)
            raise InputError(f"unknown option(s) {', '.join(unknown)} for attack {cls.name!r}"
                             f"{hint}{' ' if hint else '; '}known: {', '.join(sorted(cls.options_spec))}")
        owner = f"attack {cls.name!r}"
        given = {key: cls.options_spec[key].convert(key, value, owner, flag=f"-O {key}")
                 for key, value in options.items()}
        return {**cls.defaults, **given}

    def components(self, model: nn.Module, n_classes: int) -> list[Component]:
        """The stages this evaluation runs on ``model`` (``n_classes`` outputs), in order; every subclass that
        names itself defines it."""
        raise NotImplementedError(f"attack {self.name!r} defines no components()")

    def run(self, model: nn.Module, images: torch.Tensor, labels: torch.Tensor, progress: bool = True,
            index: torch.Tensor | None = None, precision: str = "float32") -> EvalResult:
        """Clean accuracy, then each component on the examples still correct; see the module docstring.

        ``index`` (each example's index in its whole data set) is handed to the components that draw their
        randomness per example (:attr:`Component.per_example`); the others use their batch's stream. ``precision``
        (``float32``, ``tf32``, ``bf16`` or ``auto``, resolved for the images' device and recorded in the result) is
        the components' arithmetic (:mod:`mixzoo.attacks.precision`): a component whose candidate the float32
        judgement does not confirm runs again on that example in float32, and each component's stat counts the
        candidates the low precision saw as broken, those float32 confirmed and the breaks of the float32 re-run."""
        precision = check_precision_device(precision, images.device)  # "auto" resolved for this device
        nhwc = isinstance(model, nn.Module) and uses_channels_last(model, precision, images.device)
        with channels_last(model, nhwc):
            return self._run(model, as_channels_last(images, nhwc), labels, progress, index, precision)

    def _run(self, model: nn.Module, images: torch.Tensor, labels: torch.Tensor, progress: bool,
             index: torch.Tensor | None, precision: str) -> EvalResult:
        t0 = time.perf_counter()
        check_images(images)
        n, bs = images.shape[0], int(self.options["batch_size"])
        if n == 0:
            raise InputError("no images to attack; pass at least one example")
        with exact_arithmetic(), torch.no_grad():
            clean = torch.cat([model(chunk) for chunk in images.split(bs)]).float()
        if torch.isnan(clean).any():
            raise NaNLogitsError(int(torch.isnan(clean).any(dim=1).sum()), "on the clean images")
        check_labels(labels, n, clean.shape[1])
        labels = labels.to(images.device)
        clean_correct = clean.argmax(dim=1) == labels
        robust, adv = clean_correct.clone(), images.clone()
        stats: list[ComponentStat] = []
        notes: list[str] = []
        self.per_example = index is not None
        comps = self.components(model, clean.shape[1])
        if not comps:  # robust accuracy would silently equal clean accuracy
            raise InputError(f"attack {self.name!r} has no component to run on this model with components="
                             f"{self.options.get('components')} and n_target_classes="
                             f"{self.options.get('n_target_classes')}; choose components the model has")
        with progress_bar(progress) as bar:
            for comp in comps:
                todo = torch.nonzero(clean_correct if comp.scope == "clean" else robust).squeeze(1)
                task = bar.add_task(f"{self.name}: {comp.name}", total=len(todo))
                start, newly, outside = time.perf_counter(), 0, 0
                own = torch.zeros_like(clean_correct)  # broken by this component on its own
                found_low, confirmed, rerun = 0, 0, 0
                arith = precision if comp.gradient_based else "float32"  # module docstring
                with pywarnings.catch_warnings(record=True) as caught:
                    pywarnings.simplefilter("always")
                    chunk = bs * forward_only_batches(comp, images.device, index is not None)
                    for idx in todo.split(chunk) if len(todo) else ():  # an empty tensor splits into one empty part
                        x, y = images[idx], labels[idx]
                        cand, inside, out = self._attempt(comp, model, x, y, idx, index, arith)
                        broken = (out.argmax(dim=1) != y) & inside & robust[idx]
                        outside += int((~inside).sum())
                        if arith != "float32":  # what the attack's own arithmetic saw
                            with torch.no_grad(), attack_arithmetic(arith, images.device):
                                low = model(cand)
                            seen = (low.argmax(dim=1) != y) & inside & robust[idx]
                            found_low += int(seen.sum())
                            confirmed += int((seen & broken).sum())
                            dropped = seen & ~broken
                            if dropped.any():  # bfloat16 stopped on a false break: this component again, in float32
                                sub = idx[dropped]
                                c2, in2, out2 = self._attempt(comp, model, images[sub], labels[sub], sub, index,
                                                              "float32")
                                again = (out2.argmax(dim=1) != labels[sub]) & in2
                                cand[dropped], out[dropped], inside[dropped] = c2, out2, in2
                                broken[dropped] = again
                                rerun += int(again.sum())
                        own[idx] = (out.argmax(dim=1) != y) & inside  # its final candidates (float32 re-runs too)
                        robust[idx[broken]] = False
                        adv[idx[broken]] = cand[broken]
                        newly += int(broken.sum())
                        bar.advance(task, len(idx))
                low = arith != "float32"
                alone = comp.scope == "clean"
                stats.append(ComponentStat(comp.name, newly, time.perf_counter() - start,
                                           int(own.sum()) if alone else None,
                                           found_low if low else None, confirmed if low else None,
                                           rerun if low else None, (clean_correct & ~own).cpu() if alone else None))
                notes += _component_notes(comp, index is not None and not comp.per_example and len(todo) > 0,
                                          [str(w.message) for w in caught], outside)
        square = [s for s in stats if s.name == "square"]
        if square and square[0].newly_broken and len(stats) > 1:
            notes.append(square_masking_note(square[0].newly_broken))
        return EvalResult(self.name, self.eps, self.norm, n, clean_correct.cpu(), robust.cpu(), adv, stats, notes,
                          time.perf_counter() - t0, precision)

    def _attempt(self, comp: Component, model: nn.Module, x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor,
                 index: torch.Tensor | None, precision: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``comp``'s candidates for ``x`` (dataset rows ``idx``) in ``precision``, whether each lies in the
        threat model, and the model's float32 logits there (outside autocast: the judgement)."""
        with attack_arithmetic(precision, x.device):
            if comp.per_example and index is not None:
                cand = comp.fn(x, y, index[idx.to(index.device)]).detach()
            else:
                cand = comp.fn(x, y).detach()
        cand = cand.to(x.dtype)
        inside = within_threat_model(cand, x, self.eps, self.norm)
        with torch.no_grad(), exact_arithmetic():
            out = model(cand).float()
        if torch.isnan(out[inside]).any():
            raise NaNLogitsError(int(torch.isnan(out[inside]).any(dim=1).sum()), f"at points found by {comp.name}")
        return cand, inside, out


def _component_notes(comp: Component, batch_stream: bool, caught: list[str], outside: int) -> list[str]:
    """The result's warnings about one component: it drew per batch though indices were given
    (``batch_stream``), the warnings it raised, candidates outside the threat model, all-zero starting gradients."""
    notes: list[str] = []
    if batch_stream:
        notes.append(f"{comp.name}: draws its randomness per batch, so its outcome can depend on the"
                     " batch size and the number of processes")
    notes += [f"{comp.name}: {m}" for m in dict.fromkeys(caught)]
    if outside:
        notes.append(f"{comp.name} returned {outside} points outside the eps-ball or [0, 1];"
                     " they were not counted")
    if sum(comp.zero_grad):
        notes.append(f"{comp.name}: {sum(comp.zero_grad)} example runs had an all-zero loss gradient at"
                     " the starting point (possible gradient masking)")
    return notes


def select_components(opts: dict[str, Any], available: tuple[str, ...], attack: str,
                      default: tuple[str, ...] | None = None) -> list[str]:
    """The components an attack runs: its ``components`` option, else ``default``, else all ``available``; a
    one-line error naming the choices for an unknown one."""
    chosen = opts.get("components") or list(default or available)
    unknown = [c for c in chosen if c not in available]
    if unknown:
        raise InputError(f"unknown component(s) {', '.join(unknown)} for attack {attack!r};"
                         f" choose from {', '.join(available)}")
    return [c for c in available if c in chosen]
