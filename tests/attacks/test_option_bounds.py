"""``adaptive-strong``'s ``extra_seeds`` (each one more APGD-CE + APGD-T run of every gradient) has an upper bound:
a huge count is refused in one line naming the option and its range, as the other counts of the attacks are."""

from __future__ import annotations

import pytest

from mixzoo.core.errors import InputError
from mixzoo.core.plugins import lookup


def test_extra_seeds_takes_0_to_100_and_refuses_more_in_one_line() -> None:
    strong = lookup("attack", "adaptive-strong")
    assert strong.check_options({"extra_seeds": 0})["extra_seeds"] == 0
    assert strong.check_options({"extra_seeds": "100"})["extra_seeds"] == 100
    for bad in (101, 10 ** 15, -1):
        with pytest.raises(InputError) as err:
            strong.check_options({"extra_seeds": bad})
        assert str(err.value).startswith("option extra_seeds (-O extra_seeds) of attack 'adaptive-strong' must be"
                                         f" at least 0 and at most 100, got {bad!r}")
        assert "\n" not in str(err.value)
    with pytest.raises(InputError, match="at most 100"):
        strong(eps=0.1, extra_seeds=10 ** 9)
