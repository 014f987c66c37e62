"""The public surface (:mod:`mixzoo.core.surface`) as a flat snapshot of names and signatures, and its check.

    python tests/public_api.py            # what changed against tests/api_snapshot.json, and what CHANGELOG misses
    python tests/public_api.py --update   # write the live surface to tests/api_snapshot.json

Every public name becomes one entry ``qualified name -> description``: a function its signature, a class its bases
(and ``dataclass`` when it is one), each public method or property of a class its signature, each dataclass field
its type and default, a constant its value, a hook its signature and whether it is ``firstresult``, a deprecated
module name its new place. A change (an entry added, removed or described differently) is recorded when the
"## Unreleased" section of CHANGELOG.md names it in backticks: the qualified name or a dotted tail of it with at
least two parts (``MixingMethod.fit``, ``mixzoo.plugins``), optionally followed by ``(...)``.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = Path(__file__).resolve().parent / "api_snapshot.json"
CHANGELOG = ROOT / "CHANGELOG.md"


def _signature(obj: Any) -> str:
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(...)"


def _names(module: Any, declared: tuple[str, ...] | None) -> list[str]:
    return sorted(declared if declared is not None else module.__all__)


def _class_entries(qualified: str, cls: type) -> dict[str, str]:
    bases = ", ".join(f"{b.__module__}.{b.__qualname__}" for b in cls.__bases__ if b is not object)
    out = {qualified: f"class({bases})" + (" dataclass" if dataclasses.is_dataclass(cls) else "")}
    fields = {f.name: f for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else {}
    for name, f in fields.items():
        if name.startswith("_"):
            continue
        default = "" if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING else (
            f" = {f.default!r}" if f.default is not dataclasses.MISSING else " = <factory>")
        out[f"{qualified}.{name}"] = f"field: {f.type}{default}"
    for name, member in sorted(vars(cls).items()):
        if name.startswith("_") and name != "__init__" or name in fields:
            continue
        if name == "__init__" and fields:
            continue  # a dataclass's __init__ is its fields
        if isinstance(member, property):
            out[f"{qualified}.{name}"] = "property"
        elif isinstance(member, classmethod | staticmethod):
            out[f"{qualified}.{name}"] = f"{type(member).__name__}{_signature(member.__func__)}"
        elif inspect.isfunction(member):
            out[f"{qualified}.{name}"] = f"def{_signature(member)}"
        elif not callable(member):
            annotation = cls.__dict__.get("__annotations__", {}).get(name)
            out[f"{qualified}.{name}"] = f"attribute: {annotation}" if annotation else "attribute"
    return out


def _entries(module_name: str, name: str, obj: Any) -> dict[str, str]:
    qualified = f"{module_name}.{name}"
    if inspect.isclass(obj):
        return _class_entries(qualified, obj)
    if inspect.ismodule(obj):
        return {qualified: f"module {obj.__name__}"}
    if module_name == "mixzoo.core.hookspecs":
        opts = getattr(obj, "mixzoo_spec", {}) or {}
        return {qualified: f"hook{_signature(obj)}" + (" firstresult" if opts.get("firstresult") else "")}
    if callable(obj):
        return {qualified: f"def{_signature(obj)}"}
    return {qualified: f"value {obj!r}"}


def live_surface() -> dict[str, str]:
    """The public surface of the installed mixzoo, as the flat ``{qualified name: description}`` snapshot."""
    from mixzoo.core.surface import PUBLIC_SURFACE
    from mixzoo.deprecated import modules as moved

    out: dict[str, str] = {}
    for module_name, declared in PUBLIC_SURFACE.items():
        module = importlib.import_module(module_name)
        for name in _names(module, declared):
            obj = getattr(module, name)
            if isinstance(obj, moved.CallableMovedModule):  # `mixzoo.calibrate` after the old module was imported
                obj = getattr(importlib.import_module(moved.MOVED_MODULES[obj.__name__]), moved.CALLABLE[obj.__name__])
            out.update(_entries(module_name, name, obj))
    for old, new in moved.MOVED_MODULES.items():
        out[old] = f"deprecated module: moved to {new}, removed in {moved.REMOVED_IN}"
    return dict(sorted(out.items()))


def differences(old: dict[str, str], new: dict[str, str]) -> dict[str, str]:
    """``{qualified name: "added" | "removed" | "changed: OLD -> NEW"}``."""
    out: dict[str, str] = {}
    for key in sorted(set(old) | set(new)):
        if key not in old:
            out[key] = "added"
        elif key not in new:
            out[key] = "removed"
        elif old[key] != new[key]:
            out[key] = f"changed: {old[key]} -> {new[key]}"
    return out


def unreleased(changelog: str) -> str:
    """The text of the "## Unreleased" section."""
    match = re.search(r"^## Unreleased\s*$(.*?)(?=^## |\Z)", changelog, re.M | re.S)
    return match.group(1) if match else ""


def mentioned(qualified: str, section: str) -> bool:
    """Whether ``section`` names ``qualified`` in backticks (the whole name or a dotted tail of two parts or more)."""
    parts = qualified.split(".")
    tails = {".".join(parts[i:]) for i in range(len(parts) - 1)}
    tokens = {re.sub(r"\(.*\)$", "", t.strip()) for t in re.findall(r"`([^`\n]+)`", section)}
    return bool(tails & tokens)


def unrecorded(old: dict[str, str], new: dict[str, str], changelog: str) -> dict[str, str]:
    """The differences the Unreleased section of ``changelog`` does not name."""
    section = unreleased(changelog)
    return {k: v for k, v in differences(old, new).items() if not mentioned(k, section)}


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(ROOT))
    live = live_surface()
    if "--update" in argv:
        SNAPSHOT.write_text(json.dumps(live, indent=1) + "\n")
        print(f"wrote {len(live)} entries to {SNAPSHOT.relative_to(ROOT)}")
        return 0
    old = json.loads(SNAPSHOT.read_text())
    diff = differences(old, live)
    missing = unrecorded(old, live, CHANGELOG.read_text())
    for key, what in diff.items():
        print(f"{'NOT IN CHANGELOG ' if key in missing else ''}{key}: {what}")
    print(f"{len(diff)} change(s), {len(missing)} not recorded in CHANGELOG.md's Unreleased section")
    return 1 if missing else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
