"""``local-smoothing-adaptive`` (Bai et al. (local smoothing) Eq. 7-9): locally biased smoothing with a trained
per-input strength.

``fit`` measures beta_0 on the pair (Bai et al. (local smoothing), Fig. 4's crossover, :mod:`.crossover`, on the first
``n_crossover`` calibration images; or takes ``beta0`` as given), trains the policy beta_theta on the train split with
the shared trainer (:mod:`mixzoo.methods.shared.training_loop`) and Bai et al. (local smoothing), Eq. 9
(:mod:`.policy`), and writes the card, the crossover curves and the policy's weights (safetensors next to the card,
sha256 in the card's ``[weights]``). ``build`` is :class:`~.smoothing.LocalSmoothingClassifier` with the policy as its
``log_alpha``. ``extra_attacks`` are the attacks of Bai et al. (local smoothing), Sec. 4.2 and 5.1 an adversary who
knows the method runs (:meth:`LocalSmoothingAdaptive.extra_attacks`).
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

from mixzoo.core.errors import InputError
from mixzoo.core.options import OptionSpec
from mixzoo.methods.base import ExtraAttack, number, square_extra
from mixzoo.methods.extra_attacks import card_values
from mixzoo.methods.local_smoothing.method import smoothing_fields
from mixzoo.methods.local_smoothing.smoothing import R_OPTIONS, SPACES
from mixzoo.methods.shared.network_files import RESUME_OPTIONS, SPLIT_OPTIONS, NetworkMethod

if TYPE_CHECKING:
    from torch import nn

    from mixzoo.core.card import MixCard

SECTION = "local-smoothing-adaptive"


class LocalSmoothingAdaptive(NetworkMethod):
    """Bai et al. (local smoothing), Eq. 7: ``(g_i + exp(beta_theta(x)) R_i h_i) / (1 + exp(beta_theta(x)) R_i)``,
    beta_theta a policy network on both base models' features trained with Eq. 9 around the measured crossover
    beta_0."""

    name = SECTION
    weights_of = "policy"
    record_keys = ("epochs", "batch_size", "lr", "weight_decay", "ema", "clean_weight", "steps", "eps_factor", "c1",
                   "c2", "c3", "alpha_ts", "r", "space", "accelerated", "eps_c", "width", "blocks")
    summary_keys = ("beta0", "beta0_source")
    title = "Local smoothing, adaptive"
    paper = "Bai et al. (local smoothing), Eq. 7-9, Fig. 4, Sec. 5-6.3"
    fit_cost = ("a PGD sweep over alpha_t on n_crossover calibration images (beta_0), then training: every batch"
                " attacked at a random alpha_t and through the policy, epochs x n_train images; minutes on a CPU for"
                " the digits zoo, longer with R_i = ratio (a Jacobian per attack step)")
    certificate = ("its strength exp(beta_theta(x)) R_i(x) depends on the input through a network, which Bai et al."
                   " (local smoothing), Thm 2 (fixed alpha) does not cover")
    options = {
        "beta0": OptionSpec("log alpha_0, Eq. 9's threshold, given", float,
                            default_note="measured: the crossover of Bai et al. (local smoothing), Fig. 4"),
        "n_crossover": OptionSpec("calibration images of the crossover sweep (at most --n-calib)", int, 200, low=1),
        "crossover_steps": OptionSpec("PGD steps of the crossover sweep (as Bai et al. (local smoothing)'s PGD-10)",
                                      int, 10, low=1),
        "crossover_alpha_ts": OptionSpec("attack-time alphas of the sweep", default_note="alpha_ts"),
        "alpha_ts": OptionSpec("attack-time alphas of the training attacks",
                               default_note="Bai et al. (local smoothing), Sec. 6.3's 0,0.316,...,3162,inf"),
        "r": OptionSpec("R_i(x) (Bai et al. 2024b, App. B.1; ratio: Bai et al. (local smoothing), Eq. 7)", str,
                        choices=tuple(R_OPTIONS), default_note="ratio"),
        "space": OptionSpec("what is smoothed (Bai et al. (local smoothing): logits)", str,
                            choices=tuple(SPACES), default_note="logits"),
        "accelerated": OptionSpec("true: Bai et al. (local smoothing), App. A.1's one gradient per model instead of the"
                                  " Jacobian (r grad_g or ratio)", bool),
        "eps_c": OptionSpec("added to ||grad h_i||_* in R_i = ratio", float, default_note="1e-6"),
        "c1": OptionSpec("Eq. 9's c1", float, default_note="0.5 (Bai et al. (local smoothing), Sec. 6.3)"),
        "c2": OptionSpec("Eq. 9's c2", float, default_note="0.8"),
        "c3": OptionSpec("Eq. 9's c3", float, default_note="3.2"),
        "epochs": OptionSpec("training epochs", int, low=1, high=10_000, default_note="5"),
        **SPLIT_OPTIONS,
        "batch_size": OptionSpec("clean images per batch (two attacked copies are added)", int, default_note="128"),
        "lr": OptionSpec("AdamW learning rate (Bai et al. (local smoothing) uses Adam)", float, default_note="1e-4"),
        "weight_decay": OptionSpec("AdamW weight decay", float, default_note="1e-5"),
        "ema": OptionSpec("EMA decay of the weights, 0 = off", float, default_note="0"),
        "clean_weight": OptionSpec("loss weight of clean images", float, default_note="1"),
        "steps": OptionSpec("PGD steps through the policy, drawn from LO,HI per batch; the alpha_t attacks use HI",
                            default_note="5,10"),
        "eps_factor": OptionSpec("attack radius factor drawn from LO,HI per example",
                                 default_note="1,1 (the full radius)"),
        "width": OptionSpec("channels of the policy network", int, low=1, high=4096, default_note="32"),
        "blocks": OptionSpec("residual blocks", int, default_note="2"),
        **RESUME_OPTIONS,
        "eval_n_iter": OptionSpec("iterations of the extra APGD attacks", int, 100, low=1),
        "eval_n_queries": OptionSpec("queries of the extra Square attack", int, 5000, low=1),
        "eval_n_target_classes": OptionSpec(
            "APGD-T targets of the extra attacks (3: each step costs a Jacobian)", int, 3, low=0),
    }

    # ------------------------------------------------------------------------------------------------ card
    def section_fields(self, params: dict[str, Any], source: str, sec: str) -> None:
        smoothing_fields(params, source, sec)
        number(params, "beta0", source, sec)
        if not math.isfinite(params["beta0"]):
            raise InputError(f"{source}: field '{sec}.beta0' must be finite, got {params['beta0']}")
        params.setdefault("eval_n_target_classes", 3)

    def summary_line(self, card: MixCard) -> str:
        q = card.params
        return (f"adaptive local smoothing: R_i {q['r']} on {q['space']}, beta_0 {q['beta0']:.3g}"
                f" (alpha_0 {math.exp(q['beta0']):.3g}), epochs {q.get('epochs')}")

    def key_values(self, card: MixCard) -> dict[str, Any]:
        return {"method": self.name,
                "card": card_values(card, ("r", "space", "norm", "accelerated", "eps_c", "taps", "network"))}

    # ------------------------------------------------------------------------------------------------ model
    def build(self, abc: nn.Module | None, rbc: nn.Module | None, card: MixCard, *,
              gradient: str = "exact") -> nn.Module:
        from mixzoo.methods.local_smoothing.policy import Policy
        from mixzoo.methods.local_smoothing.smoothing import LocalSmoothingClassifier
        from mixzoo.methods.shared.network_files import card_taps
        from mixzoo.zoo.pairs import model_device

        if abc is None or rbc is None:
            raise InputError(f"{self.name} needs both base models (its policy reads both)")
        q = card.params
        policy = Policy(abc, rbc, self.network(card).to(model_device(abc)), card_taps(abc, rbc, card))
        return LocalSmoothingClassifier(abc, rbc, alpha=0.0, r=q["r"], space=q["space"], norm=q["norm"],
                                        eps_c=q["eps_c"], accelerated=q["accelerated"], gradient=gradient,
                                        log_alpha=policy).eval()

    def extra_attacks(self, card: MixCard) -> list[ExtraAttack]:
        """Bai et al. (local smoothing), Sec. 5.1: through the policy with R_i held fixed and with the policy's
        gradient bypassed; Eq. 6 at fixed alpha_t = 0 (transfer from g), inf (transfer from h) and alpha_0 (the
        crossover); the policy attacked toward g (APGD whose loss also lowers beta, and beta alone); Square
        (gradient-free); the policy attacked through beta_theta before its crop and exp."""
        from mixzoo.methods.shared.gate_attacks import gate_logit_extra

        q = card.params
        apgd = {"n_iter": int(q["eval_n_iter"]), "n_target_classes": int(q["eval_n_target_classes"])}
        gradients = [("fixed-R", "fixed-R", "through the policy, R_i(x) held constant (Bai et al. (local smoothing),"
                      " Sec. 4.2: R_i is an extra gradient path that can mislead)")] if q["r"] != "one" else []
        gradients += [
            ("policy-fixed", "policy-fixed", "Bai et al. (local smoothing), Sec. 5.1: the adversary without the"
             " gradient through the policy"),
            ("alpha_t=0", "alpha_t=0", "Bai et al. (local smoothing), Eq. 6 at alpha_t = 0: transfer from g, judged on"
             " the adaptive classifier"),
            ("alpha_t=inf", "alpha_t=inf", "Bai et al. (local smoothing), Eq. 6 at alpha_t = inf: transfer from h"),
            ("alpha_t=alpha0", f"alpha_t={math.exp(q['beta0']):.6g}", "Bai et al. (local smoothing), Eq. 6 at the"
             " crossover alpha_0 (Bai et al. (local smoothing), Fig. 7: a fixed intermediate alpha_t was the strongest"
             " attack)")]
        return [*(ExtraAttack(f"apgd-{name}", "apgd", dict(apgd), gradient=gradient, why=why)
                  for name, gradient, why in gradients),
                ExtraAttack("policy-d", "adaptive-smoothing-apgd", {**apgd, "components": ["apgd-ce-alpha",
                                                                                         "apgd-t-alpha"]},
                            why="APGD whose loss also lowers beta_theta (toward the non-robust g; Bai et al. 2024b,"
                                " Sec. 4.2 D)"),
                ExtraAttack("policy-only", "adaptive-smoothing-apgd", {**apgd, "components": ["alpha-only"]},
                            why="the policy attacked alone: minimise beta_theta, g then decides"),
                square_extra(int(q["eval_n_queries"]),
                             why="gradient-free: input gradients inside R_i and the policy may mask the loss's"),
                # the policy attacked through beta_theta before its crop and exp (policy_attacks.py)
                gate_logit_extra("local-smoothing-policy-gate", q)]

    # ------------------------------------------------------------------------------------------------ fitting
    def objective(self) -> Any:
        from mixzoo.methods.local_smoothing.policy import PolicyObjective

        return PolicyObjective()

    def config(self, opts: dict[str, Any], seed: int) -> Any:
        from mixzoo.methods.local_smoothing.crossover import check_alpha_ts

        cfg = super().config(opts, seed)
        if "crossover_alpha_ts" in opts:
            check_alpha_ts(opts["crossover_alpha_ts"], "crossover_alpha_ts")  # before any work
        return cfg

    def prepare(self, pair: Any, cfg: Any, opts: dict[str, Any], seconds: dict[str, float]) -> Any:
        """Unless option ``beta0`` is given: the crossover of Bai et al. (local smoothing), Fig. 4 / Eq. 9 on the first
        ``n_crossover`` calibration images (:func:`~mixzoo.methods.local_smoothing.crossover.measure_crossover`, PGD
        with ``crossover_steps`` steps over the attack-time alphas ``crossover_alpha_ts``), measured by rank 0 alone;
        every rank's ``cfg.beta0`` is set to its beta_0. The measurement (``None`` on the other ranks)."""
        from mixzoo.core import distributed
        from mixzoo.methods.local_smoothing.crossover import check_alpha_ts, measure_crossover
        from mixzoo.methods.local_smoothing.policy import smoothing_classifier

        if "beta0" in opts:
            return None
        t0 = time.perf_counter()
        sweep = check_alpha_ts(opts["crossover_alpha_ts"], "crossover_alpha_ts") \
            if "crossover_alpha_ts" in opts else list(cfg.alpha_ts)
        calib = pair.data
        k = min(opts["n_crossover"], len(calib.labels))
        clf = smoothing_classifier(pair.abc, pair.rbc, cfg)
        crossover = None
        if distributed.world().main:  # rank 0 measures, the others take its beta_0
            with distributed.alone():
                crossover = measure_crossover(clf, calib.images[:k].to(pair.device), calib.labels[:k], sweep,
                                              eps=pair.eps, norm=pair.norm, steps=opts["crossover_steps"],
                                              seed=cfg.seed, batch_size=pair.batch_size)
        cfg.beta0 = distributed.gather(None if crossover is None else crossover.beta0)[0]
        seconds["crossover"] = time.perf_counter() - t0
        return crossover

    def card_fields(self, cfg: Any, opts: dict[str, Any], prepared: Any) -> dict[str, Any]:
        return {"r": cfg.r, "space": cfg.space, "norm": cfg.norm, "accelerated": cfg.accelerated, "eps_c": cfg.eps_c,
                "beta0": cfg.beta0, "beta0_source": "given" if "beta0" in opts else "measured"}

    def training_record(self, cfg: Any) -> dict[str, Any]:
        return {**super().training_record(cfg), "alpha_ts": [a if math.isfinite(a) else "inf" for a in cfg.alpha_ts]}

    def finish(self, params: dict[str, Any], pair: Any, prepared: Any, **_: Any) -> dict[str, Any]:
        if prepared is None:
            return {}
        params["crossover"] = {**prepared.record(), "split": "calibration",
                               "fingerprint": getattr(pair.data, "fingerprint", "")}
        return {"crossover": prepared.where}
