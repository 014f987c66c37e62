"""The trained methods' integer options that size the training (``epochs``) and the mixing network (``width``) have
an upper bound: a huge value is refused in one line naming the option and its range, before any work, as every
other bounded option is; the bounds themselves are accepted."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from mixzoo.cli import app
from mixzoo.core.errors import InputError
from mixzoo.core.plugins import lookup

BOUNDS = {"epochs": (1, 10_000), "width": (1, 4096)}
METHODS = ("adaptive-smoothing", "local-smoothing-adaptive")


@pytest.mark.parametrize("name", METHODS)
@pytest.mark.parametrize("key", sorted(BOUNDS))
def test_the_bounds_are_accepted_and_a_value_past_them_is_refused(key: str, name: str) -> None:
    method = lookup("method", name)
    low, high = BOUNDS[key]
    assert method.check_options({key: low})[key] == low
    assert method.check_options({key: str(high)})[key] == high
    for bad in (high + 1, 10 ** 15, low - 1):
        with pytest.raises(InputError) as err:
            method.check_options({key: bad})
        assert str(err.value).startswith(f"option {key} (--{key}) of mixing method {name!r} must be at"
                                         f" least {low} and at most {high}, got {bad!r}")
        assert "\n" not in str(err.value)


@pytest.mark.parametrize("name", METHODS)
@pytest.mark.parametrize("key", sorted(BOUNDS))
def test_mix_refuses_a_huge_value_in_one_line_and_writes_nothing(key: str, name: str, tmp_path) -> None:
    out = tmp_path / "card.toml"
    res = CliRunner().invoke(app, ["mix", "--method", name, "--abc", "digits-std", "--rbc",
                                   "digits-pgd", "-O", f"{key}=1000000000000", "--out", str(out),
                                   "--cache-dir", str(tmp_path / "cache")])
    assert res.exit_code == 2, res.output
    assert f"at most {BOUNDS[key][1]}" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not out.exists()


@pytest.mark.parametrize("name", METHODS)
def test_show_options_prints_the_ranges(name: str) -> None:
    res = CliRunner().invoke(app, ["mix", "--method", name, "--show-options"])
    assert res.exit_code == 0, res.output
    for low, high in BOUNDS.values():
        assert f"[{low}, {high}]" in res.stdout
