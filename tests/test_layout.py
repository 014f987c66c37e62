"""The package layout shows the architecture: data flows one way (issue 25, section 4).

Every import between mixzoo modules, at module level or inside a function (``TYPE_CHECKING`` blocks excepted, they
never run), goes from a higher layer to a lower one or within one layer, and no set of modules imports itself in a
cycle. Layers, lowest first: core, zoo, attacks, training, methods, certify, evaluation, share, cli (``mixzoo/__init__``
re-exports, on top).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "mixzoo"
LAYERS = ["core", "zoo", "attacks", "training", "methods", "certify", "evaluation", "share", "cli"]


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imports(path: Path) -> set[str]:
    """Modules of mixzoo that ``path`` imports (the deepest existing module of each name)."""
    found: set[str] = set()
    tree = ast.parse(path.read_text())
    skip = {id(n) for top in ast.walk(tree) if _type_checking(top) for n in ast.walk(top)}
    here = _module(path)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            base = node.module if node.level == 0 else ".".join(here.split(".")[:-node.level] + [node.module])
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for name in names:
            if name.split(".")[0] != "mixzoo":
                continue
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name and name != here:
                found.add(name)
    return found


MODULES = {_module(p): p for p in ROOT.rglob("*.py")}


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if len(parts) < 2 or parts[1].startswith("_"):
        return None  # the package itself and its alias table
    return LAYERS.index(parts[1])


def graph() -> dict[str, set[str]]:
    return {m: imports(p) for m, p in MODULES.items() if _layer(m) is not None}


def test_every_module_is_in_a_layer():
    assert {m.split(".")[1] for m in MODULES if "." in m and not m.split(".")[1].startswith("_")} <= set(LAYERS)


def test_no_import_goes_up_a_layer():
    bad = [f"{a} -> {b}" for a, deps in graph().items() for b in deps
           if _layer(b) is None or _layer(b) > _layer(a)]
    assert not bad, bad


def test_no_import_cycle():
    g = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in g:
        if v not in index:
            visit(v)
    assert not cycles, cycles


def test_the_checks_can_fail():
    """The graph sees function-level imports (so a cycle hidden in a function counts) and skips TYPE_CHECKING."""
    src = ROOT / "core" / "plugins.py"
    assert "mixzoo.core.hookspecs" in imports(src)
    assert any(_layer(b) is not None for b in imports(ROOT / "evaluation" / "bench.py"))
