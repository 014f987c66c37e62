"""The command line (mixzoo/cli/): option parsing, one-line errors, and every command handing its options on.

The CLI is a thin layer over library functions, so most command tests replace the library function by a spy that
records what it was called with: a command must hand every option it is given to the library, and with no option
it must hand over the library's own defaults (the help texts promise the same defaults as the Python API). Nothing
here runs an attack.
"""

from __future__ import annotations

import dataclasses
import errno
import inspect
import json
import shlex
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from card_fields import nuts_card
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from mixzoo.cli import app
from mixzoo.cli.options import parse_attack_options, parse_floats
from mixzoo.methods import FitRequest
from mixzoo.methods.mixednuts.calibrate import Grid


def _parse_grid(text):
    """The ``grid`` option of MixedNUTS as ``mixzoo mix --grid TEXT`` reads it (None or empty: no grid)."""
    from mixzoo.methods.mixednuts.method import MixedNUTS

    return MixedNUTS().check_options({"grid": text})["grid"] if text else None



def one_line_error(result) -> str:
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


# --------------------------------------------------------------------------------------------- spies for the CLI


class Spy:
    """Stands in for a library function: records its keyword arguments and returns a canned result. A FitRequest
    (its models are recorded as the arguments, its options as keywords) and transfer's settings objects are recorded
    as the keywords of their fields."""

    def __init__(self, result):
        self.result, self.calls = result, []

    def __call__(self, *args, **kwargs):
        from mixzoo.methods.mixednuts.transfer import BlackBoxSource, TransferSettings

        flat, kept = dict(kwargs), []
        for arg in args:
            if not isinstance(arg, FitRequest | TransferSettings | BlackBoxSource):
                kept.append(arg)
                continue
            flat.update({f.name: getattr(arg, f.name) for f in dataclasses.fields(arg) if f.name != "options"})
            flat.update(getattr(arg, "options", {}))
            if isinstance(arg, FitRequest):
                kept += [flat.pop("abc"), flat.pop("rbc")]
        self.calls.append((tuple(kept), flat))
        return self.result

    @property
    def kwargs(self) -> dict:
        assert len(self.calls) == 1, self.calls
        return self.calls[0][1]


def _spy(monkeypatch, target: str, result) -> Spy:
    spy = Spy(result)
    monkeypatch.setattr(target, spy)
    return spy


def _library_defaults(fn) -> dict:
    if isinstance(fn, tuple):  # the settings objects a library function takes: their fields' defaults
        return {f.name: f.default for cls in fn for f in dataclasses.fields(cls)
                if f.default is not dataclasses.MISSING}
    return {k: p.default for k, p in inspect.signature(fn).parameters.items()
            if p.default is not inspect.Parameter.empty}


def _card(**values):
    """A real MixedNUTS card (the schema-1 keyword form: ``method`` is how it was fitted)."""

    base = dict(s=1.5, p=2.5, c=-0.5, alpha=0.75, beta=0.985, objective=0.125, notes=[], method="transfer",
                abc={"name": "a"}, rbc={"name": "r"}, dataset="digits", clamp="gelu")
    return nuts_card(**{**base, **values})


def _mix_result(**card_values):
    stage = {"clean_incorrect_median_margin": 0.5, "attacked_correct_median_margin": None}
    summary = {"n": 3, "n_clean_incorrect": 1, "n_attacked_correct": 2, "layer_norm": stage, "transformed": stage}
    return SimpleNamespace(card=_card(**card_values), path=Path("card.toml"), summary=summary, seconds={"total": 1.0},
                           cache_hits={"mmaa": False})


def _dict_result(passed: bool = True, **extra):
    return SimpleNamespace(to_dict=lambda: {"passed": passed}, passed=passed, notes=[], **extra)


# --------------------------------------------------------------------------------------------- parse_attack_options


@pytest.mark.parametrize(("items", "expected"), [
    (["components= apgd-ce , apgd-t "], {"components": ["apgd-ce", "apgd-t"]}),
    (["components=apgd-ce, apgd-t"], {"components": ["apgd-ce", "apgd-t"]}),
    (["loss= ce "], {"loss": "ce"}),
    ([" n-restarts =2"], {"n_restarts": 2}),
])
def test_attack_option_text_values_and_list_items_are_stripped(items, expected):
    assert parse_attack_options(items) == expected


def test_no_attack_options_is_none_so_the_attacks_defaults_apply():
    assert parse_attack_options(None) is None and parse_attack_options([]) is None


# --------------------------------------------------------------------------------------------- errors -> one line


def test_a_file_system_refusal_is_one_line_naming_the_file(monkeypatch):
    def full_disk(name):
        raise OSError(errno.ENOSPC, "No space left on device", "/data/cards/x.toml")

    monkeypatch.setattr("mixzoo.core.registry.get_spec", full_disk)
    line = one_line_error(CliRunner().invoke(app, ["info", "digits-pgd"]))
    assert line == "error: No space left on device: /data/cards/x.toml"


def test_an_os_error_without_a_file_name_has_no_dangling_colon(monkeypatch):
    def refused(name):
        raise OSError(errno.EACCES, "Permission denied")

    monkeypatch.setattr("mixzoo.core.registry.get_spec", refused)
    assert one_line_error(CliRunner().invoke(app, ["info", "digits-pgd"])) == "error: Permission denied"


def test_unknown_model_exits_2_with_the_suggestion():
    line = one_line_error(CliRunner().invoke(app, ["info", "digits-pgdd"]))
    assert "unknown model 'digits-pgdd'" in line and "did you mean 'digits-pgd'" in line


# --------------------------------------------------------------------------------------------- --grid and --eps


def test_grid_option_sets_min_max_and_count_per_axis_and_leaves_the_rest_default():
    assert _parse_grid("s=0.1:2:3, p=1:2:4 ,c=-1:0:5") == Grid(s_min=0.1, s_max=2.0, s_n=3, p_min=1.0, p_max=2.0,
                                                               p_n=4, c_min=-1.0, c_max=0.0, c_n=5)
    assert _parse_grid("p=1:3:2") == Grid(p_min=1.0, p_max=3.0, p_n=2)
    assert _parse_grid(None) is None and _parse_grid("") is None
    grid = _parse_grid("s=0.5:0.5:1,p=2:2:1,c=0:0:1")
    assert grid.s_values().tolist() == [0.5] and grid.p_values().tolist() == [2.0] and grid.c_values().tolist() == [0]


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from("spc"), st.tuples(st.integers(1, 50), st.integers(0, 50), st.integers(1, 9)),
                       min_size=1))
def test_grid_option_round_trips(axes):
    text = ",".join(f"{k}={lo / 10}:{(lo + extra) / 10}:{n}" for k, (lo, extra, n) in axes.items())
    expected = Grid(**{f"{k}_{part}": value for k, (lo, extra, n) in axes.items()
                       for part, value in (("min", lo / 10), ("max", (lo + extra) / 10), ("n", n))})
    assert _parse_grid(text) == expected


def test_grid_option_with_an_unknown_axis_names_the_axes():
    from mixzoo.core.errors import MixzooError

    with pytest.raises(MixzooError, match="the axes are s, p and c"):
        _parse_grid("q=1:2:3")
    with pytest.raises(MixzooError, match="is not of the form"):
        _parse_grid("s=1:2:3.5")


def test_eps_list_keeps_every_radius_in_order():
    assert parse_floats("0.1, 0.2,0.5", "--eps") == [0.1, 0.2, 0.5]
    assert parse_floats("0.3", "--eps") == [0.3]
    assert parse_floats(None, "--eps") is None


# --------------------------------------------------------------------------------------------- commands -> library


SHARED_DIFFERENCES = {"out", "progress", "command"}  # CLI-only defaults: a file name, and progress bars on


def _assert_library_defaults(kwargs: dict, fn, skip=()) -> None:
    defaults = _library_defaults(fn)
    for key, value in kwargs.items():
        if key in defaults and key not in SHARED_DIFFERENCES | set(skip):
            assert value == defaults[key], f"{key}: the CLI passes {value!r}, the library default is {defaults[key]!r}"


def test_mix_without_options_passes_the_library_defaults(monkeypatch):
    from mixzoo.methods.mixednuts import fitting as pipeline

    real = (FitRequest, pipeline.MixSettings)
    spy = _spy(monkeypatch, "mixzoo.methods.mixednuts.fitting.mix", _mix_result())
    result = CliRunner().invoke(app, ["mix", "--json"])
    assert result.exit_code == 0, result.output
    assert spy.calls[0][0] == (None, None)
    _assert_library_defaults(spy.kwargs, real, skip=("batch_size",))
    assert spy.kwargs["batch_size"] == 250  # what FitRequest's None stands for (mixzoo.zoo.pairs.prepare_pair)
    assert spy.kwargs["out"] == Path("card.toml") and spy.kwargs["progress"] is False


def test_mix_passes_every_option(monkeypatch, tmp_path):
    spy = _spy(monkeypatch, "mixzoo.methods.mixednuts.fitting.mix", _mix_result())
    args = ["mix", "--abc", "my-abc", "--rbc", "my-rbc", "--dataset", "digits", "--beta", "0.9", "--clamp", "relu",
            "--n-calib", "7", "--grid", "s=0.1:1:2", "--objective", "relaxed", "--optimizer", "my-opt", "--top-k", "3",
            "--search", "authors", "--refit-alpha", "--eps", "0.2", "--norm", "L2", "--n-iter", "5", "--seed", "4",
            "--batch-size", "6",
            "--out", str(tmp_path / "c.toml"), "--data-dir", "dd", "--cache-dir", str(tmp_path / "cache"),
            "--no-cache", "--device", "cuda:1", "--allow-unsafe"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert spy.calls[0][0] == ("my-abc", "my-rbc")
    kw = spy.kwargs
    assert kw["grid"] == Grid(s_min=0.1, s_max=1.0, s_n=2)
    assert {k: kw[k] for k in ("dataset", "beta", "clamp", "n_calib", "objective", "optimizer", "top_k", "search",
                               "refit_alpha", "eps", "norm", "n_iter", "seed", "batch_size", "out", "data_dir",
                               "cache_dir", "use_cache", "device", "allow_unsafe", "progress")} == dict(
        dataset="digits", beta=0.9, clamp="relu", n_calib=7, objective="relaxed", optimizer="my-opt", top_k=3,
        search="authors", refit_alpha=True, eps=0.2, norm="L2", n_iter=5, seed=4, batch_size=6, out=tmp_path / "c.toml",
        data_dir="dd", cache_dir=tmp_path / "cache", use_cache=False, device="cuda:1", allow_unsafe=True,
        progress=True)
    assert "mix card written to card.toml" in result.output


def test_mix_json_reports_each_parameter_under_its_own_key(monkeypatch):
    _spy(monkeypatch, "mixzoo.methods.mixednuts.fitting.mix",
         _mix_result(s=1.5, p=2.5, c=-0.5, alpha=0.75, beta=0.9, objective=0.125))
    result = CliRunner().invoke(app, ["mix", "--json"])
    payload = json.loads(result.stdout)
    assert {k: payload[k] for k in ("card", "s", "p", "c", "alpha", "beta", "objective")} == dict(
        card="card.toml", s=1.5, p=2.5, c=-0.5, alpha=0.75, beta=0.9, objective=0.125)
    assert payload["summary"]["n"] == 3 and payload["cache_hits"] == {"mmaa": False}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=12), max_size=5))
def test_the_recorded_command_line_splits_back_into_the_arguments(argv):
    from unittest import mock

    from mixzoo.core.commands import command_line

    with mock.patch.object(sys, "argv", ["/usr/bin/mixzoo", *argv]):
        assert shlex.split(command_line()) == ["mixzoo", *argv]


def test_mix_records_the_quoted_command_line(monkeypatch, tmp_path):
    spy = _spy(monkeypatch, "mixzoo.methods.mixednuts.fitting.mix", _mix_result())
    argv = ["mix", "--out", str(tmp_path / "my card.toml"), "--json"]
    monkeypatch.setattr(sys, "argv", ["mixzoo", *argv])
    assert CliRunner().invoke(app, argv).exit_code == 0
    assert shlex.split(spy.kwargs["command"]) == ["mixzoo", *argv]


def _settings_defaults(settings, **library) -> None:
    """The CLI's settings equal the library's defaults (``RunSettings()`` changed by ``library``), progress aside."""
    from dataclasses import replace

    from mixzoo.core.settings import RunSettings

    expected = RunSettings().changed(**library)
    assert replace(settings, progress=True) == replace(expected, progress=True)


def test_bench_defaults_and_options_reach_the_library(monkeypatch, tmp_path):
    from mixzoo.core.settings import RunSettings
    from mixzoo.evaluation import bench

    real = bench.bench
    report = SimpleNamespace(to_dict=lambda: {"ok": 1}, files=[])
    spy = _spy(monkeypatch, "mixzoo.evaluation.bench.bench", report)
    result = CliRunner().invoke(app, ["bench", "--json"])
    assert result.exit_code == 0, result.output
    (card, settings), kw = spy.calls[0]
    assert card is None and json.loads(result.stdout) == {"ok": 1}
    _settings_defaults(settings)
    _assert_library_defaults(kw, real)
    assert kw["out"] == Path("bench")

    spy = _spy(monkeypatch, "mixzoo.evaluation.bench.bench", report)
    result = CliRunner().invoke(app, [
        "bench", str(tmp_path / "card.toml"), "--abc", "a", "--rbc", "r", "--attack", "apgd", "--n", "9",
        "--out", str(tmp_path / "o"), "--eps", "0.3", "--norm", "L2", "--seed", "2", "--batch-size", "8",
        "--no-curve", "--curve-n", "11", "-O", "n_iter=3", "--attack-option", "loss=ce", "--save-adversarial",
        "--data-dir", "dd", "--cache-dir", str(tmp_path / "c"), "--no-cache", "--device", "cuda", "--allow-unsafe",
        "--batch-seeds", "--no-plots", "--no-baseline", "--json"])
    assert result.exit_code == 0, result.output
    (card, settings), kw = spy.calls[0]
    assert card == str(tmp_path / "card.toml")  # a card file or a published card name
    assert settings == RunSettings(
        abc="a", rbc="r", attack="apgd", n=9, eps=0.3, norm="L2", seed=2, batch_size=8,
        attack_options={"n_iter": 3, "loss": "ce"}, data_dir="dd", cache_dir=tmp_path / "c", use_cache=False,
        device="cuda", allow_unsafe=True, progress=False, extra_attacks=True, per_example_seeds=False)
    assert kw == dict(out=tmp_path / "o", baseline=None, curve=None, plots=False, save_adversarial=True)
    spy = _spy(monkeypatch, "mixzoo.evaluation.bench.bench", report)
    assert CliRunner().invoke(app, ["bench", "--curve-n", "11", "--json"]).exit_code == 0
    assert spy.kwargs["curve"].n == 11 and spy.kwargs["baseline"] is True  # the budget's
    assert spy.kwargs["curve"] == replace(bench.CurveSettings.for_budget("standard"), n=11)
    spy = _spy(monkeypatch, "mixzoo.evaluation.bench.bench", report)
    assert CliRunner().invoke(app, ["bench", "--budget", "strong", "--curve-n", "11", "--json"]).exit_code == 0
    assert spy.calls[0][0][1].budget == "strong" and spy.calls[0][0][1].attack == "adaptive-strong"
    assert spy.kwargs["curve"] == replace(bench.CurveSettings.for_budget("strong"), n=11)


def test_sanity_defaults_options_and_strict_exit_status(monkeypatch, tmp_path):
    from mixzoo.core.settings import RunSettings
    from mixzoo.evaluation import sanity

    real = sanity.eps_sweep
    card = tmp_path / "card.toml"
    spy = _spy(monkeypatch, "mixzoo.evaluation.sanity.eps_sweep", _dict_result(passed=False))
    result = CliRunner().invoke(app, ["sanity", str(card), "--json"])
    assert result.exit_code == 0, result.output  # misses without --strict: reported, status 0
    assert json.loads(result.stdout) == {"passed": False}
    (given, settings), kw = spy.calls[0]
    _settings_defaults(settings, attack="adaptive-apgd", n=200)  # eps_sweep's own defaults
    _assert_library_defaults(kw, real)
    assert given == card and kw["out"] == Path("sanity") and kw["baseline"] is True  # the budget's, as bench's

    spy = _spy(monkeypatch, "mixzoo.evaluation.sanity.eps_sweep", _dict_result(passed=False))
    args = ["sanity", str(card), "--eps", "0.1,0.25", "--attack", "pgd", "--n", "5",
            "--linear-alpha", "0.6", "--abc", "a", "--rbc", "r", "--out", str(tmp_path / "o"), "--seed", "3",
            "--batch-size", "4", "-O", "n_iter=2", "--data-dir", "dd", "--cache-dir", str(tmp_path / "c"),
            "--no-cache", "--device", "cuda", "--allow-unsafe", "--json", "--strict"]
    assert CliRunner().invoke(app, args).exit_code == 1
    (given, settings), kw = spy.calls[0]
    assert settings == RunSettings(
        abc="a", rbc="r", attack="pgd", n=5, seed=3, batch_size=4, attack_options={"n_iter": 2}, data_dir="dd",
        cache_dir=tmp_path / "c", use_cache=False, device="cuda", allow_unsafe=True, progress=False)
    assert kw == dict(radii=[0.1, 0.25], baseline=0.6, out=tmp_path / "o")
    spy = _spy(monkeypatch, "mixzoo.evaluation.sanity.eps_sweep", _dict_result(passed=False))
    assert CliRunner().invoke(app, [*args, "--no-linear"]).exit_code == 1
    assert spy.kwargs["baseline"] is None

    _spy(monkeypatch, "mixzoo.evaluation.sanity.eps_sweep", _dict_result(passed=True))
    assert CliRunner().invoke(app, ["sanity", str(card), "--json", "--strict"]).exit_code == 0


def test_verify_exit_status_follows_the_verdict_and_options_reach_the_library(monkeypatch, tmp_path):
    from mixzoo.core.settings import RunSettings
    from mixzoo.evaluation import verify

    real = verify.verify_report
    spy = _spy(monkeypatch, "mixzoo.evaluation.verify.verify_report", _dict_result(passed=True))
    result = CliRunner().invoke(app, ["verify", str(tmp_path), "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout) == {"passed": True}
    _settings_defaults(spy.calls[0][0][1])
    _assert_library_defaults(spy.kwargs, real)
    spy = _spy(monkeypatch, "mixzoo.evaluation.verify.verify_report", _dict_result(passed=False))
    result = CliRunner().invoke(app, ["verify", str(tmp_path), "--abc", "a", "--rbc", "r", "--out",
                                      str(tmp_path / "v.json"), "--batch-size", "3", "--data-dir", "dd",
                                      "--device", "cuda", "--allow-unsafe", "--recheck", "4", "--json"])
    assert result.exit_code == 1
    (given, settings), kw = spy.calls[0]
    assert given == tmp_path and kw == dict(out=tmp_path / "v.json", recheck=4)
    assert settings == RunSettings(abc="a", rbc="r", data_dir="dd", device="cuda", batch_size=3, allow_unsafe=True)


def test_check_refuses_an_unwritable_out_before_any_work(monkeypatch, tmp_path):
    spy = _spy(monkeypatch, "mixzoo.methods.mixednuts.approximation.check_approximation", _dict_result())
    (tmp_path / "afile").write_text("x")
    line = one_line_error(CliRunner().invoke(app, ["check", str(tmp_path / "card.toml"), "--out",
                                                   str(tmp_path / "afile" / "r.json")]))
    assert "--out" in line and spy.calls == []


def test_check_defaults_and_options_reach_the_library(monkeypatch, tmp_path):
    from mixzoo.methods.mixednuts import approximation

    real = approximation.check_approximation
    spy = _spy(monkeypatch, "mixzoo.methods.mixednuts.approximation.check_approximation", _dict_result())
    result = CliRunner().invoke(app, ["check", str(tmp_path / "card.toml"), "--json"])
    assert result.exit_code == 0, result.output
    _assert_library_defaults(spy.kwargs, real)
    spy = _spy(monkeypatch, "mixzoo.methods.mixednuts.approximation.check_approximation", _dict_result())
    result = CliRunner().invoke(app, ["check", str(tmp_path / "card.toml"), "--rbc", "r", "--out",
                                      str(tmp_path / "r.json"), "--data-dir", "dd", "--cache-dir",
                                      str(tmp_path / "c"), "--no-cache", "--device", "cuda", "--allow-unsafe",
                                      "--json"])
    assert result.exit_code == 0, result.output
    assert spy.kwargs == dict(rbc="r", data_dir="dd", cache_dir=tmp_path / "c", use_cache=False, device="cuda",
                              allow_unsafe=True, progress=False)
    written = json.loads((tmp_path / "r.json").read_text())
    assert written == {"card": str(tmp_path / "card.toml"), "passed": True, "notes": []}


def test_transfer_params_defaults_and_options_reach_the_library(monkeypatch, tmp_path):
    from mixzoo.methods.mixednuts import transfer

    real = (transfer.TransferSettings, transfer.BlackBoxSource)
    card = tmp_path / "card.toml"
    spy = _spy(monkeypatch, "mixzoo.methods.mixednuts.transfer.transfer_params_by_name", _card())
    result = CliRunner().invoke(app, ["transfer-params", "--from", str(card), "--rbc", "bb", "--json"])
    assert result.exit_code == 0, result.output
    assert spy.calls[0][0] == (card, "bb")
    _assert_library_defaults(spy.kwargs, real)
    assert json.loads(result.stdout) == {"card": "card-transfer.toml", "method": "transfer", "s": 1.5, "p": 2.5,
                                         "c": -0.5, "alpha": 0.75, "objective": 0.125, "notes": []}
    spy = _spy(monkeypatch, "mixzoo.methods.mixednuts.transfer.transfer_params_by_name", _card())
    result = CliRunner().invoke(app, [
        "transfer-params", "--from", str(card), "--rbc", "bb", "--method", "square", "--queries", "50",
        "--query-budget", "900", "--n-calib", "30", "--dataset", "digits", "--beta", "0.9", "--eps", "0.05",
        "--norm", "L2", "--seed", "5", "--out", str(tmp_path / "t.toml"), "--data-dir", "dd", "--cache-dir",
        str(tmp_path / "c"), "--no-cache", "--device", "cuda", "--allow-unsafe", "--json"])
    assert result.exit_code == 0, result.output
    expected = dict(dataset="digits", n_calib=30, method="square", queries=50, query_budget=900,
                    out=tmp_path / "t.toml", seed=5, beta=0.9, eps=0.05, norm="L2", data_dir="dd",
                    cache_dir=tmp_path / "c", use_cache=False, device="cuda", allow_unsafe=True, progress=False)
    assert {k: spy.kwargs[k] for k in expected} == expected


def test_train_without_a_name_lists_the_recipes_and_trains_nothing(monkeypatch, tmp_path):
    from mixzoo.training import train

    spy = _spy(monkeypatch, "mixzoo.training.train.train_model", "trained")
    for args in (["train"], ["train", "--list"], ["train", "digits-std", "--list"]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        assert result.output.split() == list(train.RECIPES)
    assert spy.calls == []
    result = CliRunner().invoke(app, ["train", "digits-std", "--seed", "3", "--out", str(tmp_path)])
    assert result.exit_code == 0 and result.output.strip() == "trained"
    assert spy.calls == [(("digits-std", tmp_path), {"seed": 3})]
    # No --seed means the recipe's own seed (train_model's None), not a fixed 0 that would count as an override
    # for a recipe seeded otherwise.
    assert CliRunner().invoke(app, ["train", "digits-std"]).exit_code == 0
    assert spy.calls[-1] == (("digits-std", None), {"seed": None})
