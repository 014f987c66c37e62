"""What a robustness evaluation returns (the bench consumes these names)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from mixzoo.core.errors import InputError, NaNLogitsError


@dataclass
class ComponentStat:
    """One attack component of an ensemble: how many examples it broke that earlier components had not."""

    name: str
    newly_broken: int
    seconds: float
    # a component that attacks every clean-correct example afresh (``scope="clean"``): how many it broke on its own,
    # earlier components' breaks included (its result as a stand-alone evaluation); None for the others
    own_broken: int | None = None
    # with precision "bf16" (None in float32): the still-robust examples whose candidate the model misclassified
    # under bfloat16 autocast, and those of them the float32 output (outside autocast) confirmed; the other
    # ``found_bf16 - confirmed_float32`` candidates were dropped and the component ran again on those examples in
    # float32, breaking ``rerun_float32`` of them. ``newly_broken`` counts float32-confirmed breaks only.
    found_bf16: int | None = None
    confirmed_float32: int | None = None
    rerun_float32: int | None = None


@dataclass
class EvalResult:
    """Clean and robust correctness per example under an attack ensemble (AutoAttack-style, App. B.2)."""

    attack: str
    eps: float
    norm: str
    n: int
    clean_correct: torch.Tensor  # bool [n]
    robust_correct: torch.Tensor  # bool [n], correct under every component
    adv_images: torch.Tensor  # per example the successful adversarial image, else the clean one
    components: list[ComponentStat] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    precision: str = "float32"  # the attacks' arithmetic; breaks are judged in float32 either way

    @property
    def clean_accuracy(self) -> float:
        """Fraction of examples classified correctly without attack."""
        return float(self.clean_correct.float().mean()) if self.n else float("nan")

    @property
    def robust_accuracy(self) -> float:
        """Fraction of examples no component broke."""
        return float(self.robust_correct.float().mean()) if self.n else float("nan")


AttackResult = EvalResult  # the name the hook specification uses


def nan_error(count: int, where: str) -> InputError:
    """The one-line error for ``count`` examples with NaN logits ``where`` (never counted as robust)."""
    return NaNLogitsError(count, where)
