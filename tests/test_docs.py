"""The documentation matches the code: every `mixzoo ...` command it shows parses against the CLI, every repository
path it cites exists, and the cheap commands it shows run.

Documents checked: README.md, CONTRIBUTING.md (rendered in the site) and every page under docs/.
"""

from __future__ import annotations

import itertools
import re
import shlex
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

import mixzoo.cli

try:  # typer >= 0.25 carries its own copy of click
    from typer._click.core import Context
    from typer._click.exceptions import UsageError
    from typer.exceptions import Exit
except ImportError:  # pragma: no cover - older typer uses click itself
    from click import Context, UsageError
    from click.exceptions import Exit

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
REPO_DIRS = ("benchmarks/", "mixzoo/", "plugins/", "tests/", "docs/", "examples/", ".ci/")
REPO_FILES = {"README.md", "CONTRIBUTING.md", "CHANGELOG.md", "Makefile", "pyproject.toml", "mkdocs.yml", "setup.py"}


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def code_blocks(text: str) -> list[str]:
    return re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.S | re.M)


def commands(text: str) -> list[tuple[str, bool]]:
    """`mixzoo ...` command lines: in code blocks (comments dropped, backslash continuations joined, the block's own
    variables put in; `torchrun ... -m mixzoo.cli` and environment-variable prefixes included) and in inline code
    spans."""
    found = []
    for block in code_blocks(text):
        assigned: dict[str, str] = {}  # a block's own variables (`N=200` on a line), put in where it uses them
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"(^|\s)#.*$", "", line).strip()
            if m := re.fullmatch(r"([A-Z_][A-Z0-9_]*)=(\S+)", line):
                assigned[m.group(1)] = m.group(2)
                continue
            for name, value in assigned.items():
                line = re.sub(rf"\$(\{{{name}\}}|{name}\b)", value, line)
            if "-m mixzoo.cli " in line:
                found.append(("mixzoo " + line.split("-m mixzoo.cli ", 1)[1], True))
                continue
            words = line.split()
            while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
                words = words[1:]
            if words[:1] == ["mixzoo"]:
                found.append((" ".join(words), True))
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    found += [(m, False) for m in re.findall(r"`(mixzoo [^`]+)`", prose)]
    return found


def help_examples() -> dict[str, list[str]]:
    """Each command's ``--help`` examples (the epilog ``mixzoo.core.commands.examples`` writes), by command."""
    group = typer.main.get_command(mixzoo.cli.app)
    ctx = Context(group, info_name="mixzoo")
    found = {}
    for name in group.list_commands(ctx):
        epilog = group.get_command(ctx, name).epilog or ""
        found[name] = [line.strip() for line in epilog.splitlines() if line.strip().startswith("mixzoo ")]
    return found


HELP_EXAMPLES = help_examples()
ALL_COMMANDS = sorted({(_rel(doc), cmd, strict) for doc in DOCS for cmd, strict in commands(doc.read_text())}
                      | {(f"mixzoo {name} --help", cmd, True) for name, cmds in HELP_EXAMPLES.items() for cmd in cmds})


def test_every_command_ends_its_help_with_examples():
    """Two or three examples at the end of every command's --help, core and plugin commands alike (each is also
    parsed against the CLI by test_command_parses)."""
    short = {name: len(cmds) for name, cmds in HELP_EXAMPLES.items() if not 2 <= len(cmds) <= 3}
    assert not short, f"commands whose --help does not end with 2-3 examples: {short}"


class _Commands:
    """The CLI's commands by name, the core's and those plugins contribute (``mixzoo_cli_commands``)."""

    def __init__(self) -> None:
        self.group = typer.main.get_command(mixzoo.cli.app)
        ctx = Context(self.group, info_name="mixzoo")
        self.commands = {n: self.group.get_command(ctx, n) for n in self.group.list_commands(ctx)}


@pytest.fixture(scope="module")
def cli():
    return _Commands()


def _method_options_parse(doc: str, command: str, name: str, words: list[str]) -> None:
    """``mixzoo mix`` hands the words it does not know itself to the chosen method (its declared options): they
    must be options of that method (``--method NAME``, else the default method)."""
    from mixzoo.core.errors import InputError
    from mixzoo.methods import get_method
    from mixzoo.methods.base import default_method

    method = None
    for i, word in enumerate(words):
        if word == "--method" and i + 1 < len(words):
            method = words[i + 1]
        elif word.startswith("--method="):
            method = word.split("=", 1)[1]
    if method in (None, "NAME"):  # the placeholder of a plugin's method: any method's options are allowed
        method = None if method else default_method()
    own = {o for p in mixzoo_command(name).params for o in [*p.opts, *getattr(p, "secondary_opts", [])]}
    extra, skip = [], False
    for i, word in enumerate(words):
        if skip:
            skip = False
            continue
        flag = word.split("=", 1)[0]
        if flag in own:
            param = next(p for p in mixzoo_command(name).params if flag in p.opts)
            skip = "=" not in word and not getattr(param, "is_flag", False)
        elif word.startswith("--"):
            extra.append(word)
            if i + 1 < len(words) and not words[i + 1].startswith("-") and "=" not in word:
                extra.append(words[i + 1])
                skip = True
    if not extra or method is None:
        return
    if "--KEY" in extra:
        return  # the syntax itself, written out
    chosen = get_method(method)
    try:
        chosen.check_options(chosen.options_from_args(extra))
    except InputError as exc:
        pytest.fail(f"{doc}: `{command}`: {exc}")


def mixzoo_command(name: str):
    return _Commands().commands[name]


def test_the_docs_show_commands():
    shown = {cmd.split()[1] for _, cmd, _ in ALL_COMMANDS if len(cmd.split()) > 1}
    assert {"list", "info", "plugins", "mix", "bench", "verify", "sanity", "certify"} <= shown, shown


@pytest.mark.parametrize(("doc", "command", "strict"), ALL_COMMANDS, ids=[f"{d}: {c}"[:90] for d, c, _ in ALL_COMMANDS])
def test_command_parses(cli, doc, command, strict):
    """The command exists and click accepts its options and their values (types included); in a code block its
    required arguments must be there too. Nothing runs."""
    args = shlex.split(command)[1:]
    if not args or args[0] in ("--help", "--version"):
        return
    name, rest = args[0], args[1:]
    if "/" in name and not rest:  # a list of commands, `mixzoo list/info/plugins`
        missing = [n for n in name.split("/") if n not in cli.commands]
        assert not missing, f"{doc}: `{command}`: no command {missing} (have {sorted(cli.commands)})"
        return
    assert name in cli.commands, f"{doc}: `{command}`: no command {name!r} (have {sorted(cli.commands)})"
    cmd = cli.commands[name]
    if rest == ["--help"]:  # every command has it
        return
    if name == "mix":
        _method_options_parse(doc, command, name, rest)
    if not strict:  # a span in prose may leave out required arguments: its options must exist
        known = {o for p in cmd.params for o in [*p.opts, *getattr(p, "secondary_opts", [])]}
        if name == "mix":  # the method's options: checked above
            return
        unknown = [a.split("=", 1)[0] for a in rest if a.startswith("-") and a.split("=", 1)[0] not in known]
        assert not unknown, f"{doc}: `{command}`: {name} has no option {unknown}"
        return
    try:
        with cmd.make_context(name, list(rest), parent=Context(cli.group, info_name="mixzoo")):
            pass
    except Exit:
        pass
    except UsageError as exc:
        pytest.fail(f"{doc}: `{command}` does not parse: {exc.format_message()}")


def _expand(path: str) -> list[str]:
    """`a/{b,c}_d.json` -> both paths; globs are left to Path.glob."""
    parts = re.split(r"\{([^{}]*,[^{}]*)\}", path)
    if len(parts) == 1:
        return [path]
    fixed, choices = parts[0::2], [p.split(",") for p in parts[1::2]]
    return ["".join(itertools.chain.from_iterable(zip(fixed, combo + ("",), strict=True)))
            for combo in itertools.product(*choices)]


def cited_paths(doc: Path) -> list[tuple[str, Path]]:
    """Repository paths in code spans and blocks, and relative link targets (resolved from the document)."""
    text = doc.read_text()
    out: list[tuple[str, Path]] = []
    for token in re.findall(r"[\w.{},*/-]+", " ".join(re.findall(r"`([^`\n]+)`", text) + code_blocks(text))):
        token = token.rstrip(".,")
        if token.startswith(REPO_DIRS) or token in REPO_FILES:
            out += [(token, ROOT / p) for p in _expand(token)]
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        target = target.split("#", 1)[0]
        out.append((target, (doc.parent / target)))
    return out


ALL_PATHS = sorted({(_rel(doc), cited, path) for doc in DOCS for cited, path in cited_paths(doc)}, key=str)


@pytest.mark.parametrize(("doc", "cited", "path"), ALL_PATHS, ids=[f"{d}: {c}"[:90] for d, c, _ in ALL_PATHS])
def test_cited_path_exists(doc, cited, path):
    if any(ch in str(path) for ch in "*?["):
        assert list(ROOT.glob(path.relative_to(ROOT).as_posix())), f"{doc} cites {cited}: nothing matches"
    else:
        assert path.exists(), f"{doc} cites {cited}, which does not exist"


def test_the_path_check_finds_paths():
    """The extraction is not vacuous: README's figure and the benchmarks index are among the cited paths."""
    cited = {c for _, c, _ in ALL_PATHS}
    assert "benchmarks/results/mixednuts_fmnist/demo_adaptive_apgd_n200/tradeoff.png" in cited
    assert "docs/results.md" in cited


def test_a_wrong_option_is_caught(cli):
    """The parse check fails on an option the CLI does not have (so the parametrised test can fail)."""
    with pytest.raises(UsageError):
        cli.commands["bench"].make_context("bench", ["card.toml", "--no-such-option"])
    with pytest.raises(AssertionError):  # prose spans too
        test_command_parses(cli, "doc", "mixzoo bench --no-such-option", strict=False)


# ------------------------------------------------------------------------------------------------ cheap commands run

def documented(command_prefix: str) -> str:
    """The first documented command starting with ``command_prefix`` (so the test runs what the docs show)."""
    for _, cmd, strict in ALL_COMMANDS:
        if strict and cmd.startswith(command_prefix):
            return cmd
    raise AssertionError(f"no documented command starts with {command_prefix!r}")


def run(args: list[str]) -> str:
    result = CliRunner().invoke(mixzoo.cli.app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("prefix", ["mixzoo list", "mixzoo info ", "mixzoo plugins"])
def test_listing_commands_run(prefix, cache_dir):
    cmd = documented(prefix)
    args = [a for a in shlex.split(cmd)[1:] if a != "NAME"] or ["info", "fmnist-pgd"]
    if args == ["info"]:
        args.append("fmnist-pgd")
    assert run(args).strip()
