"""The trade-off curve's points are labelled screening figures when a screening attack (``fast``) made them."""

from types import SimpleNamespace

import torch
from eval_requests import ask

from mixzoo.core.request import ReportRequest
from mixzoo.evaluation.job import CurveSettings
from mixzoo.methods.mixednuts.figures import markdown_lines, screening


def _report(attack: str) -> SimpleNamespace:
    card = object()
    curve = {"attack": attack, "screening": screening(attack), "n_robust": 10, "n_clean": 20,
             "mixednuts": [{"beta": 0.9, "alpha": 0.95, "clean_accuracy": 0.9, "robust_accuracy": 0.5}],
             "linear": [{"alpha": 0.9, "clean_accuracy": 0.9, "robust_accuracy": 0.5}]}
    return SimpleNamespace(curve=curve, card=card)


def test_the_default_curve_attack_is_a_screening_attack_and_says_so() -> None:
    assert CurveSettings().attack == "fast"
    report = _report(CurveSettings().attack)
    text = "\n".join(markdown_lines(report, report.card))
    assert "Screening figures" in text and "confirm with adaptive" in text


def test_a_reporting_attack_gets_no_screening_label() -> None:
    assert screening("adaptive-apgd") is None
    report = _report("adaptive-apgd")
    assert "Screening" not in "\n".join(markdown_lines(report, report.card))


def test_an_unknown_attack_name_is_not_called_screening() -> None:
    assert screening("no-such-attack") is None


def test_the_curves_recalibrations_do_not_warn(digits_card, tmp_path) -> None:
    """The curve recalibrates at seven other betas; Algorithm 1's tie warnings about them are not the card's and
    cannot be acted on (before: five warnings, each twice, on the digits quick start)."""
    import warnings

    from mixzoo.core.cache import Cache
    from mixzoo.core.card import MixCard
    from mixzoo.methods.mixednuts.figures import tradeoff_curve
    from mixzoo.zoo.data import load_dataset
    from mixzoo.zoo.models import load_model

    card = MixCard.load(digits_card)
    abc, rbc = load_model("digits-std"), load_model("digits-pgd")
    data = load_dataset("digits", "evaluation", n=4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        request = ReportRequest(ask(attack="apgd", eps=0.2, norm="Linf", seed=0, batch_size=4, progress=False,
                                    attack_options={"n_iter": 1, "n_target_classes": 1},
                                    cache=Cache(digits_card.parent / "cache")), n=4)
        curve = tradeoff_curve(card, abc, rbc, data, request, betas=(0.0, 0.9), alphas=(1.0,))
    assert [r["beta"] for r in curve["mixednuts"]] == sorted({0.0, 0.9, card.params["beta"]})  # with the card's
    assert not [w for w in caught if "Algorithm 1" in str(w.message)], [str(w.message) for w in caught]


def test_the_figures_calibration_work_scales_with_the_bench_unless_mix_cached_it(digits_card, tmp_path) -> None:
    """With the card's MMAA cached (mix ran here) the figures reuse all of it; with a cold cache they attack only as
    many calibration images as the bench evaluates, not the card's whole split whatever --n."""
    from mixzoo.core.cache import Cache
    from mixzoo.core.card import MixCard
    from mixzoo.methods.mixednuts.calibration_data import MIN_FIGURE_CALIBRATION
    from mixzoo.methods.mixednuts.figures import calibration_data_for
    from mixzoo.zoo.models import load_model

    card, rbc = MixCard.load(digits_card), load_model("digits-pgd")
    assert card.data["n"] == 120
    warm = calibration_data_for(card, rbc, ReportRequest(ask(cache=Cache(digits_card.parent / "cache"),
                                                             progress=False)), at_most=30)
    assert len(warm.labels) == 120 and warm.cache_hits["mmaa"]
    cold_cache = Cache(tmp_path / "cold")
    cold = calibration_data_for(card, rbc, ReportRequest(ask(cache=cold_cache, progress=False)), at_most=30)
    floor = MIN_FIGURE_CALIBRATION  # at least this many, whatever --n: Algorithm 1 needs some RBC mistakes
    assert floor < 120 and len(cold.labels) == floor and not cold.cache_hits["mmaa"]
    assert torch.equal(cold.labels, warm.labels[:floor])
    assert torch.allclose(cold.clean_logits, warm.clean_logits[:floor], atol=1e-6)
