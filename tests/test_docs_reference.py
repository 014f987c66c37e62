"""The docs site's reference pages: the CLI page covers the plugins' commands and every command's examples; the
API page renders docstrings (Sphinx roles as code, parameter tables) and documents the settings and share API."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "docs" / "hooks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_cli_reference_has_plugin_commands_and_examples():
    from mixzoo.cli import app  # noqa: F401 - the command tree the hook reads

    text = _load("cli_reference").cli_markdown()
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    names = [s.split("`")[1] for s in sections]
    assert "mixzoo check" in names and "mixzoo transfer-params" in names
    for section in sections:
        assert "Examples:" in section and "```bash\nmixzoo " in section, section.splitlines()[0]


def test_method_option_tables_give_defaults():
    text = _load("cli_reference").method_options_markdown("mixednuts")
    row = next(line for line in text.splitlines() if line.startswith("| `--beta`"))
    assert "`0.985`" in row


def test_roles_become_code_and_parameters_get_fields():
    griffe = pytest.importorskip("griffe")
    ext = _load("griffe_mixzoo")
    assert ext.plain_roles("see :class:`~mixzoo.core.card.MixCard` and :func:`mixzoo.methods.fit`") == \
        "see `MixCard` and `mixzoo.methods.fit`"
    assert ext.plain_roles(":meth:`~.calibrate.Grid.from_record`") == "`from_record`"
    module = griffe.load("mixzoo.evaluation.stats", extensions=griffe.load_extensions(ext.MixzooDocstrings),
                         search_paths=[str(ROOT)])
    assert ":func:" not in module.docstring.value and "`wilson_interval`" in module.docstring.value
    fn = module["wilson_interval"]
    parsed = fn.docstring.parse("sphinx")
    params = [s for s in parsed if s.kind.value == "parameters"]
    assert params and [p.name for p in params[0].value] == [p.name for p in fn.parameters]


def test_api_page_documents_the_settings_and_the_share_api():
    text = (ROOT / "docs" / "reference" / "api.md").read_text()
    for name in ("mixzoo.core.settings.RunSettings", "mixzoo.evaluation.bench.MatchSettings",
                 "mixzoo.evaluation.bench.CurveSettings", "mixzoo.share.export.export", "mixzoo.share.push.push"):
        assert f"::: {name}" in text
    mkdocs = (ROOT / "mkdocs.yml").read_text()
    assert "docs/hooks/griffe_mixzoo.py:MixzooDocstrings" in mkdocs


def test_readme_links_the_plugin_tutorial():
    text = (ROOT / "README.md").read_text()
    assert "[writing a plugin](docs/tutorials/plugins.md)" in text
