"""mixzoo.scaffold.new_plugin: the package it writes (files, names, declaration), its refusals, and (subprocess)
its own tests passing with pytest."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from mixzoo.core.errors import InputError
from mixzoo.core.plugins.listing import LABELS
from mixzoo.scaffold import KINDS, new_plugin, render


def test_every_kind_gets_its_module_its_hook_and_its_declared_names(tmp_path):
    folder = new_plugin("acme", tmp_path)
    assert folder == tmp_path / "mixzoo-plugin-acme"
    pyproject = tomllib.loads((folder / "pyproject.toml").read_text())
    assert pyproject["project"]["name"] == "mixzoo-plugin-acme"
    assert pyproject["project"]["entry-points"]["mixzoo"] == {"acme": "mixzoo_plugin_acme"}
    package = folder / "src" / "mixzoo_plugin_acme"
    assert sorted(p.name for p in package.iterdir()) == sorted(["__init__.py", *(t.module for t in KINDS.values())])
    init = (package / "__init__.py").read_text()
    tree = ast.parse(init)
    provides = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                    and n.targets[0].id == "PROVIDES")
    assert provides == {t.label: [n.replace("PLUGNAME", "acme") for n in t.names] for t in KINDS.values()}
    assert set(provides) <= set(LABELS)
    assert all(name.startswith("acme-") for names in provides.values() for name in names)
    # light: the entry-point module imports no torch at module level (each hook imports its module)
    top = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    assert not any("torch" in ast.unparse(n) for n in top)
    for text in (*(p.read_text() for p in package.glob("*.py")), (folder / "tests" / "test_plugin.py").read_text()):
        ast.parse(text)
        assert "PLUGNAME" not in text and "PLUGMOD" not in text
    assert "acme-fgsm" in (folder / "README.md").read_text()


def test_a_subset_of_kinds_writes_only_those():
    files = render("my-lab", ["attack", "model"])
    assert sorted(files) == ["README.md", "pyproject.toml", "src/mixzoo_plugin_my_lab/__init__.py",
                             "src/mixzoo_plugin_my_lab/attack.py", "src/mixzoo_plugin_my_lab/model.py",
                             "tests/test_plugin.py"]
    init = files["src/mixzoo_plugin_my_lab/__init__.py"]
    assert "mixzoo_attacks" in init and "mixzoo_model_sources" in init and "mixzoo_mixing_methods" not in init
    assert "import typer" not in files["tests/test_plugin.py"]


@pytest.mark.parametrize(("name", "kinds", "message"), [
    ("Acme", None, "lower-case letters"),
    ("9lives", None, "starting with a letter"),
    ("acme", ["attack", "sampler"], "unknown kind(s) sampler; choose from model, dataset"),
    ("acme", [], "(none given)"),
])
def test_bad_names_and_kinds_are_one_line_and_write_nothing(tmp_path, name, kinds, message):
    with pytest.raises(InputError) as err:
        new_plugin(name, tmp_path, kinds=kinds)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert list(tmp_path.iterdir()) == []


def test_an_existing_folder_is_refused_and_left_alone(tmp_path):
    (tmp_path / "mixzoo-plugin-acme").mkdir()
    (tmp_path / "mixzoo-plugin-acme" / "mine.txt").write_text("keep")
    with pytest.raises(InputError, match="already exists"):
        new_plugin("mixzoo-plugin-acme", tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["mixzoo-plugin-acme"]
    assert (tmp_path / "mixzoo-plugin-acme" / "mine.txt").read_text() == "keep"


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_scaffolded_tests_pass(tmp_path):
    folder = new_plugin("acme", tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder / "src"), os.environ.get("PYTHONPATH", "")]),
           "MIXZOO_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(folder / "tests")],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert f"{len(KINDS) + 1} passed" in proc.stdout


def test_the_page_shows_the_scaffolded_files():
    """docs/tutorials/plugins.md includes the files of examples/mixzoo-plugin-example, which are new_plugin's."""
    root = Path(__file__).resolve().parents[2]
    example = root / "examples" / "mixzoo-plugin-example"
    assert {str(p.relative_to(example)) for p in example.rglob("*") if p.is_file()} == set(render("example"))
    for rel, text in render("example").items():
        assert (example / rel).read_text() == text, (f"{rel} is stale: rm -r {example} && python -c"
                                                         " \"from mixzoo.scaffold import new_plugin;"
                                                         " new_plugin('example', 'examples')\"")
