"""Small CLI behaviours of issue 31 (item 7): warnings as one line, an unwritable card refused before any work,
write errors naming the file the user asked for."""

from __future__ import annotations

import os
import warnings

import pytest
from foreign_files import put_foreign, tree_state
from typer.testing import CliRunner

from mixzoo.cli import app
from mixzoo.core.cache import atomic_write_text
from mixzoo.core.plugins import clear_caches, hookimpl, register_plugin, unregister_plugin


class Warner:
    @hookimpl
    def mixzoo_clamp_functions(self):
        warnings.warn("i31 clamp table is deprecated\nuse the new one", UserWarning, stacklevel=1)
        return {"i31-warn-clamp": abs}


def test_warnings_print_as_one_line_without_source():
    register_plugin(Warner(), name="i31-warner")
    try:
        result = CliRunner().invoke(app, ["plugins", "--check"])
    finally:
        unregister_plugin("i31-warner")
        clear_caches()
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if "i31 clamp table" in line]
    assert lines and all(line == "warning: i31 clamp table is deprecated use the new one" for line in lines)
    assert "UserWarning" not in result.output and "warnings.warn(" not in result.output


def test_a_read_only_existing_card_is_refused_before_any_work(tmp_path):
    card = tmp_path / "card.toml"
    card.write_text("# an old card\n")
    card.chmod(0o444)
    if os.access(card, os.W_OK):
        pytest.skip("running as root: permission bits do not stop writes, nothing to refuse")
    # a model name that does not exist: were the models loaded first, the error would be about it
    result = CliRunner().invoke(app, ["mix", "--abc", "no-such-model", "--rbc", "digits-pgd", "--out", str(card)])
    assert result.exit_code == 2
    assert f"card {card} exists and is not writable" in result.output
    assert card.read_text() == "# an old card\n"


def test_a_failed_atomic_write_names_the_target_not_the_temp_file(tmp_path):
    target = tmp_path / "card.toml"
    target.mkdir()
    (target / "keep").write_text("x")  # a non-empty directory: the final rename fails, even for root
    with pytest.raises(OSError) as err:
        atomic_write_text(target, "text")
    assert err.value.filename == str(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["card.toml"]  # no temp file left


# ----------------------------------------------------------------------------- what every writing command refuses
@pytest.fixture(scope="module")
def linear_card(tmp_path_factory):
    path = tmp_path_factory.mktemp("linear") / "lin.toml"
    res = CliRunner().invoke(app, ["mix", "--method", "linear", "--abc", "digits-std", "--rbc", "digits-pgd", "-O",
                                   "alpha=0.9", "--out", str(path)])
    assert res.exit_code == 0, res.output
    return path


# command -> (its arguments with OUT for the output directory or file, the file put in the way, relative to OUT)
WRITERS = {
    "mix": (["mix", "--method", "linear", "--abc", "digits-std", "--rbc", "digits-pgd", "-O", "alpha=0.9", "--out",
             "OUT/card.toml"], "card.toml"),
    "bench": (["bench", "CARD", "--n", "3", "--attack", "apgd", "-O", "n_iter=1", "--no-curve", "--no-plots",
               "--no-baseline", "--no-extra-attacks", "--out", "OUT"], "report.json"),
    "export": (["export", "CARD", "--format", "torch-export", "--check-n", "5", "--out", "OUT"], "lin.pt2"),
    "push": (["push", "CARD", "--repo", "me/lin", "--dry-run", "--out", "OUT/hub"], "hub"),
    "train": (["train", "digits-std", "--out", "OUT"], "digits-std.safetensors"),
    "certify": (["certify", "CARD", "--norm", "l2", "--n", "5", "--out", "OUT"], "certify.json"),
    "verify": (["verify", "BENCH", "--out", "OUT/verify.json"], "verify.json"),
    # a trained method's own files next to its card, refused before training starts
    "mix-trained-weights": (["mix", "--method", "adaptive-smoothing", "--abc", "digits-std", "--rbc", "digits-pgd",
                             "--out", "OUT/card.toml"], "card.mixing-network.safetensors"),
    "mix-trained-checkpoint": (["mix", "--method", "local-smoothing-adaptive", "--abc", "digits-std", "--rbc",
                                "digits-pgd", "--out", "OUT/card.toml"], "card.training.pt"),
}


@pytest.fixture(scope="module")
def bench_dir(linear_card, tmp_path_factory):
    path = tmp_path_factory.mktemp("bench")
    res = CliRunner().invoke(app, ["bench", str(linear_card), "--n", "3", "--attack", "apgd", "-O", "n_iter=1",
                                   "--no-curve", "--no-plots", "--no-baseline", "--save-adversarial", "--out",
                                   str(path)])
    assert res.exit_code == 0, res.output
    return path


@pytest.mark.parametrize("kind", ["fifo", "directory", "link", "unrelated"])
@pytest.mark.parametrize("command", sorted(WRITERS))
def test_every_writing_command_refuses_what_it_did_not_write_at_its_output(linear_card, bench_dir, tmp_path,
                                                                           command, kind):
    args, name = WRITERS[command]
    if command == "push" and kind == "unrelated":
        kind = "file"  # a folder's place: a plain file there
    out = tmp_path / "out"
    out.mkdir()
    put_foreign(out / name, kind if kind != "file" else "unrelated", tmp_path)
    before = tree_state(tmp_path)
    args = [a.replace("OUT", str(out)).replace("CARD", str(linear_card)).replace("BENCH", str(bench_dir))
            for a in args]
    res = CliRunner().invoke(app, args)
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (res.output,
                                                                                       repr(res.exception))
    assert name in lines[0], lines[0]
    assert tree_state(tmp_path) == before  # the thing in the way untouched, nothing written beside it


def test_integers_beyond_64_bits_are_one_line_errors(linear_card, tmp_path):
    big = "99999999999999999999999"
    for args in (["bench", str(linear_card), "-O", f"n_iter={big}", "--n", "3", "--no-curve", "--no-plots",
                  "--no-baseline", "--out", str(tmp_path / "b")],
                 ["bench", str(linear_card), "--n", big, "--out", str(tmp_path / "b")],
                 ["bench", str(linear_card), "--seed", f"-{big}", "--n", "3", "--out", str(tmp_path / "b")],
                 ["bench", str(linear_card), "--batch-size", big, "--n", "3", "--out", str(tmp_path / "b")],
                 ["mix", "--method", "linear", "--abc", "digits-std", "--rbc", "digits-pgd", "-O", f"alpha={big}",
                  "--out", str(tmp_path / "c.toml")],
                 ["certify", str(linear_card), "--n", big, "--out", str(tmp_path / "c")]):
        res = CliRunner().invoke(app, args)
        lines = [line for line in res.stderr.splitlines() if line.strip()]
        assert res.exit_code == 2 and len(lines) == 1 and "64-bit" in lines[0], (args, res.output,
                                                                                  repr(res.exception))
    assert list(tmp_path.iterdir()) == []
