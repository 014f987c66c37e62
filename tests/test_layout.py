"""The package layout shows the architecture, checked from the import statements themselves (the AST of every
module of ``mixzoo`` and of the built-in plugins ``mixzoo_plugins``), never from strings in the source.

Every ``import`` and ``from ... import`` counts: at module level, inside functions (a lazy import is still a
dependency, only a later one) and under ``if TYPE_CHECKING`` (a type a module names belongs to its design).

1. The library knows no method, model family or plugin: core/, zoo/, attacks/, evaluation/, certify/, training/,
   share/ and cli/ import no mixing method (``mixzoo.methods.<name>``; the interface, ``mixzoo.methods`` and
   ``mixzoo.methods.base``, is allowed), no plugin module (``mixzoo_plugins.*``, which holds the built-in model
   families, datasets and methods' registration) and no third-party model family (a network definition module such
   as ``timm.models.resnetv2``). Methods, models and datasets reach the library through plugin hooks only.
2. Layers, lowest first: core, zoo, attacks, training, methods, certify, evaluation, share, cli; no import goes
   up a layer, so the packages form a DAG (``mixzoo/__init__`` re-exports on top and ``mixzoo_plugins`` sits above all).
3. No import cycle among modules, at module level: the graph whose nodes are the modules of ``mixzoo`` and
   ``mixzoo_plugins`` and whose edges are the imports above is acyclic. This is stricter than 2 (a cycle inside a
   package passes 2) and it holds: every module can be read, imported and tested after the modules it imports.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = {"mixzoo": REPO / "mixzoo", "mixzoo_plugins": REPO / "plugins"}
LAYERS = ["core", "zoo", "attacks", "training", "methods", "certify", "evaluation", "share", "scaffold", "cli"]
LIBRARY = ("core", "zoo", "attacks", "evaluation", "certify", "training", "share", "cli")
METHOD_INTERFACE = {"mixzoo.methods", "mixzoo.methods.base"}
MODEL_FAMILY_MODULES = ("timm.models.", "torchvision.models", "robustbench.model_zoo.architectures")



def _module_name(package: str, root: Path, path: Path) -> str:
    parts = (package, *path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: dict[str, Path] = {_module_name(pkg, root, p): p for pkg, root in PACKAGES.items() for p in root.rglob("*.py")}


def imported_names(source: str, module: str, is_package: bool = False,
                   modules_only: bool = False) -> list[tuple[str, int]]:
    """Every name ``source`` (the code of ``module``) imports, anywhere in it, as absolute dotted names with their
    line numbers: ``from a.b import c`` gives ``a.b.c`` and ``a.b`` (the deepest existing module is chosen later);
    with ``modules_only`` just ``a.b``, the module the statement names (for packages not read here)."""
    here = module.split(".") if is_package else module.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here[:len(here) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            if not modules_only:
                found += [(f"{base}.{alias.name}", node.lineno) for alias in node.names]
            found.append((base, node.lineno))
    return found


def _own_module(name: str) -> str | None:
    """The deepest module of mixzoo or mixzoo_plugins that ``name`` lies in, or None for other packages."""
    if name.split(".")[0] not in PACKAGES:
        return None
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports(module: str) -> dict[str, int]:
    """The modules of mixzoo and mixzoo_plugins that ``module`` imports -> the first line importing each."""
    path = MODULES[module]
    out: dict[str, int] = {}
    for name, line in imported_names(path.read_text(), module, path.name == "__init__.py"):
        target = _own_module(name)
        if target is not None and target != module:
            out.setdefault(target, line)
    return out


GRAPH = {m: imports(m) for m in MODULES}


def _place(module: str) -> str:
    path = MODULES[module]
    return f"{path.relative_to(REPO)}"


def _library(module: str) -> bool:
    parts = module.split(".")
    return parts[0] == "mixzoo" and len(parts) > 1 and parts[1] in LIBRARY


def _forbidden(target: str) -> bool:
    return target.startswith("mixzoo_plugins") or (
        target.startswith("mixzoo.methods.") and target not in METHOD_INTERFACE)


def violations() -> list[tuple[str, str, str]]:
    """(importer, imported, "file:line") for every import rule 1 forbids."""
    bad = []
    for module in filter(_library, MODULES):
        for target, line in GRAPH[module].items():
            if _forbidden(target):
                bad.append((module, target, f"{_place(module)}:{line}"))
        path = MODULES[module]
        for name, line in imported_names(path.read_text(), module, path.name == "__init__.py", modules_only=True):
            if name.startswith(MODEL_FAMILY_MODULES):
                bad.append((module, name, f"{_place(module)}:{line}"))
    return sorted(set(bad))


def test_library_imports_no_method_model_family_or_plugin():
    found = violations()
    assert not found, "\n".join(f"{where}: {a} imports {b}" for a, b, where in found)



def _layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "mixzoo" or len(parts) < 2 or parts[1] == "deprecated":
        return None  # the package facade (mixzoo/__init__), the shims and the plugins sit above every layer
    return LAYERS.index(parts[1])


def test_every_module_is_in_a_layer():
    assert {m.split(".")[1] for m in MODULES if m.startswith("mixzoo.")} <= {*LAYERS, "deprecated"}


def test_no_import_goes_up_a_layer():
    bad = [f"{_place(a)}:{line}: {a} -> {b}" for a, deps in GRAPH.items() if _layer(a) is not None
           for b, line in deps.items() if _layer(b) is None or _layer(b) > _layer(a)]
    assert not bad, "\n".join(bad)


def cycles(graph: dict[str, dict[str, int]] | dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan), or a node importing itself."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_among_modules():
    found = cycles(GRAPH)
    assert not found, "\n".join(" <-> ".join(c) for c in found)


def test_the_checks_can_fail():
    """Function-level and TYPE_CHECKING imports are seen, relative imports resolve, and a cycle is found."""
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from mixzoo.core.registry import ModelSpec\n"
              "def f():\n    from mixzoo.methods.linear import Linear\n    from ..attacks import pgd\n")
    names = {n for n, _ in imported_names(source, "mixzoo.evaluation.bench")}
    assert {"mixzoo.core.registry.ModelSpec", "mixzoo.methods.linear.Linear", "mixzoo.attacks.pgd"} <= names
    assert _own_module("mixzoo.methods.linear.Linear") == "mixzoo.methods.linear"
    assert _forbidden("mixzoo.methods.linear") and _forbidden("mixzoo_plugins.zoo_arch")
    assert not _forbidden("mixzoo.methods") and not _forbidden("mixzoo.methods.base")
    assert ("timm.models.resnetv2", 1) in imported_names("from timm.models.resnetv2 import ResNetV2", "mixzoo.x",
                                                         modules_only=True)
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert ("timm.models.resnetv2", 1) in imported_names("from timm.models.resnetv2 import ResNetV2", "mixzoo.x",
                                                         modules_only=True)
    assert cycles({"a": {"b"}, "b": set()}) == []
    assert "mixzoo.core.hookspecs" in GRAPH["mixzoo.core.plugins.manager"]


def _package(module: str) -> str:
    """The package a module belongs to for rule 4: ``mixzoo.<sub>`` (``mixzoo`` for top-level modules) or
    ``mixzoo_plugins``."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "mixzoo" and len(parts) > 2 else parts[0]


def private_imports(extra: dict[str, str] | None = None) -> list[str]:
    """4. No private name crosses a package: ``from a.b import _name`` only inside a.b's own package (a leading
    underscore says "this package's business"; what other packages use is public, named and documented).
    ``extra``: more modules (name -> source) to check, for the test that the check can fail."""
    sources = {m: (p.read_text(), p.name == "__init__.py", _place(m)) for m, p in MODULES.items()}
    sources.update({m: (text, False, m) for m, text in (extra or {}).items()})
    bad = []
    for module, (text, is_package, where) in sources.items():
        for name, line in imported_names(text, module, is_package):
            owner, _, leaf = name.rpartition(".")
            if not leaf.startswith("_") or leaf.startswith("__") or _own_module(owner) != owner:
                continue
            if _package(owner) != _package(module):
                bad.append(f"{where}:{line} imports {name}")
    return sorted(set(bad))


def test_no_private_name_crosses_a_package():
    assert not private_imports(), private_imports()


def test_the_private_name_check_can_fail():
    found = private_imports({"mixzoo.evaluation.zz_fake": "from mixzoo.core.card import _secret, MixCard\n",
                             "mixzoo.core.zz_same": "from mixzoo.core.card import _inside\n"})
    assert found == ["mixzoo.evaluation.zz_fake:1 imports mixzoo.core.card._secret"]
