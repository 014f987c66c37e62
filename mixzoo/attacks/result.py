"""What a robustness evaluation returns (the bench consumes these names)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import torch


@dataclass
class ComponentStat:
    """One attack component of an ensemble: how many examples it broke that earlier components had not.

    A component that attacks every clean-correct example afresh (``scope="clean"``) also has ``own_broken``, how
    many it broke on its own, earlier components' breaks included, and ``own_correct`` (bool ``[n]``), the examples
    correct under it alone (None for the others). Outside float32 (None in float32): ``found_bf16``, the
    still-robust examples whose candidate the model misclassified in the low precision, ``confirmed_float32`` those
    of them the float32 output confirmed, and ``rerun_float32`` the breaks of the component's float32 re-run on the
    others; ``newly_broken`` counts float32-confirmed breaks only."""

    name: str
    newly_broken: int
    seconds: float
    own_broken: int | None = None
    found_bf16: int | None = None
    confirmed_float32: int | None = None
    rerun_float32: int | None = None
    own_correct: torch.Tensor | None = None


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


@dataclass
class Outcome(Mapping[str, Any]):
    """What :func:`mixzoo.attacks.runner.evaluate` returns for a data set: per example ``clean_correct`` and
    ``robust_correct`` (robust: correct under every component), each component's record (``name``,
    ``newly_broken``, ``seconds``, and where recorded ``own_outcomes``, a clean-scope component's stand-alone
    outcomes (one character per example, "1" correct, "0" not), with ``own_broken`` counted from them, and the bf16
    counts), the warnings, the attack seconds, where it ran (``device``, ``machine``), the arithmetic
    (``precision``), whether it was read from the cache (``cached``) and, when asked for, ``adversarial``
    (``{"index", "images"}``: the point that broke each broken example). Read as fields; it is also a read-only
    mapping of the same names (``ev["robust_correct"]``), the form a method's ``match`` / ``tradeoff_curve`` and a
    cached outcome's JSON use, ``adversarial`` present only when kept."""

    clean_correct: list[bool]
    robust_correct: list[bool]
    components: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    device: str = "unknown"
    machine: str = "unknown"
    precision: str = "float32"
    cached: bool = False
    adversarial: dict[str, torch.Tensor] | None = None

    @classmethod
    def of(cls, value: Mapping[str, Any]) -> Outcome:
        """``value`` (an outcome, or a mapping with its fields; other keys are not kept) as an :class:`Outcome`."""
        if isinstance(value, Outcome):
            return value
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in value.items() if k in names})

    @property
    def n(self) -> int:
        return len(self.clean_correct)

    def __getitem__(self, key: str) -> Any:
        if key not in self._keys():
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    def _keys(self) -> list[str]:
        return [f.name for f in fields(self) if f.name != "adversarial" or self.adversarial is not None]


def outcome_text(flags: Any) -> str:
    """Per-example outcomes (bools, or a bool tensor) as the text reports and cached outcomes keep them: one
    character per example, "1" correct, "0" not."""
    return "".join("1" if bool(v) else "0" for v in (flags.tolist() if isinstance(flags, torch.Tensor) else flags))


def merge_own(batches: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """Component ``name`` of an outcome merged from ``batches`` (cached outcomes, in order): its own breaks
    (``own_broken``: the clean-correct examples its stand-alone outcomes leave out) when every batch recorded them,
    with those outcomes (``own_outcomes``) when every batch kept them (a batch cached by an older mixzoo keeps
    only its count)."""
    parts = [(b, c) for b in batches for c in b["components"] if c["name"] == name]
    if not all("own_outcomes" in c or "own_broken" in c for _, c in parts):
        return {}
    out: dict[str, Any] = {"own_broken": sum(sum(b["clean_correct"]) - c["own_outcomes"].count("1")
                                             if "own_outcomes" in c else c["own_broken"] for b, c in parts)}
    if all("own_outcomes" in c for _, c in parts):
        out["own_outcomes"] = "".join(c["own_outcomes"] for _, c in parts)
    return out


def own_problem(component: dict[str, Any], clean: list[bool], robust: list[bool]) -> str | None:
    """Why a cached component's own breaks are not those of an outcome with these ``clean`` and ``robust``
    outcomes (``None`` when they are): its stand-alone outcomes ``own_outcomes`` must be one per example, correct
    only where clean-correct and wherever robust, and its count ``own_broken`` the clean-correct examples they
    leave out."""
    own, count = component.get("own_outcomes"), component.get("own_broken")
    where = f"component {component.get('name')!r}"
    if own is not None and (not isinstance(own, str) or len(own) != len(clean) or set(own) - {"0", "1"} or any(
            (o == "1" and not c) or (r and o != "1") for o, c, r in zip(own, clean, robust, strict=True))):
        return f"{where}: own_outcomes is not {len(clean)} outcomes between its robust and its clean ones"
    if count is not None and (type(count) is not int or count < 0):
        return f"{where}: own_broken is not a count"
    if own is not None and count is not None and count != sum(clean) - own.count("1"):
        return f"{where}: own_broken is {count}, its own_outcomes give {sum(clean) - own.count('1')}"
    return None
