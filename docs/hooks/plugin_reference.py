"""The plugin reference pages, generated from the code: ``python docs/hooks/plugin_reference.py`` writes them and
``tests/test_plugin_reference.py`` fails when a committed page differs from what this prints.

* ``docs/reference/hooks.md``: every hookspec of :mod:`mixzoo.core.hookspecs` with its arguments, return type,
  whether it collects or resolves (``firstresult``) and its docstring.
* ``docs/reference/model-spec.md``: the fields of :class:`mixzoo.core.model_spec.ModelSpec` (what a
  ``registry.toml`` table or a ``mixzoo_model_specs`` dict holds) with type, default and whether required
  (``mixzoo.core.registry``'s required fields), and what each means.
* ``docs/reference/plugin-api.md``: ``Attack``, ``Component``, ``AttackResult``, ``OptionSpec``, the method contract
  (``MixingMethod``), ``FitRequest`` and ``FitResult``, each with a table of its fields or members.

A field's meaning is the comment above or beside it in its class (else :data:`SPEC_NOTES` for the model spec's
uncommented fields); a member's is its docstring's first sentence.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

# what the model spec's fields that carry no comment in mixzoo/core/model_spec.py mean
SPEC_NOTES = {
    "name": "the name users load it by (`mixzoo list`); a plugin's entry gives it as a key of the dict",
    "role": "`accurate` (an ABC) or `robust` (an RBC)",
    "dataset": "the data set it classifies (a `mixzoo_datasets` name, e.g. `digits`)",
    "num_classes": "number of classes (at least 2)",
    "input_size": "input shape `[C, H, W]`",
    "source": "where it comes from: a table whose `kind` names the loader (`mixzoo_model_sources`); the rest is"
              " the loader's",
    "mean": "per-channel mean the network expects (mixzoo normalizes [0, 1] images with it)",
    "std": "per-channel standard deviation the network expects",
    "aliases": "other names it loads by",
    "threat_model": "`Linf` or `L2`: the threat model an RBC was trained against",
    "epsilon": "the radius an RBC was trained and is evaluated at",
    "reported": "published figures (e.g. `clean`, `robust`), shown by `mixzoo list` and `info`",
    "citation": "where it was published",
    "license": "the weights' license",
    "sha256": "checksum of the weights file, checked on load",
    "description": "one line for `mixzoo list`",
    "plugin": "set by mixzoo: the plugin that provided it (`registry.toml` for the file)",
}


def _md(text: str) -> str:
    """Sphinx markup as Markdown: ``:class:`~a.B``` -> `B`, double backquotes -> single."""
    text = re.sub(r":\w+:`~([^`]+)`", lambda m: f"`{m.group(1).split('.')[-1]}`", text)
    return re.sub(r":\w+:`([^`]+)`", r"`\1`", text).replace("``", "`")


def _cell(text: Any) -> str:
    """Prose for a table cell: one line, Markdown, pipes outside code spans escaped."""
    parts = _md(" ".join(str(text).split())).split("`")
    return "`".join(p if i % 2 else p.replace("|", "\\|") for i, p in enumerate(parts))


def _code(text: Any) -> str:
    """A code span for a table cell (Python-Markdown splits no cell at a pipe inside one)."""
    return f"`{' '.join(str(text).split())}`"


def _first_sentence(doc: str | None) -> str:
    text = " ".join((doc or "").split())
    return (re.split(r"(?<=[.;])\s", text, maxsplit=1)[0] if text else "").rstrip(";")


def _ann(annotation: Any) -> str:
    if annotation is inspect.Parameter.empty:
        return ""
    return annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))


def field_comments(cls: type) -> dict[str, str]:
    """Each annotated attribute of ``cls``'s body -> the comment on the lines right above it or beside it."""
    lines, _ = inspect.getsourcelines(cls)
    body = next(n for n in ast.parse(textwrap.dedent("".join(lines))).body if isinstance(n, ast.ClassDef))
    out: dict[str, str] = {}
    for node in body.body:
        if isinstance(node, ast.AnnAssign | ast.Assign):
            target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0]
            if not isinstance(target, ast.Name):
                continue
            above, i = [], node.lineno - 2
            while i >= 0 and lines[i].strip().startswith("#"):
                above.insert(0, lines[i].strip().lstrip("# "))
                i -= 1
            beside = lines[node.end_lineno - 1].partition("  # ")[2].strip()
            note = " ".join(above + ([beside] if beside else []))
            if note:
                out[target.id] = note
    return out


def _default(fld: dataclasses.Field) -> str:
    if fld.default is not dataclasses.MISSING:
        return f"`{fld.default!r}`"
    if fld.default_factory is not dataclasses.MISSING:
        return f"`{fld.default_factory()!r}`"
    return "required"


def dataclass_table(cls: type, notes: dict[str, str] | None = None) -> str:
    """A table of ``cls``'s dataclass fields: name, type, default, meaning."""
    comments = {**field_comments(cls), **(notes or {})}
    rows = [f"| `{f.name}` | {_code(_ann(f.type))} | {_default(f)} | {_cell(comments.get(f.name, ''))} |"
            for f in dataclasses.fields(cls)]
    return "| field | type | default | meaning |\n|---|---|---|---|\n" + "\n".join(rows)


def members_table(cls: type, names: list[str]) -> str:
    """A table of ``cls``'s members ``names``: signature (methods) or type and default (attributes), meaning."""
    comments = field_comments(cls)
    rows = []
    for name in names:
        value = inspect.getattr_static(cls, name)
        if callable(value) or isinstance(value, classmethod | staticmethod | property):
            fn = value.__func__ if isinstance(value, classmethod | staticmethod) else value
            params = [p for p in inspect.signature(fn).parameters.values() if p.name not in ("self", "cls")]
            shown = ", ".join(p.name + (f": {_ann(p.annotation)}" if p.annotation is not p.empty else "")
                              + (f" = {p.default!r}" if p.default is not p.empty else "") for p in params)
            ret = _ann(inspect.signature(fn).return_annotation)
            doc = _cell(_first_sentence(fn.__doc__))
            rows.append(f"| {_code(f'{name}({shown})')} | {_code(ret)} | method | {doc} |")
        else:
            ann = cls.__annotations__.get(name, "") if name in getattr(cls, "__annotations__", {}) else ""
            shown = repr(value) if len(repr(value)) <= 40 else "see below" if name == "options_spec" else "..."
            rows.append(f"| `{name}` | {_code(_ann(ann))} | {_code(shown)} | {_cell(comments.get(name, ''))} |")
    return "| member | type / returns | default | meaning |\n|---|---|---|---|\n" + "\n".join(rows)


def hooks_page() -> str:
    from mixzoo.core import hookspecs

    intro = [_md(" ".join(part.split())) for part in hookspecs.__doc__.split("\n\n")[:3]]
    out = ["# Plugin hooks", "", *(line for part in intro for line in (part, "")),
           "Implement any of them with `from mixzoo import hookimpl`; [Writing a plugin](../tutorials/plugins.md)"
           " builds a package that implements one of each kind. This page is generated from"
           " `mixzoo/core/hookspecs.py`.", ""]
    specs = [(n, f) for n, f in inspect.getmembers(hookspecs, inspect.isfunction) if n.startswith("mixzoo_")]
    for name, fn in sorted(specs, key=lambda item: item[1].__code__.co_firstlineno):
        opts = getattr(fn, "mixzoo_spec", {}) or {}
        sig = inspect.signature(fn)
        kind = "resolves: the first non-`None` answer wins" if opts.get("firstresult") else \
            "collects: every plugin's answer is merged"
        args = ", ".join(f"{p.name}: {_ann(p.annotation)}" for p in sig.parameters.values())
        out += [f"## `{name}`", "", "<!-- not run: the hook's signature -->", "```python", f"def {name}({args}) -> {_ann(sig.return_annotation)}", "```", "",
                f"*{kind}.*", ""]
        if sig.parameters:
            out += ["| argument | type |", "|---|---|"]
            out += [f"| `{p.name}` | {_code(_ann(p.annotation))} |" for p in sig.parameters.values()]
            out.append("")
        out += [f"**Returns** {_code(_ann(sig.return_annotation))}.", "", _md(inspect.cleandoc(fn.__doc__ or "")), ""]
    return "\n".join(out)


def model_spec_page() -> str:
    from mixzoo.core import registry
    from mixzoo.core.model_spec import ModelSpec

    required = set(registry._REQUIRED) | {"name"}
    notes = {**SPEC_NOTES, **field_comments(ModelSpec)}
    rows = [f"| `{f.name}` | {_code(_ann(f.type))} | {'**yes**' if f.name in required else 'no'} |"
            f" {'' if f.name in required else _default(f)} | {_cell(notes.get(f.name, ''))} |"
            for f in dataclasses.fields(ModelSpec)]
    return "\n".join([
        "# Model spec fields", "",
        "A model is a registry entry: a table of `registry.toml` (`[models.NAME]`), a file named by"
        " `$MIXZOO_REGISTRY`, or a dict a plugin's `mixzoo_model_specs` returns (the same fields plus `name`),"
        " validated the same way. Generated from `mixzoo/core/model_spec.py` (the fields) and"
        " `mixzoo/core/registry.py` (which are required).", "",
        "| field | type | required | default | meaning |", "|---|---|---|---|---|", *rows, ""])


def plugin_api_page() -> str:
    from mixzoo.attacks import Attack, AttackResult, Component
    from mixzoo.core.options import OptionSpec
    from mixzoo.methods import FitRequest, FitResult, MixingMethod
    from mixzoo.methods.base import _REQUIRED

    contract = [n for n in vars(MixingMethod) if not n.startswith("_")]
    sections = [
        ("`Attack` (`mixzoo.attacks.Attack`)", Attack.__doc__,
         members_table(Attack, ["name", "options_spec", "code_version", "components", "run", "check_options"])),
        ("`Component` (`mixzoo.attacks.Component`)", Component.__doc__, dataclass_table(Component)),
        ("`AttackResult` (`mixzoo.attacks.AttackResult`)", AttackResult.__doc__, dataclass_table(AttackResult)),
        ("`OptionSpec` (`mixzoo.core.options.OptionSpec`)", OptionSpec.__doc__, dataclass_table(OptionSpec)),
        ("The method contract: `MixingMethod` (`mixzoo.methods.MixingMethod`)",
         f"{MixingMethod.__doc__} Required: {', '.join(f'`{k}`' for k in _REQUIRED)}; every other member has the"
         " default shown.", members_table(MixingMethod, contract)),
        ("`FitRequest` (`mixzoo.methods.FitRequest`)", FitRequest.__doc__, dataclass_table(FitRequest)),
        ("`FitResult` (`mixzoo.methods.FitResult`)", FitResult.__doc__, dataclass_table(FitResult)),
    ]
    out = ["# Plugin API", "", "The classes a plugin subclasses or fills in, generated from their code."
           " [Writing a plugin](../tutorials/plugins.md) uses each.", ""]
    for title, doc, table in sections:
        out += [f"## {title}", "", _md(" ".join(inspect.cleandoc(doc or "").split())), "", table, ""]
    return "\n".join(out)


def pages() -> dict[Path, str]:
    """Each generated page's path -> its text."""
    ref = ROOT / "docs" / "reference"
    return {ref / "hooks.md": hooks_page(), ref / "model-spec.md": model_spec_page(),
            ref / "plugin-api.md": plugin_api_page()}


if __name__ == "__main__":
    for path, text in pages().items():
        path.write_text(text)
        print(f"wrote {path.relative_to(ROOT)}", file=sys.stderr)
