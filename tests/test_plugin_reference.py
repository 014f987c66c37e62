"""The generated plugin reference pages (docs/hooks/plugin_reference.py) are what the code says today: every hookspec
with its arguments and return type, every model-spec field with type, default and whether required, and the plugin
API's tables."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _generator():
    spec = importlib.util.spec_from_file_location("plugin_reference", ROOT / "docs" / "hooks" / "plugin_reference.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["plugin_reference"] = module
    spec.loader.exec_module(module)
    return module


def test_the_committed_pages_are_the_generated_ones():
    for path, text in _generator().pages().items():
        assert path.read_text() == text, f"{path.relative_to(ROOT)} is stale: python docs/hooks/plugin_reference.py"


def test_every_hook_and_every_spec_field_is_there_with_its_types():
    from mixzoo.core import hookspecs
    from mixzoo.core.model_spec import ModelSpec

    gen = _generator()
    hooks = gen.hooks_page()
    for name, fn in inspect.getmembers(hookspecs, inspect.isfunction):
        if name.startswith("mixzoo_"):
            assert f"## `{name}`" in hooks and f"**Returns** `{fn.__annotations__['return']}`" in hooks, name
    assert hooks.count("A plugin is a module") == 1
    spec = gen.model_spec_page()
    for fld in dataclasses.fields(ModelSpec):
        row = next(line for line in spec.splitlines() if line.startswith(f"| `{fld.name}` |"))
        assert f"`{fld.type}`" in row and row.rstrip(" |").split("|")[-1].strip(), row  # a type and a meaning
    assert "| `source` | `Mapping[str, Any]` | **yes** |" in spec
    assert "| `mean` | `tuple[float, ...]` | no | `(0.0,)`" in spec
    assert set(gen.SPEC_NOTES) <= {f.name for f in dataclasses.fields(ModelSpec)}


def test_the_plugin_api_page_has_each_class_and_the_required_method_members():
    page = _generator().plugin_api_page()
    for title in ("`Attack`", "`Component`", "`AttackResult`", "`OptionSpec`", "`MixingMethod`", "`FitRequest`"):
        assert f"## {title}" in page or f": {title}" in page, title
    for member in ("validate(params", "build(abc", "fit(request", "components(model"):
        assert f"| `{member}" in page, member
