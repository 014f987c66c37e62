"""Locally biased smoothing (Bai et al. (local smoothing); Bai et al. 2024b, Sec. 2.3, 3, App. B) as two training-free
mixing-method plugins.

* ``knn-smoothing`` (Bai et al. (local smoothing), Eq. 1-2): the ABC's logits smoothed toward a K-nearest-neighbour
  oracle over the dataset's train split, weighted by ``alpha ||grad g_i||_*``.
* ``local-smoothing`` (Bai et al. (local smoothing), Eq. 5, Bai et al. 2024b, Eq. 3.3): the ABC smoothed toward the RBC
  with weight ``alpha R_i(x)``, R_i one of Bai et al. 2024b, App. B.1's four options, on logits or probabilities,
  optionally accelerated (Bai et al. (local smoothing), App. A.1).

Both are fitted by writing the card from the given options (no data needed beyond the pair's checks); the attacks an
adversary who knows the method runs are declared in :meth:`extra_attacks` (Bai et al. (local smoothing), Sec. 4.2, 5.1,
6.1).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from mixzoo.core.errors import InputError
from mixzoo.core.options import OptionSpec
from mixzoo.methods.base import ExtraAttack, FitRequest, FitResult, MixingMethod, number, square_extra
from mixzoo.methods.card_fields import choice, flag
from mixzoo.methods.extra_attacks import card_values
from mixzoo.methods.local_smoothing.gradients import DUAL_ORDER
from mixzoo.methods.local_smoothing.smoothing import R_OPTIONS, SPACES

if TYPE_CHECKING:
    import torch
    from torch import nn

    from mixzoo.core.card import MixCard

# what the declared APGD extras run with: each step costs a Jacobian (c backward passes), so fewer targets than
# the shared attack's 9; iterations as AutoAttack's
EXTRA_APGD: dict[str, Any] = {"n_iter": 100, "n_target_classes": 3}
EXTRA_SQUARE_QUERIES = 1000
_TRAIN_CACHE: dict[tuple[str, int], Any] = {}


def _fit_fields(params: dict[str, Any], source: str, section: str) -> None:
    choice(params, "fit", FITS, source, section, "given")
    number(params, "target_clean", source, section, low=0.0, high=1.0, default=None, allow_none=True)
    number(params, "calibration_clean", source, section, low=0.0, high=1.0, default=None, allow_none=True)
    if params["fit"] == "target_clean" and params["target_clean"] is None:
        raise InputError(f"{source}: missing field '{section}.target_clean' (required for fit 'target_clean')")


def _threat(request: FitRequest) -> tuple[Any, dict[str, Any]]:
    """The checked pair of a fit request (models, data set, threat model; :func:`~mixzoo.zoo.pairs.prepare_pair`)
    and the card's common tables."""
    from mixzoo.core.card import provenance
    from mixzoo.zoo.pairs import prepare_pair

    pair = prepare_pair(request)
    if pair.norm not in DUAL_ORDER:
        raise InputError(f"--norm must be one of {', '.join(DUAL_ORDER)} for locally biased smoothing, got"
                         f" {pair.norm!r}")
    tables = {"abc": pair.info("abc"), "rbc": pair.info("rbc"), "dataset": pair.dataset,
              "attack": {"eps": pair.eps, "norm": pair.norm},
              "provenance": provenance(command=request.provenance_command)}
    return pair, tables


FITS = ("given", "target_clean")
SCALE_GRID = [10 ** (k / 10) for k in range(-30, 41)]  # alpha * median R, 1e-3 ... 1e4


def _alpha_option(opts: dict[str, Any], method: str) -> tuple[float | None, float | None]:
    """``(alpha, target_clean)``: exactly one of them given."""
    alpha, target = opts.get("alpha"), opts.get("target_clean")
    if alpha is not None and target is not None:
        raise InputError(f"mixing method {method!r}: give one of alpha, target_clean, not both")
    if alpha is None and target is None:
        raise InputError(f"mixing method {method!r} needs -O alpha=VALUE (e.g. -O alpha=1.0) or -O target_clean=0.9"
                         " (the largest alpha keeping that clean accuracy on the calibration split)")
    if target is not None and (isinstance(target, bool) or not isinstance(target, int | float)
                               or not 0.0 <= target <= 1.0):
        raise InputError(f"option target_clean must be a number in [0, 1], got {target!r}")
    return alpha, target


def choose_alpha(classifier: Any, images: torch.Tensor, labels: torch.Tensor, target: float,
                 batch_size: int = 250) -> tuple[float, list[dict[str, float]]]:
    """The largest alpha of a grid (``SCALE_GRID / median R``, and 0) whose clean accuracy on ``images`` is at least
    ``target``: g, h and R computed once (``classifier.parts``), the formula (Bai et al. (local smoothing), Eq. 2, 5)
    per alpha. No attack: clean accuracy falls from g's toward h's as alpha grows, so this is the most robust-leaning
    alpha the clean budget allows. Returns the alpha and every alpha's accuracy."""
    import torch

    from mixzoo.methods.local_smoothing.smoothing import smooth

    g, h, r = (torch.cat(t) for t in zip(*(classifier.parts(images[i:i + batch_size])
                                            for i in range(0, len(images), batch_size)), strict=True))
    labels = labels.to(g.device)
    med = float(r.median().clamp_min(1e-30))
    alphas = [0.0] + [c / med for c in SCALE_GRID]
    acc = [float((smooth(g, h, r, a).argmax(1) == labels).float().mean()) for a in alphas]
    ok = [i for i, v in enumerate(acc) if v >= target]
    best = max(ok) if ok else 0
    return alphas[best], [{"alpha": a, "clean_accuracy": v} for a, v in zip(alphas, acc, strict=True)]


def _fitted(name: str, params: dict[str, Any], pair: Any, tables: dict[str, Any], request: FitRequest,
            target: float | None, classifier: Any) -> FitResult:
    """The card of a training-free fit, saved to ``request.out`` if given; for ``target_clean``, ``alpha`` first
    chosen on the calibration split (:func:`choose_alpha`) with the classifier ``classifier()``."""
    from mixzoo.core.card import MixCard

    if target is not None:
        alpha, tried = choose_alpha(classifier(), pair.data.images.to(pair.device), pair.data.labels, target,
                                    pair.batch_size)
        clean = next(t["clean_accuracy"] for t in tried if t["alpha"] == alpha)
        params.update(alpha=alpha, target_clean=float(target), calibration_clean=clean, fit="target_clean")
    card = MixCard(name, params, **tables)
    if target is not None:
        card.data = pair.data_info()
    return FitResult(card, card.save(request.out) if request.out is not None else None, {}, {}, {})


def _extra_apgd(gradient: str, why: str) -> ExtraAttack:
    return ExtraAttack(f"apgd-{gradient}", "apgd", dict(EXTRA_APGD), gradient=gradient, why=why)


def smoothing_fields(params: dict[str, Any], source: str, sec: str) -> None:
    """The smoothing fields of both local-smoothing cards: ``r``, ``space``, ``norm``, ``accelerated`` (only with
    r = grad_g or ratio, Bai et al. (local smoothing), App. A.1) and ``eps_c``; one-line errors naming the field."""
    choice(params, "r", R_OPTIONS, source, sec, "ratio")
    choice(params, "space", SPACES, source, sec, "logits")
    choice(params, "norm", tuple(DUAL_ORDER), source, sec, "Linf")
    flag(params, "accelerated", source, sec)
    number(params, "eps_c", source, sec, positive=True, default=1e-6)
    if params["accelerated"] and params["r"] not in ("grad_g", "ratio"):
        raise InputError(f"{source}: field '{sec}.accelerated' applies to r = grad_g or ratio (Bai et al. (local"
                         f" smoothing), App. A.1), not {params['r']!r}; drop it")


class LocalSmoothing(MixingMethod):
    """Robust-network oracle, Bai et al. (local smoothing), Eq. 5 / Bai et al. 2024b, Eq. 3.3: ``(g_i + alpha R_i h_i)
    / (1 + alpha R_i)``."""

    name = "local-smoothing"
    title = "Local smoothing"
    paper = "Bai et al. (local smoothing), Eq. 5, App. A.1; Bai et al. 2024b, Eq. 3.3, App. B.1"
    fit_cost = "training-free: writes the card from the given alpha and R_i (no attack)"
    certificate = ("its weight alpha R_i(x) depends on x (input gradients), which Bai et al. 2024b, Lemma 3.2's"
                   " constant-alpha radius does not cover (Bai et al. (local smoothing), Thm 2 needs Lipschitz"
                   " constants of both gradients); certify a linear card, which is R_i = 1 on probabilities")
    options = {
        "alpha": OptionSpec("the smoothing strength alpha (0: the ABC; large: the RBC)", float, low=0,
                            default_note="none: give alpha or target_clean"),
        "r": OptionSpec("R_i(x) (Bai et al. 2024b, App. B.1; ratio: Bai et al. (local smoothing), Eq. 5)", str,
                        choices=tuple(R_OPTIONS), default_note="ratio (the card's default)"),
        "space": OptionSpec("what is smoothed (Bai et al. 2024b, Sec. 3)", str, choices=tuple(SPACES),
                            default_note="logits (the card's default)"),
        "accelerated": OptionSpec(
            "true: one gradient per model instead of the Jacobian (Bai et al. (local smoothing), App. A.1; R_i grad_g"
            " or ratio)", bool, default_note="false (the card's default)"),
        "target_clean": OptionSpec(
            "instead of alpha: the largest alpha whose clean accuracy on the calibration split is at least this (no"
            " attack)", float, low=0, high=1),
        "eps_c": OptionSpec("added to ||grad h_i||_* in R_i = ratio (Bai et al. (local smoothing), Sec. 4)", float,
                            low=0, default_note="1e-6 (the card's default)"),
    }

    def validate(self, params: dict[str, Any], source: str) -> dict[str, Any]:
        sec = self.name
        number(params, "alpha", source, sec, low=0.0)
        smoothing_fields(params, source, sec)
        _fit_fields(params, source, sec)
        return params

    def key_parts(self, card: MixCard) -> dict[str, Any]:
        return {"method": self.name,
                "card": card_values(card, ("alpha", "r", "space", "norm", "accelerated", "eps_c"))}

    def build(self, abc: nn.Module | None, rbc: nn.Module | None, card: MixCard, *,
              gradient: str = "exact") -> nn.Module:
        from mixzoo.methods.local_smoothing.smoothing import LocalSmoothingClassifier

        q = card.params
        return LocalSmoothingClassifier(abc, rbc, alpha=q["alpha"], r=q["r"], space=q["space"], norm=q["norm"],
                                        eps_c=q["eps_c"], accelerated=q["accelerated"], gradient=gradient)

    def extra_attacks(self, card: MixCard) -> list[ExtraAttack]:
        out = [_extra_apgd("alpha_t=0", "Bai et al. (local smoothing), Eq. 6 at alpha_t = 0: the attack on g, judged"
                                        " on the smoothed classifier"),
               _extra_apgd("alpha_t=inf", "Bai et al. (local smoothing), Eq. 6 at alpha_t = inf: the attack on h (Sec."
                                          " 4.2; Fig. 4 crossover)")]
        if card.params["r"] != "one":
            out.insert(0, _extra_apgd("fixed-R", "Bai et al. (local smoothing), Sec. 4.2: R_i(x) is an extra gradient"
                                                 " path; APGD with R_i held constant"))
        out.append(square_extra(EXTRA_SQUARE_QUERIES, why="gradient-free: input gradients inside R_i may mask the"
                                                          " loss gradient (Bai et al. 2024b, App. B.2)"))
        return out

    def fit(self, request: FitRequest) -> FitResult:
        from mixzoo.core.card import MixCard
        from mixzoo.methods.local_smoothing.smoothing import LocalSmoothingClassifier

        opts = dict(request.options)
        alpha, target = _alpha_option(opts, self.name)
        params = {"alpha": 0.0 if alpha is None else alpha, "fit": "given"}
        params.update({k: opts[k] for k in ("r", "space", "accelerated", "eps_c") if opts.get(k) is not None})
        MixCard(self.name, dict(params, norm=request.norm or "Linf"), dataset="check")  # options, before any work
        pair, tables = _threat(request)
        params["norm"] = tables["attack"]["norm"]
        q = MixCard(self.name, dict(params), **tables).params
        res = _fitted(self.name, params, pair, tables, request, target, lambda: LocalSmoothingClassifier(
            pair.abc, pair.rbc, alpha=0.0, r=q["r"], space=q["space"], norm=q["norm"], eps_c=q["eps_c"],
            accelerated=q["accelerated"]))
        res.summary = {k: res.card.params[k] for k in ("alpha", "r", "space")}
        return res


class KNNSmoothing(MixingMethod):
    """K-NN oracle, Bai et al. (local smoothing), Eq. 2: ``(g_i + alpha h_i ||grad g_i||_*) / (1 + alpha ||grad
    g_i||_*)`` on the ABC's logits, ``h_i = 2 * votes_i - 1`` over the K nearest train images."""

    name = "knn-smoothing"
    title = "K-NN smoothing"
    paper = "Bai et al. (local smoothing), Eq. 1-2, Sec. 3, 6.1"
    fit_cost = "training-free: writes the card from K and alpha (the train split is only fingerprinted)"
    certificate = ("its oracle is a K-NN vote and its weight alpha ||grad g_i(x)||_* depends on x; Bai et al. (local"
                   " smoothing), Thm 1's radius needs Lipschitz constants of grad g that mixzoo does not bound")
    not_exportable = "its K-NN oracle searches the train split at every prediction, so the artifact would need it"
    options = {
        "alpha": OptionSpec("the smoothing strength alpha (0: the ABC; large: the K-NN oracle)", float, low=0,
                            default_note="none: give alpha or target_clean"),
        "k": OptionSpec("K, the neighbours voting (at most the train images)", int, 5, low=1),
        "n_train": OptionSpec("use the first N train images", int, low=1, default_note="the whole train split"),
        "target_clean": OptionSpec("instead of alpha: the largest alpha whose clean accuracy on the calibration"
                                   " split is at least this (no attack)", float, low=0, high=1),
    }

    def validate(self, params: dict[str, Any], source: str) -> dict[str, Any]:
        sec = self.name
        number(params, "alpha", source, sec, low=0.0)
        choice(params, "norm", tuple(DUAL_ORDER), source, sec, "Linf")
        k = params.setdefault("k", 5)
        if isinstance(k, float) and k.is_integer():
            k = params["k"] = int(k)
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise InputError(f"{source}: field '{sec}.k' must be an integer K >= 1, got {k!r}")
        train = params.get("train")
        if not isinstance(train, dict) or not {"dataset", "n", "fingerprint"} <= set(train):
            raise InputError(f"{source}: field '{sec}.train' must be a table with dataset, n and fingerprint (the"
                             " train images of the oracle); write the card with `mixzoo mix --method knn-smoothing`")
        train.setdefault("split", "train")
        if isinstance(train["n"], bool) or not isinstance(train["n"], int) or train["n"] < 1:
            raise InputError(f"{source}: field '{sec}.train.n' must be a positive integer, got {train['n']!r}")
        if k > train["n"]:
            raise InputError(f"{source}: field '{sec}.k' = {k} exceeds the {train['n']} train images of the oracle;"
                             " choose a smaller K")
        _fit_fields(params, source, sec)
        return params

    def key_parts(self, card: MixCard) -> dict[str, Any]:
        q = card.params
        return {"method": self.name, "card": {"alpha": q["alpha"], "k": q["k"], "norm": q["norm"],
                                              "train": q["train"]["fingerprint"]}}

    def oracle(self, card: MixCard, device: Any = "cpu") -> Any:
        """The card's K-NN oracle over exactly the train images it fingerprinted (one-line error otherwise)."""
        from mixzoo.methods.local_smoothing.knn import KNNOracle

        train = card.params["train"]
        data = _train_split(train["dataset"], train["n"])
        if data.fingerprint != train["fingerprint"]:
            raise InputError(f"the {train['dataset']!r} train split here has fingerprint {data.fingerprint}, not the"
                             f" card's {train['fingerprint']}; refit with `mixzoo mix --method {self.name}`")
        return KNNOracle(data.images, data.labels, card.params["k"], data.num_classes).to(device)

    def build(self, abc: nn.Module | None, rbc: nn.Module | None, card: MixCard, *,
              gradient: str = "exact") -> nn.Module:
        from mixzoo.methods.local_smoothing.smoothing import KNNSmoothingClassifier
        from mixzoo.zoo.pairs import model_device

        return KNNSmoothingClassifier(abc, self.oracle(card, model_device(abc)), alpha=card.params["alpha"],
                                      norm=card.params["norm"], gradient=gradient, rbc=rbc)

    def extra_attacks(self, card: MixCard) -> list[ExtraAttack]:
        alpha = card.params["alpha"]
        own = f"alpha_t={alpha:g}" if math.isfinite(alpha) else "alpha_t=inf"
        return [
            _extra_apgd("alpha_t=0", "Bai et al. (local smoothing), Sec. 6.1: transfer from g (alpha_t = 0), judged on"
                                     " the smoothed classifier"),
            _extra_apgd("alpha_t=inf", "attack on h itself: the K-NN vote is piecewise constant, so a soft K-NN"
                                       " surrogate gives the gradient (alpha_t = inf)"),
            _extra_apgd(own, "the smoothed classifier with the soft K-NN surrogate in place of the vote (Bai et al."
                             " (local smoothing), Eq. 6)"),
            _extra_apgd("rbc", "transfer from the pair's robust network (a differentiable stand-in for the oracle)"),
            square_extra(EXTRA_SQUARE_QUERIES, why="gradient-free: the K-NN oracle has no gradient (Bai et al. (local"
                                                   " smoothing), Sec. 4.2)"),
        ]

    def fit(self, request: FitRequest) -> FitResult:
        from mixzoo.core.card import MixCard
        from mixzoo.methods.local_smoothing.knn import KNNOracle
        from mixzoo.methods.local_smoothing.smoothing import KNNSmoothingClassifier

        opts = dict(request.options)
        alpha, target = _alpha_option(opts, self.name)
        alpha = 0.0 if alpha is None else alpha
        n_train = opts.get("n_train")
        if n_train is not None and (isinstance(n_train, bool) or not isinstance(n_train, int) or n_train < 1):
            raise InputError(f"option n_train must be a positive integer, got {n_train!r}")
        probe = {"dataset": "check", "n": n_train or 10**9, "fingerprint": "check"}
        MixCard(self.name, {"alpha": alpha, "k": opts.get("k", 5), "train": probe}, dataset="check")
        pair, tables = _threat(request)
        data = _train_split(pair.dataset, n_train)
        train = {"dataset": pair.dataset, "split": "train", "n": len(data), "fingerprint": data.fingerprint,
                 "source": getattr(data, "source", "")}
        params = {"alpha": alpha, "k": opts.get("k", 5), "norm": tables["attack"]["norm"], "train": train,
                  "fit": "given"}
        MixCard(self.name, dict(params), **tables)  # K against the train count, before any work
        res = _fitted(self.name, params, pair, tables, request, target, lambda: KNNSmoothingClassifier(
            pair.abc, KNNOracle(data.images, data.labels, params["k"], data.num_classes).to(pair.device), alpha=0.0,
            norm=params["norm"]))
        res.summary = {"alpha": res.card.params["alpha"], "k": res.card.params["k"], "train_n": len(data)}
        return res


def _train_split(dataset: str, n: int | None) -> Any:
    """The first ``n`` train images of ``dataset`` (kept in memory: the bench builds a card several times)."""
    from mixzoo.zoo.data import load_dataset

    key = (dataset, -1 if n is None else int(n))
    if key not in _TRAIN_CACHE:
        _TRAIN_CACHE.clear()  # one train split at a time (Fashion-MNIST's is 170 MB)
        _TRAIN_CACHE[key] = load_dataset(dataset, "train", n=n)
    return _TRAIN_CACHE[key]


