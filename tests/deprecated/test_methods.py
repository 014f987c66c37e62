"""A third party's method whose ``match`` / ``tradeoff_curve`` take mixzoo 0.1's keyword arguments is called with
the request's keyword arguments, with a DeprecationWarning; a method that takes a request is left as it is."""

from __future__ import annotations

import pytest

from mixzoo.core.record import RunRecord
from mixzoo.core.request import EvalRequest, ReportRequest
from mixzoo.deprecated.methods import adapt_method, legacy_kwargs, takes_kwargs
from mixzoo.methods import MixingMethod


class OldCalls(MixingMethod):
    name = "old-calls"

    def match(self, abc, rbc, images, labels, target, **kw):
        return target, [kw]

    def tradeoff_curve(self, card, abc, rbc, data, **kw):
        return {"kw": kw}


def test_a_method_taking_keyword_arguments_gets_the_requests_ones():
    request = EvalRequest(RunRecord(attack="apgd", eps=0.1, norm="Linf", seed=3, batch_size=50), progress=False)
    method = adapt_method(OldCalls(), "p")
    with pytest.warns(DeprecationWarning, match=r"mixing method 'old-calls': match\(abc, rbc, images, labels, target,"
                                                r" \*\*kw\) is deprecated and will be removed in mixzoo 0\.3"):
        alpha, tried = method.match("abc", "rbc", "x", "y", 0.25, request)
    assert alpha == 0.25 and tried == [legacy_kwargs(request)] and tried[0]["seed"] == 3
    report = ReportRequest(request, n=40)
    with pytest.warns(DeprecationWarning, match=r"tradeoff_curve\(card, abc, rbc, data, \*\*kw\)"):
        assert method.tradeoff_curve("card", "abc", "rbc", "data", report) == {"kw": legacy_kwargs(report)}


def test_a_method_taking_a_request_is_left_as_it_is():
    current = MixingMethod()
    assert not takes_kwargs(current.match) and not takes_kwargs(current.tradeoff_curve)
    assert adapt_method(current, "p") is current and "match" not in vars(current)
    assert takes_kwargs(OldCalls().match)
