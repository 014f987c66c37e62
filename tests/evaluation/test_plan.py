"""The bench plan times each phase with the work that phase does: a card's row with its method's extra attacks, the
trade-off curve's points with the curve's attack alone (as :meth:`MixingMethod.tradeoff_curve` attacks them)."""

from __future__ import annotations

import mixzoo.evaluation.plan as plan_module
from mixzoo.evaluation.bench import CurveSettings
from mixzoo.evaluation.plan import plan_bench


def test_the_curve_is_timed_without_the_cards_extra_attacks(digits_card, monkeypatch):
    seen: list[tuple[str, bool]] = []
    real = plan_module.evaluate_card

    def spy(card, abc, rbc, images, labels, request, **kw):
        seen.append((request.record.attack, kw.get("extra_attacks")))
        return real(card, abc, rbc, images, labels, request, **kw)

    monkeypatch.setattr(plan_module, "evaluate_card", spy)
    plan = plan_bench(str(digits_card), n=8, attack="apgd", attack_options={"n_iter": 2}, baseline=None,
                      curve=CurveSettings(attack="apgd", options={"n_iter": 1}, n=8))
    assert ("apgd", True) in seen  # the card's row: its extra attacks (MixedNUTS: apgd-bypass) are timed with it
    curve_calls = [extras for attack, extras in seen if attack == "apgd" and extras is False]
    assert curve_calls, seen  # the curve's points: the curve's attack alone
    assert [p.name for p in plan.phases][-2:] == ["trade-off curve", "report"]
