"""Constant-alpha mixing of probabilities (Bai et al. 2024b, Eq. 3.4; papers 002/004) as a mixing-method plugin.

``log((1 - alpha) softmax(g / T) + alpha softmax(h))`` with one alpha for every input. Fitted from a given alpha,
by Algorithm 1's margin rule on the raw RBC logits (keep ``beta`` of the attacked-correct margins), or by choosing
the alpha whose robust accuracy on the calibration split is closest to ``target_robust`` (bisection over the alpha
grid; robust accuracy grows with alpha). It is also the bench's matched baseline (``baseline = True``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from mixzoo.core.errors import InputError
from mixzoo.core.options import OptionSpec
from mixzoo.methods.base import FitRequest, FitResult, MixingMethod, number

if TYPE_CHECKING:
    import torch
    from torch import nn

    from mixzoo.core.card import MixCard
    from mixzoo.core.request import EvalRequest

FITS = ("given", "linear", "matched")
MATCH_ATTACK = "adaptive-apgd"  # what target_robust matches alpha with: cheaper than a bench's main attack
MATCH_OPTIONS: dict[str, Any] = {"n_iter": 25, "n_target_classes": 3}


def alpha_grid(step: float = 0.01) -> list[float]:
    """Candidate constant mixing weights 1/2 ... 1 (Bai et al. 2024a, footnote 1, Bai et al. 2024b, Sec. 3: alpha >=
    1/2)."""
    return [round(float(a), 6) for a in np.arange(0.5, 1.0 + step / 2, step)]


class Linear(MixingMethod):
    """The linear mixture of Bai et al.: constant alpha, raw RBC logits, ABC at temperature T (default 1)."""

    name = "linear"
    title = "Linear mix"
    paper = "Bai et al. 2024b, Eq. 3.4, 002/004"
    fit_cost = "a given alpha is free; beta: MMAA on the calibration images (cached); target_robust: ~6 attacks"
    baseline = True
    options = {
        "alpha": OptionSpec("the RBC's weight, given", float, low=0.5, high=1.0),
        "beta": OptionSpec("choose alpha by Algorithm 1's margin rule on the raw RBC logits", float, low=0, high=1,
                           default_note="0.985 when neither alpha nor target_robust is given"),
        "target_robust": OptionSpec(
            "choose alpha whose robust accuracy on the calibration split is closest to this", float, low=0, high=1),
        "temperature": OptionSpec("the ABC's softmax temperature", float, 1.0, low=0),
        "attack": OptionSpec("attack for target_robust", str, MATCH_ATTACK),
        "n_iter": OptionSpec("APGD iterations (MMAA for beta; the attack for target_robust)", int, low=1,
                             default_note="100 for beta; the matching attack's for target_robust"),
    }

    def validate(self, params: dict[str, Any], source: str) -> dict[str, Any]:
        sec = self.name
        number(params, "alpha", source, sec, low=0.5, high=1.0)
        number(params, "temperature", source, sec, low=0.0, default=1.0)
        number(params, "beta", source, sec, low=0.0, high=1.0, default=None, allow_none=True)
        number(params, "target_robust", source, sec, low=0.0, high=1.0, default=None, allow_none=True)
        fit = params.setdefault("fit", "given")
        if fit not in FITS:
            raise InputError(f"{source}: field '{sec}.fit' must be one of {', '.join(FITS)}, got {fit!r}")
        if fit == "linear" and params["beta"] is None:  # Algorithm 1's margin rule chose alpha at this beta
            raise InputError(f"{source}: missing field '{sec}.beta' (required for fit 'linear')")
        return params

    def check_card(self, card: MixCard, source: str) -> None:
        """A beta fit's MMAA record (``[attack]``, ``data.n``), as MixedNUTS checks it."""
        from mixzoo.methods.mixednuts.records import check_mmaa_record

        check_mmaa_record(card, source)

    def upgrade_v1(self, data: dict[str, Any], source: str) -> dict[str, Any] | None:
        if data.get("method") != "linear":
            return None
        if "alpha" not in data:
            raise InputError(f"{source}: missing field 'alpha'; write the card with `mixzoo mix` or add it")
        params = {k: data[k] for k in ("alpha", "beta", "temperature") if k in data}
        params["fit"] = "linear"
        return params

    def summary_line(self, card: MixCard) -> str:
        q = card.params
        return f"linear: alpha={q['alpha']:.4g} temperature={q['temperature']:g} fit={q['fit']}"

    def key_parts(self, card: MixCard) -> dict[str, Any]:
        out = {"linear_alpha": card.params["alpha"]}
        if card.params["temperature"] != 1.0:
            out["temperature"] = card.params["temperature"]
        return out

    def gradients(self, card: MixCard) -> tuple[str, ...]:
        """``exact`` and ``bypass`` (Bai et al. 2024a, App. B.2.2's auxiliary-mixture gradient, as for MixedNUTS)."""
        return ("exact", "bypass")

    def build(self, abc: nn.Module | None, rbc: nn.Module | None, card: MixCard, *,
              gradient: str = "exact") -> nn.Module:
        from mixzoo.methods.mixednuts.mixing import MixedClassifier, MixingParams

        return MixedClassifier(abc, rbc, MixingParams(alpha=card.params["alpha"],
                                                      temperature=card.params["temperature"], transform=False),
                               gradient=gradient)

    def certified_mixture(self, card: MixCard) -> tuple[float, float]:
        """The card's alpha and ABC temperature: Bai et al. 2024b, Eq. 3.4 itself, so Lemma 3.2 applies (``mixzoo
        certify``)."""
        return card.params["alpha"], card.params["temperature"]

    def match(self, abc: nn.Module, rbc: nn.Module, images: Any, labels: Any, target: float,
              request: EvalRequest) -> tuple[float, list[dict]]:
        """The bench's matched baseline: the alpha whose robust accuracy is closest to ``target``
        (:func:`match_linear_alpha`) under ``request``."""
        return match_linear_alpha(abc, rbc, images, labels, target, request)

    def card_at(self, alpha: float, template: MixCard | None = None, **params: Any) -> MixCard:
        """A linear card at ``alpha`` for the pair of ``template`` (the bench's matched baseline)."""
        from mixzoo.core.card import MixCard

        pair = {} if template is None else {"abc": dict(template.abc), "rbc": dict(template.rbc),
                                            "dataset": template.dataset}
        return MixCard(self.name, {"alpha": alpha, "fit": "given", **params}, **pair)

    def fit(self, request: FitRequest) -> FitResult:
        from mixzoo.core.card import MixCard, provenance
        from mixzoo.zoo.pairs import DEFAULT_ABC, DEFAULT_RBC, model_hash, model_name, resolve_model

        opts = dict(request.options)
        chosen = [k for k in ("alpha", "beta", "target_robust") if opts.get(k) is not None]
        if len(chosen) > 1:
            raise InputError(f"mixing method 'linear': give one of alpha, beta, target_robust, not"
                             f" {' and '.join(chosen)}")
        if request.out is not None:
            MixCard.check_path(request.out)
        t0 = time.perf_counter()
        temperature = float(opts.get("temperature", 1.0))
        if opts.get("alpha") is not None:
            abc = resolve_model(request.abc or DEFAULT_ABC, request.device, request.allow_unsafe)
            rbc = resolve_model(request.rbc or DEFAULT_RBC, request.device, request.allow_unsafe)
            card = MixCard(self.name, {"alpha": opts["alpha"], "temperature": temperature, "fit": "given"},
                           abc={"name": model_name(abc), "weight_hash": model_hash(abc)},
                           rbc={"name": model_name(rbc), "weight_hash": model_hash(rbc)},
                           dataset=request.dataset or getattr(getattr(rbc, "spec", None), "dataset", None),
                           provenance=provenance(command=request.provenance_command))
            summary: dict[str, Any] = {"alpha": card.params["alpha"]}
        elif opts.get("target_robust") is not None:
            card, summary = self._matched(request, float(opts["target_robust"]), temperature, opts)
        else:
            card, summary = self._margin_rule(request, float(opts.get("beta", 0.985)), temperature, opts)
        path = card.save(request.out) if request.out is not None else None
        return FitResult(card, path, summary, {"total": time.perf_counter() - t0}, {})

    def _margin_rule(self, request: FitRequest, beta: float, temperature: float,
                     opts: dict[str, Any]) -> tuple[MixCard, dict[str, Any]]:
        """Algorithm 1's alpha on the raw RBC logits (no LN, clamp or power), from the cached MMAA of
        ``mixzoo mix``."""
        from mixzoo.methods.mixednuts.calibration_data import pair_calibration_data
        from mixzoo.zoo.pairs import prepare_pair

        pair = prepare_pair(request)
        cdata = pair_calibration_data(pair, n_iter=int(opts.get("n_iter", 100)))
        card = calibrate_alpha_linear(
            clean_logits=cdata.clean_logits, clean_labels=cdata.labels, attacked_logits=cdata.attacked_logits,
            attacked_labels=cdata.labels, beta=beta, abc=pair.info("abc"), rbc=pair.info("rbc"),
            dataset=pair.dataset, data_info=pair.data_info(), attack_info=cdata.attack)
        card.params["temperature"] = temperature
        return card, {"alpha": card.params["alpha"], "beta": beta}

    def _matched(self, request: FitRequest, target: float, temperature: float,
                 opts: dict[str, Any]) -> tuple[MixCard, dict[str, Any]]:
        """The alpha whose robust accuracy on the calibration split is closest to ``target``."""
        from mixzoo.core.card import MixCard, provenance
        from mixzoo.core.record import RunRecord
        from mixzoo.core.request import EvalRequest
        from mixzoo.zoo.pairs import model_key, prepare_pair

        pair = prepare_pair(request)
        options = dict(MATCH_OPTIONS)
        if "n_iter" in opts:
            options["n_iter"] = int(opts["n_iter"])
        data = pair.data
        record = RunRecord(attack=opts.get("attack", MATCH_ATTACK), attack_options=options, eps=pair.eps,
                           norm=pair.norm, seed=request.seed, batch_size=request.batch_size or 250)
        alpha, tried = match_linear_alpha(pair.abc, pair.rbc, data.images, data.labels, target, EvalRequest(
            record, pair.cache, progress=request.progress,
            key_parts={"data": data.fingerprint, "abc": model_key(pair.abc), "rbc": model_key(pair.rbc),
                       "match_n": len(data.labels)}))
        card = MixCard(self.name, {"alpha": alpha, "fit": "matched", "target_robust": target,
                                   "temperature": temperature}, abc=pair.info("abc"), rbc=pair.info("rbc"),
                       dataset=pair.dataset)
        card.data, card.attack = pair.data_info(), {"eps": pair.eps, "norm": pair.norm, "match": tried}
        card.provenance = provenance(command=request.provenance_command)
        return card, {"alpha": card.params["alpha"], "target_robust": target, "tried": tried}


def _bisect(robust: Any, n: int, target: float) -> tuple[int, dict[int, float]]:
    """Index in ``0 .. n-1`` whose ``robust(i)`` is closest to ``target``, searching by bisection for ``robust``
    growing with ``i`` (about log2(n) calls), and every ``robust(i)`` evaluated. Measured robust accuracy is only
    roughly monotone (attack noise), so the answer is the closest of every index evaluated, not only the last
    bracket; ties go to the larger index, the more robust."""
    seen: dict[int, float] = {}

    def at(i: int) -> float:
        if i not in seen:
            seen[i] = robust(i)
        return seen[i]

    lo, hi = 0, n - 1
    if at(hi) <= target:
        lo = hi
    elif at(lo) >= target:
        hi = lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if at(mid) < target:
            lo = mid
        else:
            hi = mid
    return min(seen, key=lambda i: (abs(seen[i] - target), -i)), seen


def match_linear_alpha(abc: nn.Module, rbc: nn.Module, images: torch.Tensor, labels: torch.Tensor,
                       target: float, request: EvalRequest, *, grid: list[float] | None = None
                       ) -> tuple[float, list[dict]]:
    """Bisection over the alpha grid for the linear mixture whose robust accuracy is closest to
    ``target``, each alpha evaluated with ``request`` (:func:`mixzoo.attacks.runner.evaluate`; its cache key adds
    the alpha).

    Robust accuracy of the linear mixture grows with alpha (more weight on the RBC), so a bisection over the grid
    needs about log2(51) = 6 evaluations; every evaluation tried is returned so the choice can be audited.
    """
    from mixzoo.attacks.runner import evaluate

    method = Linear()
    grid = grid or alpha_grid()

    def robust(i: int) -> float:
        c = method.card_at(grid[i])
        ev = evaluate(method.build(abc, rbc, c), images, labels,
                      request.replace(key_parts={**request.key_parts, **method.key_parts(c)},
                                      label=f"{method.name} alpha={grid[i]}"))
        return sum(ev["robust_correct"]) / len(ev["robust_correct"])

    best, tried = _bisect(robust, len(grid), target)
    return grid[best], [{"alpha": grid[i], "robust_accuracy": r} for i, r in sorted(tried.items())]


def calibrate_alpha_linear(**kwargs: Any) -> MixCard:
    """Alpha of the linear baseline (Bai et al. 2024b, Eq. 3.4: constant alpha, no LN/clamp/power, ABC at T = 1) by
    Algorithm 1 of Bai et al. 2024a on the raw logits; the arguments of
    :func:`mixzoo.methods.mixednuts.calibrate.calibrate`."""
    from mixzoo.methods.mixednuts.calibrate import calibrate

    return calibrate(linear=True, **kwargs)
