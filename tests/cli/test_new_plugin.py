"""``mixzoo new-plugin``'s typer layer: the package written, a bad kind one line with exit status 2."""

from __future__ import annotations

from typer.testing import CliRunner

from mixzoo.cli import app


def _app():
    return app


def test_new_plugin_writes_the_package_and_says_what_next(tmp_path):
    result = CliRunner().invoke(_app(), ["new-plugin", "acme", "--kinds", "attack,clamp", "--directory",
                                         str(tmp_path)])
    assert result.exit_code == 0, result.output
    folder = tmp_path / "mixzoo-plugin-acme"
    assert sorted(p.name for p in (folder / "src" / "mixzoo_plugin_acme").iterdir()) == ["__init__.py", "attack.py",
                                                                                         "clamp.py"]
    assert f"pip install -e {folder}" in result.output


def test_a_bad_kind_is_one_line_and_exit_2(tmp_path):
    result = CliRunner().invoke(_app(), ["new-plugin", "acme", "--kinds", "attack,sampler", "--directory",
                                         str(tmp_path)])
    assert result.exit_code == 2 and "unknown kind(s) sampler" in result.output
    assert list(tmp_path.iterdir()) == []
