"""Bad input at the edges of the main job: one-line errors that name the fix, given before any attack runs, and
nothing half-written on disk."""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from mixzoo.cli import app
from mixzoo.core.cache import check_writable
from mixzoo.core.card import MixCard
from mixzoo.core.errors import InputError, MixzooError, UnknownNameError
from mixzoo.core.registry import list_models
from mixzoo.methods.mixednuts.fitting import mix
from mixzoo.zoo.pairs import card_dataset

FAST = dict(abc="digits-std", rbc="digits-pgd", n_calib=40, n_iter=2, n_target_classes=1, progress=False)


def _parse_grid(text):
    """The ``grid`` option of MixedNUTS as ``mixzoo mix --grid TEXT`` reads it (None or empty: no grid)."""
    from mixzoo.methods.mixednuts.method import MixedNUTS

    return MixedNUTS().check_options({"grid": text})["grid"] if text else None



def one_line_error(result) -> str:
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "Traceback" not in result.output
    return lines[0]


def test_check_writable_refuses_impossible_paths_and_creates_nothing(tmp_path):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "adir.toml").mkdir()
    with pytest.raises(InputError, match="afile is a file, not a directory"):
        check_writable(tmp_path / "afile" / "deeper" / "card.toml", what="card")
    with pytest.raises(InputError, match="is a directory; pass a file path"):
        check_writable(tmp_path / "adir.toml", what="card")
    with pytest.raises(InputError, match="is a file; pass a directory path"):
        check_writable(tmp_path / "afile", directory=True, what="--out directory")
    deep = tmp_path / "new" / "deeper" / "out"
    assert check_writable(deep, directory=True) == deep and not (tmp_path / "new").exists()
    assert check_writable(tmp_path / "adir.toml", directory=True) == tmp_path / "adir.toml"


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into a directory without write permission")
def test_check_writable_refuses_a_read_only_directory(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(InputError, match="is not writable"):
            check_writable(locked / "card.toml", what="card")
    finally:
        locked.chmod(0o700)


def test_unwritable_outputs_are_refused_before_the_attack(tmp_path):
    (tmp_path / "afile").write_text("x")
    runner = CliRunner()
    cache = tmp_path / "cache"
    common = ["--abc", "digits-std", "--rbc", "digits-pgd", "--n-calib", "40", "--cache-dir", str(cache)]
    line = one_line_error(runner.invoke(app, ["mix", *common, "--out", str(tmp_path / "afile" / "c.toml")]))
    assert "afile is a file" in line
    line = one_line_error(runner.invoke(app, ["mix", "--abc", "digits-std", "--rbc", "digits-pgd",
                                              "--cache-dir", str(tmp_path / "afile"), "--out", "c.toml"]))
    assert "--cache-dir" in line and "pass a directory path" in line
    line = one_line_error(runner.invoke(app, ["bench", "--abc", "digits-std", "--rbc", "digits-pgd",
                                              "--cache-dir", str(cache), "--out", str(tmp_path / "afile")]))
    assert "--out directory" in line
    assert not cache.exists()  # refused before anything was computed or cached


def test_settings_that_would_fail_after_the_attack_fail_before_it(tmp_path):
    cache = tmp_path / "cache"
    with pytest.raises(InputError, match=r"top_k must lie in \[2, 10\]"):
        mix(**FAST, top_k=99, cache_dir=cache, out=tmp_path / "c.toml")
    for bad in (2.5, True, 1):
        with pytest.raises(InputError, match="top_k must be an integer >= 2"):
            mix(**FAST, top_k=bad, cache_dir=cache)
    for eps in (float("nan"), float("inf"), 0.0):
        with pytest.raises(InputError, match="epsilon must be a positive finite number"):
            mix(**FAST, eps=eps, cache_dir=cache)
    with pytest.raises(InputError, match="did you mean --abc digits-std --rbc digits-pgd"):
        mix(abc="digits-pgd", rbc="digits-std", cache_dir=cache)
    assert not cache.exists() and not (tmp_path / "c.toml").exists()


def test_error_text_with_brackets_is_printed_verbatim(tmp_path):
    runner = CliRunner()
    line = one_line_error(runner.invoke(app, ["check", str(tmp_path / "[/x].toml")]))
    assert "[/x].toml does not exist" in line
    line = one_line_error(runner.invoke(app, ["mix", "--grid", "s=nan:1:3", "--out", str(tmp_path / "c.toml")]))
    assert "got [nan, 1.0]" in line


def test_grid_range_errors_are_not_called_form_errors():
    with pytest.raises(MixzooError, match="swap them") as info:
        _parse_grid("s=2:1:3")
    assert "is not of the form" not in str(info.value)
    with pytest.raises(MixzooError, match="is not of the form"):
        _parse_grid("s=1:2")
    with pytest.raises(MixzooError, match="the axes are s, p and c"):
        _parse_grid("x=1:2:3")


def test_card_files_that_are_not_cards(tmp_path):
    (tmp_path / "binary.toml").write_bytes(b"\xff\xfe\x00\x01")
    with pytest.raises(InputError, match="not a text file"):
        MixCard.load(tmp_path / "binary.toml")
    (tmp_path / "folder.toml").mkdir()
    with pytest.raises(InputError, match="is a directory"):
        MixCard.load(tmp_path / "folder.toml")


def _mix_card() -> dict:
    return MixCard(
        "mixednuts",
        {
            "s": 2.0,
            "p": 2.0,
            "c": -0.5,
            "alpha": 0.9,
            "beta": 0.985,
            "grid": {
                "s_values": [1.0, 2.0],
                "p_values": [2.0],
                "c_values": [-0.5, 0.0],
                "objectives": [[[0.5, 0.6]], [[0.4, 0.7]]],
            },
        },
        dataset="digits",
        abc={"name": "digits-std"},
        rbc={"name": "digits-pgd"},
        data={"n": 100, "fingerprint": "0"},
        attack={
            "name": "mmaa",
            "eps": 0.2,
            "norm": "Linf",
            "n_iter": 10,
            "n_target_classes": 9,
            "n_restarts": 1,
            "seed": 0,
        },
    ).to_dict()


@pytest.mark.parametrize(("edit", "match"), [
    (lambda d: d["attack"].update(eps="big"), "'attack.eps' must be a positive number"),
    (lambda d: d["attack"].update(eps=float("nan")), "'attack.eps' must be a positive number"),
    (lambda d: d["attack"].update(norm="L3"), "'attack.norm' must be 'Linf' or 'L2'"),
    (lambda d: d["attack"].pop("n_iter"), "'attack.n_iter' must be a positive integer"),
    (lambda d: d["attack"].update(n_target_classes=-1), "'attack.n_target_classes'"),
    (lambda d: d["attack"].update(batch_size=0), "'attack.batch_size'"),
    (lambda d: d["data"].pop("n"), "'data.n' must be the number of calibration images"),
    (lambda d: d["data"].update(n_clean=-3), "'data.n_clean'"),
    (lambda d: d["abc"].update(name=5), "field 'abc.name'"),
    (lambda d: d["rbc"].update(weight_hash=""), "'rbc.weight_hash'"),
    # the grid is MixedNUTS's search record, in its section
    (lambda d: d["mixednuts"]["grid"].pop("objectives"), "'mixednuts.grid.objectives' must be a 2x1x2 nested list"),
    (lambda d: d["mixednuts"]["grid"].update(objectives=[[0.5, 0.6]]), "'mixednuts.grid.objectives' must be a 2x1x2"),
    (lambda d: d["mixednuts"]["grid"].update(alphas=[[[1.0]]]), "'mixednuts.grid.alphas' must be a 2x1x2"),
    (lambda d: d["mixednuts"]["grid"].update(p_values=[]), "'mixednuts.grid.p_values' must be a non-empty list"),
])
def test_hand_edited_card_records_fail_on_loading(tmp_path, edit, match):
    data = _mix_card()
    MixCard.from_dict(data)  # the unedited card is valid
    edit(data)
    path = tmp_path / "card.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match=match):
        MixCard.load(path)


def test_a_card_without_a_dataset_takes_its_rbcs():
    from mixzoo.zoo.models import load_model

    card = MixCard.from_dict({**_mix_card(), "dataset": None})
    assert card_dataset(card, load_model("digits-pgd")) == "digits"
    with pytest.raises(InputError, match="names no dataset"):
        card_dataset(card, object())


def test_list_refuses_unknown_datasets_and_prints_whole_names():
    with pytest.raises(UnknownNameError, match="did you mean 'digits'"):
        list_models(dataset="digitz")
    result = CliRunner().invoke(app, ["list"], terminal_width=60)
    assert result.exit_code == 0
    for spec in list_models():
        assert spec.name in result.output and spec.dataset in result.output


def test_a_card_with_more_top_k_than_classes_is_refused_before_the_evaluation():
    from mixzoo.evaluation.bench import card_evaluation

    def with_top_k(k: int) -> MixCard:
        data = _mix_card()
        data["mixednuts"]["top_k"] = k  # MixedNUTS's parameters are in its section
        return MixCard.from_dict(data)

    card = with_top_k(50)
    assert card.params["top_k"] == 50
    with pytest.raises(InputError, match=r"top_k \(50\) exceeds the 10 classes"):
        card_evaluation(card, n=10)
    assert card_evaluation(with_top_k(5), n=10).data.num_classes == 10


def test_cli_train_with_another_seed_needs_out():
    line = one_line_error(CliRunner().invoke(app, ["train", "digits-std", "--seed", "1"]))
    assert "--out" in line


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")
def test_check_writable_tries_a_real_write():
    with pytest.raises(InputError, match="/proc is not writable"):  # os.access says yes to root here
        check_writable("/proc/mixzoo-bench", directory=True)


def test_transfer_params_takes_the_options_of_every_command(tmp_path):
    (tmp_path / "afile").write_text("x")
    card = MixCard.from_dict(_mix_card()).save(tmp_path / "card.toml")
    line = one_line_error(CliRunner().invoke(app, ["transfer-params", "--from", str(card), "--rbc", "digits-pgd",
                                                   "--cache-dir", str(tmp_path / "afile"), "--n-calib", "20",
                                                   "--out", str(tmp_path / "bb.toml")]))
    assert "--cache-dir" in line and not (tmp_path / "bb.toml").exists()
    result = CliRunner().invoke(app, ["transfer-params", "--help"], terminal_width=200)
    for option in ("--data-dir", "--cache-dir", "--no-cache", "--device", "--allow-unsafe", "--beta"):
        assert option in result.output


def test_public_names_and_subpackages_are_reachable_from_the_package():
    import mixzoo

    assert all(getattr(mixzoo, name) is not None for name in mixzoo.__all__)
    assert callable(mixzoo.calibrate)  # the function (Algorithm 1), as documented
    assert mixzoo.evaluation.__name__ == "mixzoo.evaluation" and mixzoo.zoo.__name__ == "mixzoo.zoo"
    with pytest.raises(AttributeError):
        mixzoo.not_a_module  # noqa: B018


def test_a_benchmark_scripts_bad_input_is_one_line_and_exit_status_2(capsys):
    from mixzoo.core.errors import InputError, run_script

    def bad():
        raise InputError("no images to attack; pass at least one example")

    with pytest.raises(SystemExit) as info:
        run_script(bad)
    assert info.value.code == 2
    assert capsys.readouterr().err == "error: no images to attack; pass at least one example\n"

    def bug():
        raise RuntimeError("a bug, not bad input")

    with pytest.raises(RuntimeError, match="a bug"):  # only mixzoo's own errors are turned into a line
        run_script(bug)


@pytest.mark.subprocess
def test_a_benchmark_script_piped_into_head_ends_quietly():
    import subprocess
    import sys

    code = ("from mixzoo.core.errors import run_script\n"
            "def main():\n    for i in range(200000):\n        print('row', i)\n"
            "run_script(main)\n")
    done = subprocess.run(f"{sys.executable} -c \"{code}\" | head -n 2", shell=True, capture_output=True,
                          text=True, timeout=120)
    assert done.stdout == "row 0\nrow 1\n"
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
