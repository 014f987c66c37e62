"""The public attack functions take their options as plain keywords, as in mixzoo 0.1
(``mmaa(model, x, y, eps=8/255)``), or as one settings object; both give the same outcome per example."""

from __future__ import annotations

import pytest
import torch
from digits_models import train_digits_mlp

from mixzoo.attacks import MarginRecord, apgd_ce, apgd_run, mmaa
from mixzoo.attacks.apgd import ApgdSettings, apgd_t
from mixzoo.attacks.square import SquareSettings, min_margin_square
from mixzoo.core.errors import InputError

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def digits(one_thread):
    model, x, y = train_digits_mlp()
    return model, x[:40], y[:40]


def _same(a, b) -> None:
    torch.testing.assert_close(a.adv_images, b.adv_images, rtol=0, atol=0)
    torch.testing.assert_close(a.margins, b.margins, rtol=0, atol=0)
    assert a.settings == b.settings


def test_mmaa_takes_the_0_1_keyword_call(digits):
    model, x, y = digits
    old = mmaa(model, x, y, eps=0.1, norm="L2", n_iter=4, n_target_classes=2, n_restarts=1, seed=3, batch_size=20,
               progress=False)
    new = mmaa(model, x, y, ApgdSettings(eps=0.1, norm="L2", n_iter=4, n_target_classes=2, seed=3), batch_size=20,
               progress=False)
    _same(old, new)
    assert old.settings["norm"] == "L2" and old.settings["seed"] == 3 and old.settings["n_target_classes"] == 2
    _same(mmaa(model, x, y, eps=0.1, n_iter=4, progress=False), mmaa(model, x, y, settings=ApgdSettings(eps=0.1,
                                                                                                        n_iter=4),
                                                                        progress=False))


def test_apgd_functions_take_the_0_1_keyword_calls(digits):
    model, x, y = digits
    cfg = ApgdSettings(eps=0.1, n_iter=5, n_restarts=2, n_target_classes=2, seed=1, rho=0.5)
    for fn in (apgd_ce, apgd_t):
        a = fn(model, x, y, eps=0.1, n_iter=5, n_restarts=2, n_target_classes=2, seed=1, rho=0.5) if fn is apgd_t \
            else fn(model, x, y, eps=0.1, n_iter=5, n_restarts=2, seed=1, rho=0.5)
        b = fn(model, x, y, cfg)
        torch.testing.assert_close(a.x, b.x, rtol=0, atol=0)
        torch.testing.assert_close(a.margin, b.margin, rtol=0, atol=0)
    losses = []
    for settings, keywords in ((ApgdSettings(eps=0.2, norm="L2", n_iter=6, loss="dlr"), {}),
                               (None, dict(eps=0.2, norm="L2", n_iter=6, loss="dlr"))):
        record = MarginRecord.start(x, model(x), y)
        losses.append(apgd_run(model, x, y, record, settings, generator=torch.Generator().manual_seed(3), **keywords))
    torch.testing.assert_close(losses[0], losses[1], rtol=0, atol=0)


def test_min_margin_square_takes_the_0_1_keyword_call(digits):
    model, x, y = digits
    old = min_margin_square(model, x, y, eps=0.1, n_queries=30, p_init=0.5, seed=2, loss="logit", progress=False)
    new = min_margin_square(model, x, y, SquareSettings(eps=0.1, n_queries=30, p_init=0.5, seed=2, loss="logit"),
                            progress=False)
    _same(old, new)
    assert old.settings["loss"] == "logit" and old.settings["n_queries"] == 30


def test_options_are_given_one_way(digits):
    model, x, y = digits
    with pytest.raises(InputError, match="pass the radius eps"):
        mmaa(model, x, y, n_iter=4, progress=False)
    with pytest.raises(InputError, match="either as settings or as keywords, not both .*n_iter"):
        mmaa(model, x, y, ApgdSettings(eps=0.1), n_iter=4, progress=False)
    with pytest.raises(InputError, match="not both"):
        apgd_ce(model, x, y, ApgdSettings(eps=0.1), eps=0.1)
    with pytest.raises(InputError, match="not both .*n_queries"):
        min_margin_square(model, x, y, SquareSettings(eps=0.1), n_queries=3, progress=False)


def test_the_keyword_defaults_are_the_settings_defaults():
    import inspect

    for fn, kind in ((mmaa, ApgdSettings), (apgd_t, ApgdSettings), (apgd_run, ApgdSettings),
                     (min_margin_square, SquareSettings)):
        params = inspect.signature(fn).parameters
        shared = [f for f in kind.__dataclass_fields__ if f in params and f != "eps"]
        assert shared and all(params[f].default == getattr(kind, f) for f in shared)
        assert all(params[f].kind is inspect.Parameter.KEYWORD_ONLY for f in shared)
