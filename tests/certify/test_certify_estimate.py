"""``certify(estimate=...)``: the App. C.3 estimate's radii and PGD steps as one settings object; the former keywords
``estimate_eps`` / ``estimate_steps`` still work, with a DeprecationWarning, and give the same curves."""

from __future__ import annotations

import pytest

from mixzoo.certify import EstimateSettings, certify


def _estimated(result):
    return [(c.label, c.accuracy, c.radii) for c in result.estimated_curves]


def test_estimate_settings_and_the_former_keywords_give_the_same_curves():
    common = dict(rbc="digits-pgd", norm="linf", n=8, radii=[0.0, 0.05], progress=False)
    new = certify(estimate=EstimateSettings(eps=(0.05, 0.1), steps=3), **common)
    assert [c.radii for c in new.estimated_curves] == [[0.0, 0.05, 0.1]]
    with pytest.warns(DeprecationWarning, match="estimate=EstimateSettings"):
        old = certify(estimate_eps=[0.05, 0.1], estimate_steps=3, **common)
    assert _estimated(old) == _estimated(new)
    radii_only = certify(estimate=[0.1, 0.05], **common)  # a list of radii: those, at the default 20 steps
    with pytest.warns(DeprecationWarning):
        old_default = certify(estimate_eps=[0.05, 0.1], **common)
    assert _estimated(radii_only) == _estimated(old_default)
    assert EstimateSettings().steps == 20


def test_no_estimate_adds_no_estimated_curves():
    result = certify(rbc="digits-pgd", norm="linf", n=8, radii=[0.0, 0.05], estimate=None, progress=False)
    assert not result.estimated_curves and result.certified_curves
