"""MixedNUTS as a mixing-method plugin (Bai et al. 2024a): hard-max ABC mixed with softmax(M(s, p, c)(RBC)), Eq. 5."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from mixzoo.core.errors import InputError
from mixzoo.core.options import OptionSpec
from mixzoo.methods.base import ExtraAttack, FitRequest, FitResult, MixingMethod, number
from mixzoo.methods.extra_attacks import card_values

if TYPE_CHECKING:
    from torch import nn

    from mixzoo.core.card import MixCard
    from mixzoo.core.request import ReportRequest

FITS = ("mmaa", "transfer", "square", "both", "guess", "published")
_V1_KEYS = ("s", "p", "c", "alpha", "beta", "clamp", "top_k", "temperature", "alpha_d", "objective", "grid")


def _grid_option(value: Any) -> Any:
    """Option ``grid``: a :class:`~.calibrate.Grid`, or its text form ``s=MIN:MAX:N,p=MIN:MAX:N,c=MIN:MAX:N``
    (any subset of the axes; a comma-separated command-line value arrives as a list of its parts)."""
    from mixzoo.methods.mixednuts.grid import Grid

    if isinstance(value, Grid):
        return value
    text = ",".join(value) if isinstance(value, list) else str(value)
    kw: dict[str, Any] = {}
    for part in text.split(","):
        key, _, rng = part.partition("=")
        key = key.strip()
        if key not in ("s", "p", "c"):
            raise ValueError(f"the axes are s, p and c, not {key!r}; e.g. s=0.05:10:8,p=1:4:8,c=-2:0:8")
        try:
            lo, hi, n = rng.split(":")
            kw.update({f"{key}_min": float(lo), f"{key}_max": float(hi), f"{key}_n": int(n)})
        except ValueError:
            raise ValueError(f"{part.strip()!r} is not of the form AXIS=MIN:MAX:N, e.g. s=0.05:10:8") from None
    return Grid(**kw)


class MixedNUTS(MixingMethod):
    """MixedNUTS (Bai et al., TMLR): training-free; s, p, c and alpha from Algorithm 1 over MMAA margins."""

    name = "mixednuts"
    title = "MixedNUTS"
    paper = "Bai et al. 2024a, Eq. 4-5, Algorithm 1"
    fit_cost = "training-free: MMAA on the calibration images (cached), then Algorithm 1 (seconds)"
    default = True
    certificate = ("MixedNUTS's nonlinear transform M(s, p, c) has no certified radius (Bai et al. 2024b, Thm 3.5"
                   " covers"
                   " constant-alpha mixtures of probabilities); certify a linear card instead")
    def v1_warning(self, data: dict[str, Any]) -> str | None:
        """A schema-1 card made by mixzoo was made before its layer norm matched the authors' (unless its provenance
        records the current one): its s, p, c and alpha were fitted for the old LN."""
        from mixzoo.attacks.margins import LAYER_NORM_VERSION

        prov = data.get("provenance") or {}
        if "mixzoo_version" not in prov or prov.get("layer_norm") == LAYER_NORM_VERSION:
            return None  # hand-written (no mixzoo provenance) or made with the current layer norm
        return ("made with an older layer norm (ln-1: population variance; now the authors' unbiased variance +"
                " 1e-8), so its s, p, c and alpha do not fit this mixzoo; run `mixzoo mix` again")

    options = {
        "beta": OptionSpec(
            "share of the RBC's attacked-correct margins to keep (Algorithm 1; 0.985 CIFAR, 0.99 ImageNet)",
            float, 0.985, low=0, high=1),
        "clamp": OptionSpec("clamp function of M(s, p, c) (gelu, relu, elu, softplus, linear, or a plugin's)", str,
                            "gelu"),
        "grid": OptionSpec(
            "search grid (mixzoo.methods.mixednuts.calibrate.Grid or s=MIN:MAX:N,p=...,c=...)",
            _grid_option, metavar="grid", default_note="Grid(): 8x8x8"),
        "objective": OptionSpec("Algorithm 1's objective (App. D.8.3)", str, "standard",
                                choices=("standard", "relaxed")),
        "optimizer": OptionSpec("calibration optimizer from the plugin hook (grid, refine, ...)", str, "grid"),
        "top_k": OptionSpec("layer-norm statistics over the top-k logits (App. D.7)", int, low=2,
                            default_note="all logits"),
        "search": OptionSpec(
            "authors: Algorithm 1 exactly as the authors' code (percentile threshold, no App. D.8.2"
            " filter; see mixzoo.methods.mixednuts.calibrate)",
            str, "mixzoo", choices=("mixzoo", "authors")),
        "refit_alpha": OptionSpec("second pass: alpha chosen again on MMAA points of h^M (App. D.9)", bool, False),
        "n_iter": OptionSpec("APGD iterations in MMAA", int, 100, low=1),
        "n_target_classes": OptionSpec("APGD-T target classes in MMAA", int, 9, low=0),
        "n_restarts": OptionSpec("restarts in MMAA", int, 1, low=1),
    }

    def validate(self, params: dict[str, Any], source: str) -> dict[str, Any]:
        sec = self.name
        for key in ("s", "p"):
            number(params, key, source, sec, positive=True)
        number(params, "c", source, sec)
        number(params, "alpha", source, sec, low=0.5, high=1.0)
        number(params, "beta", source, sec, low=0.0, high=1.0, default=None, allow_none=True)
        number(params, "alpha_d", source, sec, low=0.0, high=1.0, default=None, allow_none=True)
        number(params, "objective", source, sec, default=None, allow_none=True)
        number(params, "temperature", source, sec, low=0.0, default=0.0)
        params.setdefault("clamp", "gelu")
        if not isinstance(params["clamp"], str) or not params["clamp"]:
            raise InputError(f"{source}: field '{sec}.clamp' must be a clamp name such as 'gelu',"
                             f" got {params['clamp']!r}")
        top_k = params.setdefault("top_k", None)
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 2):
            raise InputError(f"{source}: field '{sec}.top_k' must be an integer >= 2 or absent, got {top_k!r}")
        fit = params.setdefault("fit", "mmaa")
        if fit not in FITS:
            raise InputError(f"{source}: field '{sec}.fit' must be one of {', '.join(FITS)}, got {fit!r}")
        if fit == "mmaa" and params["beta"] is None:
            raise InputError(f"{source}: missing field '{sec}.beta' (required for fit 'mmaa')")
        grid = params.setdefault("grid", {})
        if not isinstance(grid, dict):
            raise InputError(f"{source}: field '{sec}.grid' must be a table, got {type(grid).__name__}")
        from mixzoo.core.card import plain_values
        from mixzoo.methods.mixednuts.records import validate_grid

        validate_grid(plain_values(grid), source, section=f"{sec}.grid")
        return params

    def check_card(self, card: MixCard, source: str) -> None:
        """The MMAA record of the fit (``[attack]``, ``data.n``: :func:`.records.check_mmaa_record`)."""
        from mixzoo.methods.mixednuts.records import check_mmaa_record

        check_mmaa_record(card, source)

    def upgrade_v1(self, data: dict[str, Any], source: str) -> dict[str, Any] | None:
        if data.get("method", "mmaa") == "linear":
            return None
        required = ("s", "p", "c", "alpha") + (("clamp",) if "schema_version" in data else ())  # files: all five
        for key in required:
            if key not in data:
                raise InputError(f"{source}: missing field {key!r}; write the card with `mixzoo mix` or add it")
        params = {k: data[k] for k in _V1_KEYS if k in data}
        params["fit"] = data.get("method", "mmaa")
        return params

    def summary_line(self, card: MixCard) -> str:
        q = card.params
        return (f"MixedNUTS: s={q['s']:.4g} p={q['p']:.4g} c={q['c']:.4g} alpha={q['alpha']:.4g} clamp={q['clamp']}"
                f" beta={q['beta']} fit={q['fit']}")

    def key_parts(self, card: MixCard) -> dict[str, Any]:
        # the fields the classifier's output depends on (not its provenance or search record): shared cache rows
        return {"card": card_values(card, ("s", "p", "c", "alpha", "clamp", "top_k", "temperature", "alpha_d"))}

    def gradients(self, card: MixCard) -> tuple[str, ...]:
        """``exact`` (the formula's gradient; the hard-max ABC contributes none) and ``bypass`` (App. B.2.2: the
        values of Eq. 5, the gradient of the auxiliary mixture of Eq. 8)."""
        return ("exact", "bypass")

    def build(self, abc: nn.Module | None, rbc: nn.Module | None, card: MixCard, *,
              gradient: str = "exact") -> nn.Module:
        from mixzoo.methods.mixednuts.mixing import MixedClassifier, MixingParams

        q = card.params
        return MixedClassifier(abc, rbc, MixingParams(s=q["s"], p=q["p"], c=q["c"], alpha=q["alpha"],
                                                      clamp=q["clamp"], temperature=q["temperature"],
                                                      top_k=q["top_k"], alpha_d=q["alpha_d"]), gradient=gradient)

    @property
    def curve_points(self) -> int:  # type: ignore[override]
        from mixzoo.methods.mixednuts.figures import DEFAULT_BETAS, DEFAULT_LINEAR_ALPHAS

        return len(DEFAULT_BETAS) + len(DEFAULT_LINEAR_ALPHAS)

    def curve_size(self, card: MixCard, points: int | None) -> int:
        """How many classifiers :meth:`tradeoff_curve` attacks with at most ``points`` betas and alphas (``None``:
        all): the betas kept plus the card's own, the alphas kept (alpha 1 among them: the RBC alone), the ABC."""
        from mixzoo.core.budget import curve_points
        from mixzoo.methods.mixednuts.figures import DEFAULT_BETAS, DEFAULT_LINEAR_ALPHAS

        own = card.params.get("beta")
        betas = {*curve_points(DEFAULT_BETAS, points), *((float(own),) if isinstance(own, int | float) else ())}
        return len(betas) + len(curve_points(DEFAULT_LINEAR_ALPHAS, points)) + 1

    def report_data_seconds(self, card: MixCard, abc: nn.Module, rbc: nn.Module, data: Any, request: ReportRequest
                            ) -> float:
        """The calibration data of the curve and Fig. 6 where the cache does not hold them
        (:func:`.figures.calibration_data_for`: MMAA, App. B.1, on the calibration images the curve recalibrates each
        beta on): MMAA timed on a few of them (:func:`_mmaa_seconds`); ``0.0`` when cached (Algorithm 1 per beta is
        milliseconds next to a point's attack)."""
        from mixzoo.methods.mixednuts.calibration_data import MIN_FIGURE_CALIBRATION, cached_mmaa, mmaa_of_card
        from mixzoo.zoo.data import load_dataset
        from mixzoo.zoo.pairs import card_dataset

        cal = load_dataset(card_dataset(card, rbc), "calibration", n=card.data.get("n"), root=request.data_dir)
        mmaa, ev = mmaa_of_card(card), request.evaluation
        subset = cal.subset(min(len(cal.labels), max(len(data.labels), MIN_FIGURE_CALIBRATION)))  # as the curve's
        if any(cached_mmaa(rbc, d, mmaa, cache=ev.cache, device=request.device, progress=False, only_cached=True)
               is not None for d in (cal, subset)):
            return 0.0
        return _mmaa_seconds(rbc, subset, mmaa, request.device)

    def plan_fit(self, request: FitRequest) -> list[tuple[str, str, float | None]]:
        """The calibration data (the RBC's clean logits and MMAA on the calibration images, :func:`_mmaa_seconds`),
        then Algorithm 1's search (not timed: seconds next to the attack)."""
        from dataclasses import replace

        from mixzoo.methods.mixednuts.calibration_data import MMAASettings
        from mixzoo.methods.mixednuts.fitting import MixSettings
        from mixzoo.zoo.pairs import prepare_pair

        opts = dict(request.options)
        MixSettings.from_options(opts).check()  # as mix() does, first
        pair = prepare_pair(replace(request, progress=False, use_cache=False), top_k=opts.get("top_k"))
        n = len(pair.data.labels)
        mmaa = {k: opts[k] for k in ("n_iter", "n_target_classes", "n_restarts") if k in opts}
        sec = _mmaa_seconds(pair.rbc, pair.data, MMAASettings(pair.eps, pair.norm, seed=pair.seed,
                            top_k=opts.get("top_k"), batch_size=pair.batch_size, **mmaa), pair.device)
        steps = f"{mmaa.get('n_iter', 100)} steps, {mmaa.get('n_target_classes', 9)} target classes"
        return [("calibration data", f"RBC clean logits and MMAA ({steps}) on {n} {pair.dataset} calibration images"
                                     " (cached: a second mix of this pair skips it)", sec),
                ("Algorithm 1", f"grid search for s, p, c and alpha at beta {opts.get('beta', 0.985)}", None)]

    def extra_attacks(self, card: MixCard) -> list[ExtraAttack]:
        return [ExtraAttack("apgd-bypass", "apgd", gradient="bypass",
                            why="App. B.2.2: APGD on MixedNUTS's values with the auxiliary mixture's gradient")]

    def fit(self, request: FitRequest) -> FitResult:
        from mixzoo.methods.mixednuts.fitting import mix

        res = mix(request)
        return FitResult(res.card, res.path, res.summary, res.seconds, res.cache_hits)

    def fit_summary(self, result: FitResult) -> list[tuple[str, str]]:
        """The card's parameters, then Fig. 6's summary: calibration images, clean mistakes, attacked-correct
        examples and the median margins before and after M(s, p, c)."""
        rows = super().fit_summary(dataclasses.replace(result, summary={}))[:-1]  # the summary: the rows below
        sm = result.summary
        if "n_attacked_correct" in sm:
            rows.append(("calibration images / clean mistakes / attacked correct",
                         f"{sm['n']} / {sm['n_clean_incorrect']} / {sm['n_attacked_correct']}"))
            for stage in ("layer_norm", "transformed"):
                label = "before (LN)" if stage == "layer_norm" else "after M(s,p,c)"
                rows.append((f"median margin {label}: clean incorrect / attacked correct",
                             f"{_margin(sm[stage]['clean_incorrect_median_margin'])} / "
                             f"{_margin(sm[stage]['attacked_correct_median_margin'])}"))
        cached = " (MMAA cached)" if result.cache_hits.get("mmaa") else ""
        rows.append((f"seconds{cached}", f"{result.seconds.get('total', 0.0):.1f}"))
        return rows

    # ---------------------------------------------------------------------------- the bench's extras (Fig. 6, 8, 9)
    def tradeoff_curve(self, card: MixCard, abc: nn.Module, rbc: nn.Module, data: Any, request: ReportRequest
                       ) -> dict[str, Any]:
        """Fig. 8: MixedNUTS over beta against the linear mixture over alpha (:mod:`.figures`)."""
        from mixzoo.methods.mixednuts.figures import tradeoff_curve

        return tradeoff_curve(card, abc, rbc, data, request)

    def figure_data(self, card: MixCard, abc: nn.Module, rbc: nn.Module, data: Any, request: ReportRequest
                    ) -> dict[str, Any] | None:
        """Fig. 6's margin histograms on the card's calibration data (:func:`.figures.figure_data`)."""
        from mixzoo.methods.mixednuts.figures import figure_data

        return figure_data(card, rbc, data, request)

    def figures(self, report: Any, card: MixCard, stage: Any, *, prefix: str = "",
                data: dict[str, Any] | None = None) -> list[str]:
        from mixzoo.methods.mixednuts.figures import figures

        return figures(report, card, stage, prefix=prefix, data=data)

    def markdown_lines(self, report: Any, card: MixCard) -> list[str]:
        from mixzoo.methods.mixednuts.figures import markdown_lines

        return markdown_lines(report, card)


def _mmaa_seconds(rbc: nn.Module, data: Any, mmaa: Any, device: str) -> float:
    """Seconds of MMAA (``mmaa``: its :class:`~.calibration_data.MMAASettings`) on all of ``data`` in its batches:
    timed with the cache off on :func:`~mixzoo.core.plan.probe_images` images spread over ``data``, cut to
    :data:`~mixzoo.core.plan.FRACTIONS` of its iterations, each call counting the images it leaves robust (they cost
    every iteration; a call's fixed share is counted once per batch, :func:`~mixzoo.core.plan.per_image_cut`)."""
    import math
    from dataclasses import replace

    from mixzoo.core.cache import Cache
    from mixzoo.core.plan import cut_fractions, per_image_cut, probe_images, spread
    from mixzoo.methods.mixednuts.calibration_data import cached_mmaa

    n = len(data.labels)

    def iters(f: float) -> int:
        return max(1, math.ceil(round(mmaa.n_iter * f, 9)))

    def run(k: int, f: float) -> int:
        at = spread(n, k)
        part = replace(data, images=data.images[at], labels=data.labels[at], indices=data.indices[at])
        out = cached_mmaa(rbc, part, replace(mmaa, n_iter=iters(f)), cache=Cache(None, enabled=False),
                          device=device, progress=False)
        return int((out["logits"].argmax(1) == part.labels).sum())

    return per_image_cut(run, n, cut_fractions(mmaa.n_iter, iters), probe_images(n), batch=mmaa.batch_size) * n


def _margin(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.4f}"
