"""Adaptive smoothing as a mixing-method plugin (Bai et al. 2024b, Sec. 4-5): ``adaptive-smoothing``.

``fit`` trains the mixing network on the dataset's train split (:mod:`.training`) and writes the card plus the
network's weights (safetensors, next to the card, sha256 in the card's ``[weights]``); ``build`` rebuilds the
classifier (:class:`.mixing.AdaptiveClassifier`) from them; ``extra_attacks`` lists what an adversary who knows
the method runs besides the bench's shared attack (:meth:`AdaptiveSmoothing.extra_attacks`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mixzoo.core.errors import InputError
from mixzoo.core.options import OptionSpec
from mixzoo.methods.base import ExtraAttack, FitRequest, number, square_extra
from mixzoo.methods.extra_attacks import card_values
from mixzoo.methods.shared.network_files import (  # noqa: F401 - card_taps, load_network: also names of this module
    RESUME_OPTIONS,
    SPLIT_OPTIONS,
    NetworkMethod,
    card_taps,
    load_network,
)

if TYPE_CHECKING:
    from torch import nn

    from mixzoo.core.card import MixCard

SECTION = "adaptive-smoothing"


class AdaptiveSmoothing(NetworkMethod):
    """alpha_theta(x) from a small network on both base models' features (Bai et al. 2024b, Sec. 4.3), trained on clean
    and attacked train-split images with the composite loss (Eq. 4.2)."""

    name = SECTION
    record_keys = ("setting", "epochs", "batch_size", "lr", "weight_decay", "ema", "c_ce", "c_bce", "c_prod",
                   "clean_weight", "pseudo_labels", "steps", "eps_factor", "alpha_loss_max", "n_target_classes")
    summary_keys = ("setting", "alpha_min")
    title = "Adaptive smoothing"
    paper = "Bai et al. 2024b, Eq. 3.4, 4.2, Sec. 4-5, App. D.1"
    fit_cost = ("training: every batch attacked against the current mixture (setting A/B: PGD, C: APGD-CE +"
                " APGD-T), epochs x n_train images; minutes on a CPU for the Fashion-MNIST zoo")
    certificate = ("its alpha depends on the input, so Bai et al. 2024b, Lemma 3.2 / Thm 3.5 (constant alpha) do not"
                   " apply; with alpha_min > 0 a bound holds only through alpha_min, which mixzoo does not compute")
    options = {
        "setting": OptionSpec(
            "training attack (Bai et al. 2024b, Sec. 4.2): A gray-box PGD, B white-box PGD, C APGD-CE + APGD-T",
            str, default_note="C"),
        "epochs": OptionSpec("training epochs", int, low=1, high=10_000, default_note="5"),
        **SPLIT_OPTIONS,
        "batch_size": OptionSpec("clean images per batch (the attacked copies are added)", int,
                                 default_note="128"),
        "lr": OptionSpec("AdamW learning rate", float, default_note="1e-4"),
        "weight_decay": OptionSpec("AdamW weight decay", float, default_note="1e-5"),
        "ema": OptionSpec("EMA decay of the weights, 0 = off (App. D.1: 0.8)", float),
        "c_ce": OptionSpec("weight of the cross-entropy in Eq. 4.2", float, default_note="0.5"),
        "c_bce": OptionSpec("weight of the BCE on alpha in Eq. 4.2", float, default_note="1"),
        "c_prod": OptionSpec("weight of CE x BCE in Eq. 4.2", float, default_note="0.1"),
        "clean_weight": OptionSpec("loss weight of clean examples", float, default_note="2"),
        "pseudo_labels": OptionSpec(
            "authors (clean 0, attacked 1) | oracle (flipped where only the other model is right)",
            str),
        "temperature": OptionSpec("the ABC's softmax temperature (0 = hard max, as MixedNUTS)", float,
                                  default_note="1"),
        "alpha_min": OptionSpec(
            "evaluation-time lower bound of alpha (App. D.1), or 'search': the smallest of a grid"
            " whose robust accuracy on the calibration split (--n-calib images, APGD and setting D) is within"
            " robust_drop points of the RBC's", default_note="0"),
        "robust_drop": OptionSpec(
            "points of robust accuracy alpha_min=search may give up against the RBC", float, 1.5, low=0, high=100),
        "alpha_max": OptionSpec("evaluation-time upper bound of alpha (App. D.1)", float, 1.0),
        "width": OptionSpec("channels of the mixing network", int, low=1, high=4096, default_note="32"),
        "blocks": OptionSpec("residual blocks after the join", int, default_note="2"),
        "steps": OptionSpec("attack steps per batch, drawn uniformly from LO,HI", default_note="5,15"),
        "eps_factor": OptionSpec(
            "attack radius factor drawn uniformly from LO,HI (authors' U(.4, 1.1))",
                default_note="0.4,1.1"),
        "alpha_loss_max": OptionSpec(
            "the alpha-lowering attack term's weight is drawn from U(0, this)",
            float, default_note="0.5"),
        "n_target_classes": OptionSpec("APGD-T targets in setting C", int, default_note="1"),
        **RESUME_OPTIONS,
        "eval_n_iter": OptionSpec("iterations of the extra attacks the card declares", int, 100, low=1),
        "eval_n_queries": OptionSpec("queries of the extra Square attack", int, 5000, low=1),
        "eval_n_target_classes": OptionSpec("APGD-T targets of the extra attacks (AutoAttack's)", int, 9, low=0),
    }

    # ------------------------------------------------------------------------------------------------ card
    def section_fields(self, params: dict[str, Any], source: str, sec: str) -> None:
        from mixzoo.methods.adaptive.mixing import check_bounds

        number(params, "temperature", source, sec, low=0.0, default=1.0)
        number(params, "alpha_min", source, sec, low=0.0, high=1.0, default=0.0)
        number(params, "alpha_max", source, sec, low=0.0, high=1.0, default=1.0)
        try:
            check_bounds(params["alpha_min"], params["alpha_max"])
        except InputError:
            raise InputError(f"{source}: fields '{sec}.alpha_min' < '{sec}.alpha_max' must hold, got"
                             f" {params['alpha_min']} and {params['alpha_max']}") from None
        setting = params.get("setting")
        if setting not in ("A", "B", "C"):
            raise InputError(f"{source}: field '{sec}.setting' must be A, B or C, got {setting!r}")

    def summary_line(self, card: MixCard) -> str:
        q = card.params
        return (f"adaptive smoothing: setting {q['setting']}, alpha in ({q['alpha_min']:g}, {q['alpha_max']:g}),"
                f" temperature {q['temperature']:g}, epochs {q.get('epochs')}")

    def key_values(self, card: MixCard) -> dict[str, Any]:
        return {"adaptive": card_values(card, ("temperature", "alpha_min", "alpha_max", "taps", "network"))}

    # ------------------------------------------------------------------------------------------------ model
    def build(self, abc: nn.Module | None, rbc: nn.Module | None, card: MixCard, *,
              gradient: str = "exact") -> nn.Module:
        from mixzoo.methods.adaptive.mixing import AdaptiveClassifier
        from mixzoo.zoo.pairs import model_device

        if abc is None or rbc is None:
            raise InputError("adaptive smoothing needs both base models (its mixing network reads both)")
        q = card.params
        net = self.network(card).to(model_device(abc))
        return AdaptiveClassifier(abc, rbc, net, temperature=q["temperature"], alpha_min=q["alpha_min"],
                                  alpha_max=q["alpha_max"], gradient=gradient, taps=card_taps(abc, rbc, card)).eval()

    def extra_attacks(self, card: MixCard) -> list[ExtraAttack]:
        """Setting D, the mixing network attacked alone, its gradient bypassed, transfer from each base model,
        Square (gradient-free: the check for masked gradients), and the gate attacked through its logit."""
        from mixzoo.methods.shared.gate_attacks import gate_logit_extra

        n_iter, queries = int(card.params["eval_n_iter"]), int(card.params["eval_n_queries"])
        apgd = {"n_iter": n_iter, "n_target_classes": int(card.params["eval_n_target_classes"])}
        return [
            ExtraAttack("setting-d", "adaptive-smoothing-apgd", {**apgd, "components": ["apgd-ce-alpha",
                                                                                      "apgd-t-alpha"]},
                        why="Bai et al. 2024b, Sec. 4.2 D: APGD whose loss also lowers alpha (toward the ABC)"),
            ExtraAttack("alpha-only", "adaptive-smoothing-apgd", {**apgd, "components": ["alpha-only"]},
                        why="the mixing network attacked alone: minimise alpha, the ABC then decides"),
            ExtraAttack("apgd-gray", "apgd", apgd, gradient="gray",
                        why="Bai et al. 2024b, Sec. 4.2 A: the mixing network's gradient bypassed (alpha constant"
                            " backward)"),
            ExtraAttack("transfer-abc", "apgd", apgd, gradient="transfer-abc",
                        why="Bai et al. 2024b, Sec. 5.1.1 STD attack: the ABC's gradient, judged on the mixture"),
            ExtraAttack("transfer-rbc", "apgd", apgd, gradient="transfer-rbc",
                        why="Bai et al. 2024b, Sec. 5.1.1 ROB attack: the RBC's gradient, judged on the mixture"),
            square_extra(queries),
            # the gate attacked through its pre-sigmoid logit gamma, with the RBC-margin screen (gate_attacks.py)
            gate_logit_extra("adaptive-smoothing-gate", card.params),
        ]

    # ------------------------------------------------------------------------------------------------ fitting
    def objective(self) -> Any:
        from mixzoo.methods.adaptive.training import AdaptiveObjective

        return AdaptiveObjective()

    def config(self, opts: dict[str, Any], seed: int) -> Any:
        cfg = super().config(opts, seed)
        _alpha_bounds(opts)  # checked before any work
        return cfg

    def card_fields(self, cfg: Any, opts: dict[str, Any], prepared: Any) -> dict[str, Any]:
        _, alpha_min, alpha_max = _alpha_bounds(opts)
        return {"setting": cfg.setting, "temperature": cfg.temperature, "alpha_min": alpha_min, "alpha_max": alpha_max}

    def attack_fields(self, cfg: Any) -> dict[str, Any]:
        return {"training_setting": cfg.setting}

    def finish(self, params: dict[str, Any], pair: Any, prepared: Any, *, weights: dict[str, str], out: Path,
               opts: dict[str, Any], request: FitRequest, seconds: dict[str, float]) -> dict[str, Any]:
        """alpha_min=search (:func:`.bounds.search_alpha_min`) on the pair's calibration images, by rank 0 alone
        under torchrun (the other ranks have finished)."""
        from mixzoo.core import distributed
        from mixzoo.core.card import MixCard
        from mixzoo.core.record import RunRecord
        from mixzoo.core.request import EvalRequest
        from mixzoo.methods.adaptive.bounds import ALPHA_MIN_GRID, search_alpha_min
        from mixzoo.zoo.pairs import model_key

        if opts.get("alpha_min") != "search":
            return {}
        t0 = time.perf_counter()
        # a card next to the weights just written, only to build each candidate from (never saved)
        probe = MixCard(self.name, dict(params), abc=pair.info("abc"), rbc=pair.info("rbc"), dataset=pair.dataset,
                        weights=dict(weights))
        probe.path = out
        base = {"data": pair.data.fingerprint, "n": len(pair.data.labels), "abc": model_key(pair.abc),
                "rbc": model_key(pair.rbc), "purpose": "alpha_min search"}

        def at(alpha_min: float) -> MixCard:
            probe.params["alpha_min"] = alpha_min
            return probe

        with distributed.alone():
            params["alpha_min"], params["alpha_min_search"] = search_alpha_min(
                lambda a: self.build(pair.abc, pair.rbc, at(a)), pair.rbc, pair.data.images, pair.data.labels,
                robust_drop=opts["robust_drop"], grid=tuple(a for a in ALPHA_MIN_GRID if a < params["alpha_max"]),
                rbc_key={**base, "model": "rbc"}, key_parts=lambda a: {**base, **self.key_parts(at(a))},
                request=EvalRequest(RunRecord(eps=pair.eps, norm=pair.norm, seed=request.seed,
                                              batch_size=request.batch_size or 250), pair.cache,
                                    progress=request.progress))
        seconds["alpha_min_search"] = time.perf_counter() - t0
        return {}


def _alpha_bounds(opts: dict[str, Any]) -> tuple[bool, float, float]:
    """``(search, alpha_min, alpha_max)`` of the options (App. D.1's evaluation-time bounds; ``alpha_min="search"``
    searches it after training, from 0); one-line errors for values that are not numbers or bounds."""
    from mixzoo.methods.adaptive.mixing import check_bounds

    search = opts.get("alpha_min") == "search"
    if isinstance(opts.get("alpha_min"), str) and not search:
        raise InputError(f"option alpha_min of adaptive-smoothing must be a number or 'search', got"
                         f" {opts['alpha_min']!r}")
    alpha_min = opts.get("alpha_min", 0.0)
    if isinstance(alpha_min, bool) or not (search or isinstance(alpha_min, int | float)):
        raise InputError(f"option alpha_min of adaptive-smoothing must be a number, got {alpha_min!r}")
    low, high = check_bounds(0.0 if search else float(alpha_min), opts["alpha_max"], "options alpha_min, alpha_max")
    return search, low, high
