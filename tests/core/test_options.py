"""mixzoo.core.options: the one option spec (fills defaults, checks types and ranges) and the one KEY=VALUE parser,
used by methods, ``mixzoo mix``/``bench`` -O and ``mixzoo share --set``."""

from __future__ import annotations

import string
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mixzoo.core.errors import InputError
from mixzoo.core.options import OptionSpec, fill_options, parse_pairs, parse_value

SPECS = {"n_iter": OptionSpec("APGD iterations", int, 100, low=1),
         "rate": OptionSpec("a rate", float, 0.5, low=0, high=1),
         "kind": OptionSpec("which kind", str, "a", choices=("a", "b")),
         "given": OptionSpec("no default", int)}


def test_fill_options_fills_defaults_and_converts() -> None:
    assert fill_options(SPECS, {}, "attack 'x'") == {"n_iter": 100, "rate": 0.5, "kind": "a"}
    assert fill_options(SPECS, {"n_iter": "7", "given": 3}, "attack 'x'")["n_iter"] == 7


@pytest.mark.parametrize(("raw", "words"), [
    ({"n_iter": 0}, ["n_iter", "must be at least 1", "got 0"]),
    ({"rate": 2}, ["rate", "must be in [0, 1]"]),
    ({"kind": "c"}, ["kind", "one of a | b"]),
    ({"n_iter": 2 ** 63}, ["n_iter", "64-bit"]),
    ({"n_iter": "many"}, ["n_iter", "an integer"]),
    ({"nope": 1}, ["takes no option 'nope'", "given, kind, n_iter, rate"]),
    ({"n_iters": 1}, ["takes no option 'n_iters'; did you mean n_iter?"]),
])
def test_fill_options_refuses_in_one_line(raw: dict, words: list[str]) -> None:
    with pytest.raises(InputError) as exc:
        fill_options(SPECS, raw, "attack 'x'")
    assert "\n" not in str(exc.value)
    for word in words:
        assert word in str(exc.value)


def test_show_options_text() -> None:
    assert (SPECS["rate"].range_text, SPECS["n_iter"].range_text, SPECS["kind"].range_text) == (
        "[0, 1]", ">= 1", "a | b")
    assert SPECS["n_iter"].default_text == "100" and SPECS["given"].default_text == ""


def test_parser_rules() -> None:
    assert parse_pairs(["components=a, b", "n-iter=200", 'name="a, b"', "empty=", "flag=true"]) == {
        "components": ["a", "b"], "n_iter": 200, "name": "a, b", "empty": "", "flag": True}
    assert parse_value(" a ,, b ") == ["a", "b"]
    for bad in (["x"], ["=1"], ["a b=1"], ["k=1", "k=2"]):
        with pytest.raises(InputError):
            parse_pairs(bad)


_keys = st.text(string.ascii_lowercase + "_", min_size=1, max_size=8).filter(str.isidentifier)
_items = st.text(string.ascii_letters + string.digits + " ", min_size=0, max_size=6)


@given(st.dictionaries(_keys, st.lists(_items, min_size=2, max_size=4), min_size=1, max_size=4))
def test_parser_comma_lists_round_trip(values: dict[str, list[str]]) -> None:
    """Text with a comma (not JSON) is the list of its stripped, non-empty items, whatever the spacing."""
    got = parse_pairs([f"{k}={', '.join(v)}" for k, v in values.items()])
    for key, items in values.items():
        want = [i.strip() for i in items if i.strip()]
        text = ", ".join(items)
        if text.strip().lstrip("-").replace(".", "", 1).isdigit():
            continue
        assert got[key] == want


@given(st.integers(min_value=-(2 ** 63), max_value=2 ** 63 - 1))
def test_parser_integers(n: int) -> None:
    assert parse_pairs([f"n={n}"]) == {"n": n}


def test_cli_and_share_and_methods_use_the_one_parser() -> None:
    from mixzoo.cli.options import parse_attack_options
    from mixzoo.cli.share import _fields
    from mixzoo.methods import get_method

    assert parse_attack_options(["components=apgd-ce, apgd-t"]) == {"components": ["apgd-ce", "apgd-t"]}
    with pytest.raises(InputError, match="given twice"):
        parse_attack_options(["n_iter=1", "n_iter=2"])
    with pytest.raises(InputError, match="given twice"):
        _fields(["venue=a", "venue=b"])
    assert _fields(["venue=ICML 2024", "year=2024"]) == {"venue": "ICML 2024", "year": "2024"}
    assert get_method("linear").options_from_args(["--x", "a, b"]) == {"x": ["a", "b"]}


def test_method_option_is_kept_and_is_an_option_spec_with_a_deprecation_warning() -> None:
    from mixzoo.methods import MethodOption

    with pytest.warns(DeprecationWarning, match=r"^mixzoo.methods.MethodOption is deprecated .* default_note"):
        opt = MethodOption("iterations (default 5)", int)
    assert isinstance(opt, OptionSpec) and opt.default_text == "5"
    with pytest.raises(InputError, match="of mixing method 'm' must be an integer"):
        opt.convert("k", "x", "m")


# what each method's fit used when the option was absent, before the spec filled it (read from the old fit code)
_OLD_FIT_DEFAULTS = {
    "adaptive-smoothing": {"n_val": 200, "eval_n_iter": 100, "eval_n_queries": 5000, "eval_n_target_classes": 9,
                           "checkpoint_every": 50, "alpha_max": 1.0, "robust_drop": 1.5, "resume": True},
    "local-smoothing-adaptive": {"n_crossover": 200, "crossover_steps": 10, "checkpoint_every": 50, "n_val": 200,
                                 "eval_n_iter": 100, "eval_n_queries": 5000, "eval_n_target_classes": 3,
                                 "resume": True},
}


@pytest.mark.parametrize("name", sorted(_OLD_FIT_DEFAULTS))
def test_filled_method_defaults_equal_the_old_fit_defaults(name: str) -> None:
    from mixzoo.methods import get_method

    filled = get_method(name).check_options({})
    assert filled == _OLD_FIT_DEFAULTS[name]
    assert all(type(filled[k]) is type(v) for k, v in _OLD_FIT_DEFAULTS[name].items())


@pytest.mark.parametrize(("name", "raw", "words"), [
    ("adaptive-smoothing", {"n_val": -1}, ["n_val", "at least 0"]),
    ("adaptive-smoothing", {"robust_drop": 101}, ["robust_drop", "in [0, 100]"]),
    ("local-smoothing-adaptive", {"n_crossover": 0}, ["n_crossover", "at least 1"]),
    ("local-smoothing-adaptive", {"eval_n_iter": 2 ** 64}, ["eval_n_iter", "64-bit"]),
])
def test_method_ranges_refused_before_any_work(name: str, raw: dict, words: list[str]) -> None:
    from mixzoo.methods import get_method

    with pytest.raises(InputError) as exc:
        get_method(name).check_options(raw)
    for word in words:
        assert word in str(exc.value)


def test_show_options_renders_type_default_and_range_from_the_spec() -> None:
    from typer.testing import CliRunner

    from mixzoo.cli import app

    result = CliRunner().invoke(app, ["mix", "--method", "adaptive-smoothing", "--show-options"],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:5]]
            for line in result.output.splitlines() if line.startswith("│ --")}
    assert rows["--n-val"] == ["int", "200", ">= 0"]
    assert rows["--robust-drop"] == ["float", "1.5", "[0, 100]"]
    assert rows["--eval-n-queries"] == ["int", "5000", ">= 1"]


def test_no_built_in_method_declares_the_deprecated_method_option() -> None:
    """Importing every built-in method (in a fresh process, so that no module is already imported) gives no
    DeprecationWarning of mixzoo's, and no method declares a MethodOption."""
    import subprocess
    import sys

    code = ("import warnings; warnings.filterwarnings('error', message='mixzoo', category=DeprecationWarning);"
            " from mixzoo.core.plugins import table; from mixzoo.methods import MethodOption;"
            " bad = [n for n, m in table('method').items()"
            " if any(isinstance(s, MethodOption) for s in m.option_specs().values())]; print(bad)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stderr[-2000:]


def test_a_default_that_is_no_one_value_is_shown_and_not_filled() -> None:
    from mixzoo.methods import get_method

    linear = get_method("linear")
    spec = linear.option_specs()["beta"]
    assert spec.default is None and spec.default_text.startswith("0.985 when neither")
    filled = linear.check_options({"alpha": 0.9})
    assert filled == {"alpha": 0.9, "temperature": 1.0, "attack": "adaptive-apgd"}  # no beta next to alpha
    assert get_method("knn-smoothing").check_options({})["k"] == 5


# ------------------------------------------------------------------------------------------- numbers at the edge
@pytest.mark.parametrize("name", ["n_iter", "n_restarts", "n_target_classes", "n_queries", "batch_size"])
@pytest.mark.parametrize("value", [1e11, 10 ** 12, 2 ** 63 - 1, 2 ** 70])
def test_the_shared_attack_counts_have_an_upper_bound(name, value) -> None:
    """An iteration count whose per-iteration records no machine can hold (``n_iter=1e11``: 3.7e18 bytes) is one
    line naming the option and its range, before any work."""
    from mixzoo.core.plugins import lookup

    attack = lookup("attack", "autoattack")
    specs = attack.options_spec if name in attack.options_spec else lookup("attack", "square").options_spec
    refused = rf"{name}.* must be (at least \d+ and at most \d+|an integer \(64-bit\))"
    with pytest.raises(InputError, match=refused) as err:
        fill_options(specs, {name: value}, "attack 'autoattack'")
    assert "\n" not in str(err.value) and specs[name].high is not None


def test_cli_refuses_an_iteration_count_no_memory_holds(tmp_path) -> None:
    from typer.testing import CliRunner

    from mixzoo.cli import app

    card = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "cards" / "digits_mixednuts.toml"
    res = CliRunner().invoke(app, ["bench", str(card), "--n", "20", "--attack", "apgd", "-O", "n_iter=1e11",
                                   "--dry-run", "--cache-dir", str(tmp_path / "cache")])
    lines = [line for line in res.stderr.splitlines() if line.startswith("error")]
    assert res.exit_code == 2 and len(lines) == 1 and "n_iter" in lines[0] and "100000" in lines[0], res.output


@pytest.mark.parametrize(("env", "named"), [
    ({"WORLD_SIZE": "abc"}, "WORLD_SIZE"), ({"WORLD_SIZE": "0"}, "WORLD_SIZE"), ({"WORLD_SIZE": "-3"}, "WORLD_SIZE"),
    ({"WORLD_SIZE": str(2 ** 63 - 1)}, "WORLD_SIZE"), ({"WORLD_SIZE": str(2 ** 70)}, "WORLD_SIZE"),
    ({"WORLD_SIZE": "1.5"}, "WORLD_SIZE"), ({"WORLD_SIZE": "²"}, "WORLD_SIZE"),
    ({"WORLD_SIZE": "2", "RANK": "2"}, "RANK"), ({"WORLD_SIZE": "2", "RANK": "x"}, "RANK"),
    ({"WORLD_SIZE": "2", "LOCAL_RANK": "-1"}, "LOCAL_RANK"), ({"WORLD_SIZE": "4", "LOCAL_RANK": str(2 ** 70)},
                                                               "LOCAL_RANK"),
])
def test_launcher_variables_out_of_range_are_one_line(monkeypatch, env, named) -> None:
    from mixzoo.core.options import world_size_env

    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(InputError, match=rf"^{named}=.* is not a whole number in \[") as err:
        world_size_env()
    assert "\n" not in str(err.value)


def test_launcher_variables_read_as_torchrun_sets_them(monkeypatch) -> None:
    from mixzoo.core.options import world_size_env

    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(key, raising=False)
    assert world_size_env() == (1, 0)
    monkeypatch.setenv("RANK", "7")  # one process ignores the ranks (a scheduler may set them for other tools)
    monkeypatch.setenv("WORLD_SIZE", " ")
    assert world_size_env() == (1, 0)
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert world_size_env() == (8, 3)


def test_a_command_under_a_bad_world_size_is_one_line_before_any_work(monkeypatch) -> None:
    from typer.testing import CliRunner

    from mixzoo.cli import app

    monkeypatch.setenv("WORLD_SIZE", "abc")
    res = CliRunner().invoke(app, ["list"])
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: WORLD_SIZE='abc'"), res.output
    assert res.stdout == ""
