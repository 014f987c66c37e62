"""``mixzoo certify``'s plan (:func:`mixzoo.certify.plan.plan_certify`): its phases follow what certify runs."""

from __future__ import annotations

import mixzoo.certify.lipschitz as lipschitz
from mixzoo.certify.plan import plan_certify


def test_the_plan_times_app_c3s_pgd_per_class_and_the_writing(monkeypatch):
    seen = []
    real = lipschitz.estimate_local_lipschitz

    def recorded(model, images, eps, norm="l2", steps=20, **kw):
        seen.append((len(images), steps))
        return real(model, images, eps, norm, steps, **kw)

    monkeypatch.setattr(lipschitz, "estimate_local_lipschitz", recorded)
    plan = plan_certify(rbc="digits-pgd", norm="linf", n=40, estimate_eps=[0.05, 0.1], estimate_steps=3)
    assert [p.name for p in plan.phases] == ["RBC", "estimated radii"]
    assert seen and {steps for _, steps in seen} == {3}  # the run's steps, on a few of the images
    assert max(k for k, _ in seen) <= 40 and all(p.seconds and p.seconds > 0 for p in plan.phases)
    assert "Lipschitz bound" in plan.phases[0].what and "per class" in plan.phases[1].what
    assert plan.phases[-1].what.endswith("then certify.json, certify.md and 2 figures")
    without = plan_certify(rbc="digits-pgd", norm="linf", n=40)
    assert without.phases[-1].what.endswith("and 1 figure")
