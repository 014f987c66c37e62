"""What the plugin docs promise matches the code."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from mixzoo.core import hookspecs
from mixzoo.methods.mixednuts.calibrate import CalibrationProblem, SearchResult

# the plugin rules page (docs/reference/plugin-rules.md): what plugin authors read
CONTRIBUTING = (Path(__file__).resolve().parent.parent / "docs" / "reference" / "plugin-rules.md").read_text()


def test_model_sources_hook_asks_for_normalized_input_as_the_wrapper_and_contributing_do():
    doc = " ".join(hookspecs.mixzoo_model_sources.__doc__.split())
    assert "NORMALIZED input" in doc and "normalization inside it" not in doc
    assert "NORMALIZED input" in CONTRIBUTING


def test_the_packaging_snippet_ships_weights():
    snippets = re.findall(r"```toml\n(.*?)```", CONTRIBUTING, flags=re.S)
    entry = next(s for s in snippets if "[project.entry-points.mixzoo]" in s)
    assert "[tool.setuptools.package-data]" in entry and ".safetensors" in entry


def test_the_optimizer_interface_is_documented_with_real_names():
    for method in ("evaluate", "best_index", "result"):
        assert callable(getattr(CalibrationProblem, method))
        assert f"problem.{method}(" in CONTRIBUTING
    for fld in dataclasses.fields(SearchResult):
        assert f"`{fld.name}`" in CONTRIBUTING, fld.name


def test_the_reported_keys_that_mixzoo_list_shows_are_documented():
    from mixzoo import cli

    source = Path(cli.__file__).read_text()
    for key in re.findall(r'rep\.get\("(\w+)"', source):
        assert f"`{key}`" in CONTRIBUTING, key
