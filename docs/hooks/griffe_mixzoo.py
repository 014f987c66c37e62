"""Griffe extension for the API reference: mixzoo's docstrings are prose with Sphinx cross-reference roles
(``:class:`~mixzoo.core.card.MixCard```, ``:func:`fit```) and no field lists. At load time each role becomes inline
code (```MixCard```), and a function or class whose docstring lists no parameters gets ``:param NAME:`` fields
from its signature, so that mkdocstrings (``docstring_style: sphinx``) renders a parameter table with each
parameter's type and default; a parameter's description is the sentence of the docstring that names it in double
backticks, when there is one."""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|data|attr|exc|obj|const|ref):`(~?)([^`]+)`")
SKIP = {"self", "cls"}


def _role(m: re.Match[str]) -> str:
    target = m.group(2).strip()
    if "<" in target and target.endswith(">"):  # :func:`title <target>`
        return f"`{target.split('<', 1)[0].strip()}`"
    if m.group(1) or target.startswith("."):
        target = target.lstrip(".").rsplit(".", 1)[-1] if m.group(1) else target.lstrip(".")
    return f"`{target}`"


def plain_roles(text: str) -> str:
    """``text`` with every Sphinx role written as inline code."""
    return ROLE.sub(_role, text)


def _description(text: str, name: str) -> str:
    """The first clause of ``text`` (between ``;`` / sentence ends) that begins with ``name`` in double backticks;
    else empty."""
    flat = " ".join(text.split())
    for clause in re.split(r"(?<=[;.])\s+(?=[A-Z`(:])|;\s+", flat):
        if clause.lstrip("(").startswith(f"``{name}``"):  # a clause about the parameter, not one naming it
            return clause.strip().rstrip(";")
    return ""


class MixzooDocstrings(griffe.Extension):
    """Roles to inline code; parameter fields from the signature where the docstring has none."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:  # noqa: ARG002
        if obj.docstring is None:
            return
        text = plain_roles(obj.docstring.value)
        params = None
        if isinstance(obj, griffe.Function):
            params = obj.parameters
        elif isinstance(obj, griffe.Class) and "__init__" in obj.members:
            init = obj.members["__init__"]
            params = getattr(init, "parameters", None)
        if params is not None and ":param " not in text:
            fields = []
            for p in params:
                if p.name in SKIP or p.name.startswith("_") or p.kind.value in ("variadic positional",):
                    continue
                name = p.name if p.kind.value != "variadic keyword" else p.name
                desc = _description(text, name)
                fields.append(f":param {name}: {desc}")
            if fields:
                text = text.rstrip() + "\n\n" + "\n".join(fields)
        obj.docstring.value = text
