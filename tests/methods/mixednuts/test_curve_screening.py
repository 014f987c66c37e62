"""The trade-off curve's points are labelled screening figures when a screening attack (``fast``) made them."""

from types import SimpleNamespace

from mixzoo.evaluation.bench import CURVE
from mixzoo.methods.mixednuts.figures import markdown_lines, screening


def _report(attack: str) -> SimpleNamespace:
    card = object()
    curve = {"attack": attack, "screening": screening(attack), "n_robust": 10, "n_clean": 20,
             "mixednuts": [{"beta": 0.9, "alpha": 0.95, "clean_accuracy": 0.9, "robust_accuracy": 0.5}],
             "linear": [{"alpha": 0.9, "clean_accuracy": 0.9, "robust_accuracy": 0.5}]}
    return SimpleNamespace(curve=curve, card=card)


def test_the_default_curve_attack_is_a_screening_attack_and_says_so() -> None:
    assert CURVE.attack == "fast"
    report = _report(CURVE.attack)
    text = "\n".join(markdown_lines(report, report.card))
    assert "Screening figures" in text and "confirm with adaptive" in text


def test_a_reporting_attack_gets_no_screening_label() -> None:
    assert screening("adaptive-apgd") is None
    report = _report("adaptive-apgd")
    assert "Screening" not in "\n".join(markdown_lines(report, report.card))


def test_an_unknown_attack_name_is_not_called_screening() -> None:
    assert screening("no-such-attack") is None
