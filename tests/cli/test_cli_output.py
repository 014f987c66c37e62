"""Small CLI behaviours of issue 31 (item 7): warnings as one line, an unwritable card refused before any work,
write errors naming the file the user asked for."""

from __future__ import annotations

import os
import warnings

import pytest
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
