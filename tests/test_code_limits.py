"""Functions stay small enough to read and to change: the AST of every module of ``mixzoo`` and of the built-in
plugins ``mixzoo_plugins`` is walked, and

1. no function takes more than :data:`MAX_PARAMETERS` parameters (``self`` / ``cls`` not counted). Functions that
   take settings take the settings object (:class:`mixzoo.core.settings.RunSettings`,
   :class:`mixzoo.core.record.RunRecord`, a method's request) rather than its fields one by one. A typer command
   function is exempt: its parameters are the command's options;
2. no function is longer than :data:`MAX_LINES` lines (from ``def`` to its last line, decorators excluded), typer
   commands included: a command is a thin layer over a library function.

The functions that were over a limit when the limits were set are listed (:data:`OVER_PARAMETERS`,
:data:`OVER_LINES`): the lists only shrink. A function not listed that goes over fails; a listed one that comes
under must leave its list.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ROOTS = (REPO / "mixzoo", REPO / "plugins")
MAX_PARAMETERS = 10
MAX_LINES = 80

# "path::function" of the functions over a limit when the limits were set: to be split, never to grow
OVER_PARAMETERS = {
    "mixzoo/attacks/apgd.py::apgd_ce",
    "mixzoo/attacks/apgd.py::apgd_run",
    "mixzoo/attacks/apgd.py::apgd_t",
    "mixzoo/attacks/mmaa.py::mmaa",
    "mixzoo/attacks/square.py::min_margin_square",
}
OVER_LINES: set[str] = set()


def _is_command(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A typer command: decorated with ``@command``, ``@app.command(...)`` or another ``*.command`` decorator."""
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name == "command":
            return True
    return False


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    args = node.args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    return len(names) - (1 if names and names[0] in ("self", "cls") else 0)


def _functions() -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    found = []
    for root in ROOTS:
        for path in sorted(root.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found.append((f"{path.relative_to(REPO)}:{node.lineno} {node.name}", node))
    return found


FUNCTIONS = _functions()


def test_the_walk_sees_the_package():
    names = {where.split()[-1] for where, _ in FUNCTIONS}
    assert {"evaluate", "bench", "lookup"} <= names and len(FUNCTIONS) > 500


def _key(where: str) -> str:
    return f"{where.split(':')[0]}::{where.split()[-1]}"


def _check(over: dict[str, str], listed: set[str], what: str) -> None:
    new = {k: v for k, v in over.items() if k not in listed}
    assert not new, f"{what}: {sorted(new.values())}"
    done = sorted(listed - set(over))
    assert not done, f"now within the limit: remove from the list in tests/test_code_limits.py: {done}"


def test_no_function_takes_too_many_parameters():
    over = {_key(where): f"{where} ({_parameters(node)})" for where, node in FUNCTIONS
            if _parameters(node) > MAX_PARAMETERS and not _is_command(node)}
    _check(over, OVER_PARAMETERS, f"more than {MAX_PARAMETERS} parameters (pass the settings object instead)")


def test_no_function_is_too_long():
    over = {_key(where): f"{where} ({node.end_lineno - node.lineno + 1})" for where, node in FUNCTIONS
            if node.end_lineno - node.lineno + 1 > MAX_LINES}
    _check(over, OVER_LINES, f"longer than {MAX_LINES} lines (split it into named steps)")


def test_the_lists_only_shrink():
    assert len(OVER_PARAMETERS) <= 5 and not OVER_LINES


def test_the_command_rule_sees_commands():
    commands = {where.split()[-1] for where, node in FUNCTIONS if _is_command(node)}
    assert {"bench", "mix", "sanity", "transfer_params"} <= commands
