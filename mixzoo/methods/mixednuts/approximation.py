"""How good is Algorithm 1's surrogate? The approximation-quality check of Bai et al. 2024a, App. D.9.

Algorithm 1 solves problem (7) with the minimum-margin perturbations of h^LN, the layer-normed RBC, in place of
those of the transformed RBC h^M(s, p, c) that the mixed classifier actually uses, so that one MMAA run serves every
grid point. App. D.9 measures the mismatch: attack h^M(s*, p*, c*) itself with MMAA on the same calibration images,
re-run Algorithm 1 at (s*, p*, c*) on those examples, and compare the objective (and hence alpha) with what the
surrogate promised. The paper's CIFAR-100 example: 50.0 % from the surrogate, 66.7 % re-computed. A re-computed
objective near the surrogate one means the calibration can be trusted; a much larger one means the transformed RBC
is easier to push to small margins than h^LN suggested, and alpha (chosen for beta on h^LN) protects less
robustness than intended.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mixzoo.core.errors import InputError
from mixzoo.methods.mixednuts.mixing import transformed_rbc  # noqa: F401 - importable from here too


@dataclass
class ApproximationCheck:
    """App. D.9 in numbers, for one mix card (fractions, not percent)."""

    alpha_card: float  # the alpha the card records
    objective_surrogate: float  # Algorithm 1's objective at (s*, p*, c*) on MMAA(h^LN) points: the card's
    objective_check: float  # ... on MMAA(h^M(s*, p*, c*)) points, as App. D.9
    objective_worst: float  # ... on whichever of the two points gives h^M the smaller margin, per image
    alpha_surrogate: float
    alpha_check: float  # the alpha beta asks for on MMAA(h^M) points
    alpha_worst: float
    robust_accuracy_ln: float  # share of calibration images MMAA does not flip on h^LN
    robust_accuracy_m: float  # ... on h^M(s*, p*, c*)
    robust_accuracy_worst: float  # ... that neither point flips for h^M
    beta_kept_surrogate: float  # share of attacked-correct images whose h^M margin reaches the card's threshold
    beta_kept_check: float  # ... (1 - alpha) / alpha, on MMAA(h^M) points: what the card's alpha delivers
    beta_kept_worst: float  # ... on the per-image worst points (the surrogate is exact when these equal beta)
    beta: float
    n: int
    seconds: float
    cache_hits: dict[str, bool]
    refit: bool = False  # the card's alpha came from the second pass (`mix --refit-alpha`): compare with *_worst

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def notes(self) -> list[str]:
        """What a reader of the numbers should know."""
        out = []
        expected = max(self.alpha_worst, self.alpha_surrogate) if self.refit else self.alpha_surrogate
        if abs(self.alpha_card - expected) > 1e-9:
            out.append(f"the card's alpha {self.alpha_card:.10f} is not what Algorithm 1 gives on the card's own data"
                       f" with this version of mixzoo ({expected:.10f}); re-run `mixzoo mix`")
        if self.beta_kept_worst < self.beta:
            out.append(f"on the transformed RBC's own minimum-margin points the card's alpha keeps"
                       f" {self.beta_kept_worst:.2%} of the attacked-correct margins, not beta = {self.beta:.2%}:"
                       " expect a little more robust accuracy lost than beta promises (alpha"
                       f" {self.alpha_worst:.4f} would keep beta)")
        return out


def worst_points(card: Any, *raw_logits: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
    """Per image, the RBC logits (one row from one of ``raw_logits``, raw logits at different attack points) at
    which h^M(s*, p*, c*) has the smallest signed margin, a flipped prediction beating any margin.

    All points are valid perturbations, so h^M's minimum margin is at most the smallest of them; taking the worst
    guards against an attack on h^M weakened by the transform's flat regions."""
    from mixzoo.attacks.margins import selection_key, signed_margin
    from mixzoo.methods.mixednuts.transforms import rbc_transform, transform_of

    if labels is None or not raw_logits:
        raise InputError("worst_points needs at least one logits tensor and labels=")
    keys = []
    for raw in raw_logits:
        m = rbc_transform(raw, **transform_of(card.params))
        keys.append(selection_key(m, signed_margin(m, labels), labels))
    best = torch.stack(keys).argmin(0)  # ties go to the first tensor
    stacked = torch.stack(raw_logits)
    return stacked[best, torch.arange(stacked.shape[1])]


def _at_card(card: Any, clean: torch.Tensor, labels: torch.Tensor, attacked: torch.Tensor, **changes: Any) -> Any:
    """Algorithm 1 at the card's (s*, p*, c*), beta, clamp and top_k (:func:`.calibrate.calibrate` on a one-point grid,
    no App. D.8.2 filter)."""
    from mixzoo.methods.mixednuts.calibrate import calibrate
    from mixzoo.methods.mixednuts.grid import Grid

    q = card.params
    return calibrate(clean_logits=clean, clean_labels=labels, attacked_logits=attacked, attacked_labels=labels,
                     beta=q["beta"], clamp=q["clamp"], top_k=q["top_k"], grid=Grid.point(q["s"], q["p"], q["c"]),
                     max_argmax_change=None, progress=False, **changes)


def check_approximation(card: Any, *, rbc: str | nn.Module | None = None, data_dir: str | None = None,
                        cache_dir: str | Path | None = None, use_cache: bool = True, device: str = "cpu",
                        allow_unsafe: bool = False, progress: bool = True) -> ApproximationCheck:
    """Run the App. D.9 check for a mix card made by ``mixzoo mix`` (``method = "mmaa"``).

    Uses the card's calibration images (same fingerprint) and MMAA settings; both MMAA runs are cached like
    ``mix``'s, so the h^LN one is usually free and a second check costs seconds.
    """
    from mixzoo.core.cache import Cache
    from mixzoo.core.card import MixCard
    from mixzoo.methods.mixednuts.calibration_data import cached_mmaa, mmaa_of_card
    from mixzoo.methods.mixednuts.transforms import confidence_margin, rbc_transform, transform_of
    from mixzoo.zoo.data import load_dataset
    from mixzoo.zoo.pairs import cached_logits, card_dataset, card_model, check_device, check_model_fits

    t0 = time.perf_counter()
    check_device(device)
    if not isinstance(card, MixCard):
        card = MixCard.load(card)
    if card.method != "mixednuts" or card.params["fit"] != "mmaa" or not card.attack or not card.data \
            or card.params["beta"] is None:
        raise InputError(f"the App. D.9 check needs a card made by `mixzoo mix` (MixedNUTS fitted by MMAA, with its"
                         f" attack and data records); this one has method {card.method!r},"
                         f" fit {card.params.get('fit')!r}")
    rbc_m = card_model(card, "rbc", rbc, device=device, allow_unsafe=allow_unsafe)
    data = load_dataset(card_dataset(card, rbc_m), "calibration", n=card.data["n"], root=data_dir)
    check_model_fits(rbc_m, data, "RBC")
    if data.fingerprint != card.data.get("fingerprint"):
        raise InputError(f"the {data.name} calibration images here (fingerprint {data.fingerprint}) are not the"
                         f" ones the card was calibrated on ({card.data.get('fingerprint')}); pass the same data"
                         " directory (--data-dir) as for `mixzoo mix`")
    cache = Cache(cache_dir, enabled=use_cache)
    mmaa = mmaa_of_card(card)
    settings = dict(cache=cache, device=device, progress=progress)
    clean = cached_logits(rbc_m, data, cache=cache, device=device, progress=progress, what="RBC clean logits")
    hits_before = len(cache.hits)
    surrogate = cached_mmaa(rbc_m, data, mmaa, **settings)
    hits = {"mmaa_ln": len(cache.hits) > hits_before}
    hits_before = len(cache.hits)
    direct = cached_mmaa(rbc_m, data, mmaa, transform=card, **settings)
    hits["mmaa_m"] = len(cache.hits) > hits_before

    def transformed(raw: torch.Tensor) -> torch.Tensor:
        return rbc_transform(raw, **transform_of(card.params))

    worst = worst_points(card, surrogate["logits"], direct["logits"], labels=data.labels)
    # the surrogate figures are recomputed rather than read from the card, so all sides are the same computation
    base, check, both = (_at_card(card, clean, data.labels, r) for r in (surrogate["logits"], direct["logits"], worst))

    def robust(raw: torch.Tensor, judge=transformed) -> float:
        return float((judge(raw).argmax(1) == data.labels).double().mean())

    threshold = 1.0 / card.params["alpha"] - 1.0  # alpha = 1 / (1 + q), Algorithm 1 line 15

    def kept(raw: torch.Tensor) -> float:
        """Eq. 7's constraint with the card's alpha, counted as Algorithm 1 counts (float64, LN argmax)."""
        right = raw.argmax(1) == data.labels
        margins = confidence_margin(transformed(raw[right].double()))
        return float((margins >= threshold - 1e-12).double().mean()) if right.any() else float("nan")

    return ApproximationCheck(
        alpha_card=float(card.params["alpha"]), objective_surrogate=float(base.params["objective"]),
        objective_check=float(check.params["objective"]), objective_worst=float(both.params["objective"]),
        alpha_surrogate=float(base.params["alpha"]), alpha_check=float(check.params["alpha"]),
        alpha_worst=float(both.params["alpha"]), robust_accuracy_ln=robust(surrogate["logits"], judge=lambda r: r),
        robust_accuracy_m=robust(direct["logits"]), robust_accuracy_worst=robust(worst),
        beta_kept_surrogate=kept(surrogate["logits"]), beta_kept_check=kept(direct["logits"]),
        beta_kept_worst=kept(worst), beta=float(card.params["beta"]),
        n=len(data), seconds=time.perf_counter() - t0, cache_hits=hits, refit="alpha_refit" in card.data)


def refit_alpha(card: Any, rbc: nn.Module, cdata: Any, *, cache: Any, device: str = "cpu", progress: bool = True,
                abc_clean_correct: torch.Tensor | None = None) -> Any:
    """Second pass of Algorithm 1 (``mixzoo mix --refit-alpha``): keep (s*, p*, c*), attack h^M(s*, p*, c*) itself
    with MMAA (App. D.9) and re-choose alpha (line 15) on the per-image worst of its points and the first pass's,
    so that beta of the attacked-correct margins of the classifier actually used reach the threshold.

    The card gets the larger of the two passes' alphas (and that pass's objective), so the constraint of Eq. 7 holds
    on both sets of points. The second pass alone can give a smaller alpha: images its stronger points flip leave
    the attacked-correct set, and with them small margins. ``cdata`` is the first pass's
    :class:`mixzoo.zoo.pairs.CalibrationData`. The card's grid heat map stays the first pass's.
    """
    from mixzoo.methods.mixednuts.calibration_data import cached_mmaa, mmaa_of_card

    direct = cached_mmaa(rbc, cdata.dataset, mmaa_of_card(card), cache=cache, device=device, progress=progress,
                         transform=card)
    worst = worst_points(card, cdata.attacked_logits, direct["logits"], labels=cdata.labels)
    second = _at_card(card, cdata.clean_logits, cdata.labels, worst, abc_clean_correct=abc_clean_correct,
                      objective="relaxed" if abc_clean_correct is not None else "standard")
    taken = second if second.params["alpha"] > card.params["alpha"] else card
    first, again = card.params, second.params
    card.notes.append(f"alpha refit on MMAA of h^M(s*, p*, c*) (App. D.9, --refit-alpha): first pass"
                      f" {first['alpha']:.6f} (objective {first['objective']:.4f}), second pass {again['alpha']:.6f}"
                      f" ({again['objective']:.4f}); the card takes the larger alpha; the grid heat map is the first"
                      " pass's")
    card.data["alpha_refit"] = {"alpha_first_pass": first["alpha"], "objective_first_pass": first["objective"],
                                "alpha_second_pass": again["alpha"], "objective_second_pass": again["objective"],
                                "points": "per-image worst of MMAA(h^LN) and MMAA(h^M(s*, p*, c*))"}
    card.params["alpha"], card.params["objective"] = taken.params["alpha"], taken.params["objective"]
    return card
