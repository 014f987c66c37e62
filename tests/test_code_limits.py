"""Functions stay small enough to read and to change: the AST of every module of ``mixzoo`` and of the built-in
plugins ``mixzoo_plugins`` is walked, and

1. no function takes more than :data:`MAX_PARAMETERS` parameters (``self`` / ``cls`` not counted). Functions that
   take settings take the settings object (:class:`mixzoo.core.settings.RunSettings`,
   :class:`mixzoo.core.record.RunRecord`, a method's request) rather than its fields one by one. A typer command
   function is exempt: its parameters are the command's options. So are the keyword-only options (after ``*``,
   each with a default) of a public module-level function (no leading underscore): an entry point's plain keyword
   form (``mmaa(model, x, y, *, eps=..., n_iter=...)``, as torchattacks and AutoAttack take options); its other
   parameters still count;
2. no function is longer than :data:`MAX_LINES` lines (from ``def`` to its last line, decorators excluded), typer
   commands included: a command is a thin layer over a library function;
3. no module is longer than :data:`MAX_MODULE_LINES` lines: a module has one job.

No function is excepted: one over a limit fails, named with its size.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ROOTS = (REPO / "mixzoo", REPO / "plugins")
MAX_PARAMETERS = 10
MAX_LINES = 80
MAX_MODULE_LINES = 400


def _is_command(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A typer command: decorated with ``@command``, ``@app.command(...)`` or another ``*.command`` decorator."""
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name == "command":
            return True
    return False


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef, public: bool = False) -> int:
    """The parameters that count (``self`` / ``cls`` not; with ``public``, keyword-only ones with defaults not)."""
    args = node.args
    options = sum(d is not None for d in args.kw_defaults) if public and not node.name.startswith("_") else 0
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    return len(names) - options - (1 if names and names[0] in ("self", "cls") else 0)


def _functions() -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    found = []
    for root in ROOTS:
        for path in sorted(root.rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    node.module_level = node in tree.body  # type: ignore[attr-defined]
                    found.append((f"{path.relative_to(REPO)}:{node.lineno} {node.name}", node))
    return found


FUNCTIONS = _functions()


def test_the_walk_sees_the_package():
    names = {where.split()[-1] for where, _ in FUNCTIONS}
    assert {"evaluate", "bench", "lookup"} <= names and len(FUNCTIONS) > 500


def _key(where: str) -> str:
    return f"{where.split(':')[0]}::{where.split()[-1]}"


def _check(over: dict[str, str], what: str) -> None:
    assert not over, f"{what}: {sorted(over.values())}"


def _counted(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    return _parameters(node, public=getattr(node, "module_level", False))


def test_no_function_takes_too_many_parameters():
    over = {_key(where): f"{where} ({_counted(node)})" for where, node in FUNCTIONS
            if _counted(node) > MAX_PARAMETERS and not _is_command(node)}
    _check(over, f"more than {MAX_PARAMETERS} parameters (pass the settings object instead)")


def test_only_public_keyword_options_are_exempt():
    def node(source: str) -> ast.FunctionDef:
        tree = ast.parse(source)
        tree.body[0].module_level = True
        return tree.body[0]

    options = ", ".join(f"o{i}=0" for i in range(12))
    assert _counted(node(f"def attack(model, x, y, settings=None, *, {options}): pass")) == 4
    assert _counted(node(f"def _plumbing(model, *, {options}): pass")) == 13  # private: every parameter counts
    assert _counted(node(f"def attack(model, *, {options.replace('=0', '')}): pass")) == 13  # required keywords
    assert _counted(node(f"def attack(model, {options}): pass")) == 13  # positional ones count
    assert _parameters(node(f"def attack(model, *, {options}): pass")) == 13  # a method or nested function
    public = {where.split()[-1] for where, n in FUNCTIONS if _counted(n) < _parameters(n)}
    assert {"mmaa", "apgd_ce", "apgd_t", "min_margin_square"} <= public


def test_no_function_is_too_long():
    over = {_key(where): f"{where} ({node.end_lineno - node.lineno + 1})" for where, node in FUNCTIONS
            if node.end_lineno - node.lineno + 1 > MAX_LINES}
    _check(over, f"longer than {MAX_LINES} lines (split it into named steps)")


def test_the_command_rule_sees_commands():
    commands = {where.split()[-1] for where, node in FUNCTIONS if _is_command(node)}
    assert {"bench", "mix", "sanity", "transfer_params"} <= commands


def test_no_module_is_too_long():
    modules = [p for root in ROOTS for p in sorted(root.rglob("*.py"))]
    over = {str(p.relative_to(REPO)): f"{p.relative_to(REPO)} ({n})" for p in modules
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    _check(over, f"longer than {MAX_MODULE_LINES} lines (split it by concern)")
