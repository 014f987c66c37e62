"""CLI fuzz: generated command lines (every command's options, read from the CLI itself) and generated mix cards
(fields of the wrong type, out of range, missing, extra; odd paths). Every case must end in success or in exit
status 2 with exactly one line on stderr (``error: ...``), no traceback, and nothing written on failure.

Cases stay cheap: a command that would fit or attack is given one option that is refused before any work (the
poison), and generated cards are benched on the digits pair with a handful of images and a 1-step attack. The
number of cases run is counted (``CASES``) and checked by the last test."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import warnings
from pathlib import Path
from typing import Any

import pytest
import tomli_w
import typer
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from mixzoo.cli import app

CASES = {"options": 0, "cards": 0, "subprocess": 0, "hostile cards": 0, "hostile reports": 0, "hostile cache": 0,
         "edited numbers": 0}
OUTCOMES: dict[str, int] = {}  # "cards: exit 0" -> count
OPTION_CASES, CARD_CASES = 405, 100
FUZZ_SETTINGS = dict(deadline=None, derandomize=True, database=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

MODELS = ["digits-std", "digits-pgd", "fmnist-std", "no-such-model", "digits", "", "hf-hub:nobody/nothing",
          "cifar10/Linf/NoSuchModel"]
NAMES = {
    "abc": MODELS, "rbc": MODELS, "name": MODELS,
    "method": ["mixednuts", "linear", "adaptive-smoothing", "local-smoothing", "no-such-method", "transfer", "guess"],
    "dataset": ["digits", "fashion-mnist", "cifar10", "imagenet", "no-such-data"],
    "attack": ["apgd", "pgd", "adaptive", "autoattack", "min-margin-square", "no-such-attack"],
    "clamp": ["gelu", "relu", "nope"], "objective": ["standard", "relaxed", "other"],
    "search": ["mixzoo", "authors", "x"], "optimizer": ["grid", "nope"],
    "norm": ["Linf", "L2", "l2", "linf", "L1", "corruptions"], "role": ["accurate", "robust", "other"],
    "smoothing": ["soft", "hard", "medium"], "split": ["evaluation", "calibration", "train", "test"],
    "device": ["cpu", "mps", "cuda:7", "tpu", "cpu:0"],
    "grid": ["s=0.05:10:8,p=1:4:8,c=-2:0:8", "s=1:2", "q=1:2:3", "s=a:b:c"],
    "eps": ["0.1,0.2", "x", "0.1,,0.2", "-1"], "radii": ["0.1,0.5", "a,b"], "estimate": ["0.1", "nan"],
}
OPTION_KEYS = ["n_iter", "n_restarts", "n_target_classes", "components", "batch_size", "alpha", "beta",
               "target_robust", "step_size", "layer_norm", "n_queries", "p_init", "tau", "no_such_key", "", "1x"]
JUNK = ["", " ", "abc", "1.5", "-1", "0", "nan", "inf", "-inf", "1e309", "0x10", "null", "true", "[1, 2]",
        "{\"a\": 1}", "é∂ü", "a=b", "--json", "-", "\\", "1,2,3", "999999999999999999999"]
ODD_PATHS = ["afile.txt/inner.toml", "adir", "adir/", "missing/deep/x.toml", "empty.toml", "binary.toml",
             "notcard.toml", "pyproject.toml", "card.yaml", "", ".", "/", "/proc/mixzoo.toml", "/dev/null",
             "spaced name/ü card.toml", "x" * 300 + ".toml", "card.json", "results.json"]
# per command that would fit, attack or train: options refused before any work (one is always given)
POISON = {
    "mix": [["--device", "mps"], ["--out", "adir"], ["--out", "afile.txt/x.toml"], ["--out", "card.yaml"],
            ["--abc", "no-such-model"], ["--out", "notcard.toml"]],
    "bench": [["--n", "0"], ["--batch-size", "0"], ["--attack", "no-such-attack"], ["--device", "mps"],
              ["--out", "afile.txt/b"], ["--attack-option", "n_iter=2.5"]],
    "sanity": [["--device", "mps"]], "check": [["--device", "mps"]], "certify": [["--device", "mps"]],
    "transfer-params": [["--device", "mps"]], "verify": [["--device", "mps"]],
}
ARGUMENT_PATHS = {"bench": ["notcard.toml", "missing.toml", "adir", "empty.toml", "binary.toml", "no-such-card",
                            "mixednuts-cifar10"]}
BUILT_IN_PLUGINS = ("zoo", "datasets", "clamps", "attacks", "optimizers", "bit", "timm-hub", "robustbench",
                    "transfer", "methods")


def _recipes() -> set[str]:
    from mixzoo.training.train import RECIPES

    return set(RECIPES)


RECIPES = _recipes()


def _commands() -> dict[str, list]:
    group = typer.main.get_command(app)
    return {name: list(cmd.params) for name, cmd in group.commands.items()}


COMMANDS = _commands()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A working directory with odd files in it, a cache, a linear card and a MixedNUTS card on the digits
    pair; the tests run in it."""
    root = tmp_path_factory.mktemp("fuzz")
    old_cwd, old_cache = os.getcwd(), os.environ.get("MIXZOO_CACHE")
    os.chdir(root)
    os.environ["MIXZOO_CACHE"] = str(root / ".cache")
    (root / "afile.txt").write_text("a file\n")
    (root / "adir").mkdir()
    (root / "empty.toml").write_text("")
    (root / "binary.toml").write_bytes(b"\xff\xfe\x00binary")
    (root / "notcard.toml").write_text('[tool]\nname = "x"\n')
    (root / "pyproject.toml").write_text('[project]\nname = "mine"\n')
    (root / "results.json").write_text('{"accuracy": 0.5}')
    runner = CliRunner()
    cards = root / ".cards"
    made = [runner.invoke(app, ["mix", "--method", "linear", "--abc", "digits-std", "--rbc", "digits-pgd", "-O",
                                "alpha=0.9", "--json", "--out", str(cards / "linear.toml")]),
            runner.invoke(app, ["mix", "--abc", "digits-std", "--rbc", "digits-pgd", "--n-calib", "300", "--n-iter",
                                "2", "--json", "--out", str(cards / "mixednuts.toml")])]
    assert all(r.exit_code == 0 for r in made), [r.output for r in made]
    yield root
    os.chdir(old_cwd)
    if old_cache is None:
        os.environ.pop("MIXZOO_CACHE", None)
    else:
        os.environ["MIXZOO_CACHE"] = old_cache


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under ``root`` but the cache and the base cards: path -> (size, mtime)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in (".cache", ".cards")]
        for name in [*filenames, *dirnames]:
            p = Path(dirpath) / name
            st_ = p.lstat()
            out[str(p.relative_to(root))] = (st_.st_size if p.is_file() else -1, st_.st_mtime_ns)
    return out


def restore(root: Path, before: dict[str, tuple[int, int]]) -> None:
    """Remove what a successful case wrote (so that cases stay independent)."""
    for rel in sorted(set(snapshot(root)) - set(before), key=len):
        p = root / rel
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        elif p.exists():
            p.unlink()


def invoke(args: list[str]):
    """The command in-process, under Python's default warning filters (library deprecations hidden), as a user's
    shell runs it; pytest's own filters would show them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        return CliRunner().invoke(app, args)


def check_outcome(result, root: Path, before: dict, args: list[str]) -> None:
    """Success, or exit status 2 with one line on stderr naming the error, no traceback, nothing written."""
    where = f"mixzoo {' '.join(args)!r}"
    assert result.exit_code in (0, 2), (where, result.exit_code, result.output[-2000:], repr(result.exception))
    assert "Traceback" not in result.output, (where, result.output[-2000:])
    if result.exit_code == 2:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), (where, result.stderr[-2000:])
        built_in_fault = [p for p in BUILT_IN_PLUGINS if f"plugin '{p}' failed to" in lines[0]]
        assert not built_in_fault, (where, lines[0])  # a built-in's exception: a bug, not bad input
        assert snapshot(root) == before, (where, "wrote files although it failed",
                                          set(snapshot(root)) ^ set(before))
    else:
        restore(root, before)
    key = f"{args[0] if args[0] != 'bench' or '--no-extra-attacks' not in args else 'cards'}: exit {result.exit_code}"
    OUTCOMES[key] = OUTCOMES.get(key, 0) + 1


# ---------------------------------------------------------------------------------------------- option values
def _value(param) -> st.SearchStrategy[str]:
    kind, name = param.bare_type(), param.name
    junk = st.one_of(st.sampled_from(JUNK), st.text(st.characters(blacklist_categories=("Cs",),
                                                                  blacklist_characters="\x00"), max_size=8))
    if kind == "int":
        return st.one_of(st.integers(-3, 5).map(str), st.integers(-10**13, 10**13).map(str), junk)
    if kind in ("float", "list[float]"):
        return st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr),
                         st.sampled_from(["0", "-1", "0.1", "1", "1e9", "nan", "inf", "0.5"]), junk)
    if kind == "Path":
        return st.one_of(st.sampled_from(ODD_PATHS), junk)
    if name in ("option", "attack_option"):
        return st.builds(lambda k, v: f"{k}={v}", st.sampled_from(OPTION_KEYS), st.sampled_from(JUNK + ["1", "2"]))
    pool = NAMES.get(name) or NAMES.get(name.split("_")[-1])
    if name in ("data_dir",):
        pool = ODD_PATHS
    return st.one_of(st.sampled_from(pool), junk) if pool else junk


@st.composite
def command_lines(draw) -> list[str]:
    command = draw(st.sampled_from(sorted(COMMANDS)))
    poison = draw(st.sampled_from(POISON[command])) if command in POISON else []
    params = [p for p in COMMANDS[command] if not poison or poison[0] not in p.opts]
    args: list[list[str]] = [poison] if poison else []
    for p in draw(st.lists(st.sampled_from(params), max_size=6, unique_by=lambda p: p.name)):
        if p.param_type_name == "argument":
            if command == "train":  # never a recipe's name: training one is not a cheap case
                value = draw(st.one_of(st.sampled_from(["no-such-recipe", "digits", ""]), st.text(max_size=4)))
                args.append(["no-such-recipe" if value in RECIPES else value])
            elif command in ARGUMENT_PATHS:
                args.append(draw(st.lists(st.sampled_from(ARGUMENT_PATHS[command]), min_size=1, max_size=2)))
            elif command == "info":
                args.append([draw(st.sampled_from(MODELS))])
            else:
                args.append([draw(st.sampled_from(ODD_PATHS))])
        elif p.is_flag:
            args.append([draw(st.sampled_from([*p.opts, *p.secondary_opts]))])
        else:
            count = draw(st.integers(1, 2)) if p.multiple else 1
            for _ in range(count):
                args.append([draw(st.sampled_from(p.opts)), draw(_value(p))])
    order = draw(st.permutations(range(len(args))))
    return [command, *(a for i in order for a in args[i])]


@pytest.mark.slow
@settings(max_examples=OPTION_CASES, **FUZZ_SETTINGS)
@given(args=command_lines())
def test_generated_command_lines_succeed_or_fail_in_one_line(workdir, args):
    CASES["options"] += 1
    before = snapshot(workdir)
    check_outcome(invoke(args), workdir, before, args)


# ------------------------------------------------------------------------------------------------ card fields
VALUES = st.one_of(
    st.integers(-10, 10), st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(), st.text(max_size=6), st.sampled_from(["gelu", "linear", "mixednuts", "digits-std", "fmnist-std",
                                                         "Linf", "L2", "mmaa", "given", "standard"]),
    st.lists(st.integers(-2, 2), max_size=3), st.dictionaries(st.sampled_from(["a", "s", "name"]),
                                                              st.integers(0, 3), max_size=2))


def _fields(card: dict, prefix: str = "") -> list[str]:
    out = []
    for k, v in card.items():
        out.append(prefix + k)
        if isinstance(v, dict):
            out += _fields(v, prefix + k + ".")
    return out


def _set(card: dict, path: str, value, delete: bool = False) -> None:
    *parents, last = path.split(".")
    for k in parents:
        card = card.setdefault(k, {}) if isinstance(card.get(k, {}), dict) else {}
    if delete:
        card.pop(last, None)
    else:
        card[last] = value


def _toml_safe(v) -> bool:
    if isinstance(v, dict):
        return all(_toml_safe(x) for x in v.values())
    if isinstance(v, list):
        return all(_toml_safe(x) for x in v) and len({type(x) for x in v}) <= 1
    return v is not None and not (isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 2**63)


@st.composite
def mutated_cards(draw, bases: dict[str, dict]) -> tuple[str, dict]:
    base = draw(st.sampled_from(sorted(bases)))
    card = json.loads(json.dumps(bases[base]))
    fields = _fields(card)
    for _ in range(draw(st.integers(1, 3))):
        action = draw(st.sampled_from(["set", "set", "delete", "extra"]))
        if action == "extra":
            path = draw(st.sampled_from([*fields, ""])).rsplit(".", 1)[0]
            path = f"{path}.{draw(st.sampled_from(['zz_extra', 'unknown', 'alpha2']))}".lstrip(".")
            _set(card, path, draw(VALUES))
        else:
            _set(card, draw(st.sampled_from(fields)), draw(VALUES), delete=action == "delete")
    fmt = draw(st.sampled_from(["toml", "json"]))
    if fmt == "toml" and not _toml_safe(card):
        fmt = "json"
    return fmt, card


BENCH = ["--n", "3", "--attack", "apgd", "-O", "n_iter=1", "-O", "n_target_classes=1", "--no-curve", "--no-plots",
         "--no-baseline", "--no-extra-attacks", "--json", "--out", "bench-out"]


@pytest.fixture(scope="module")
def base_cards(workdir):
    return {p.stem: tomllib.loads(p.read_text()) for p in (workdir / ".cards").glob("*.toml")}


def test_generated_cards_bench_or_fail_in_one_line(workdir, base_cards):
    @settings(max_examples=CARD_CASES, **FUZZ_SETTINGS)
    @given(case=mutated_cards(base_cards))
    def bench_card(case):
        CASES["cards"] += 1
        fmt, card = case
        path = workdir / ".cards" / f"fuzzed.{fmt}"
        text = tomli_w.dumps(card) if fmt == "toml" else json.dumps(card, allow_nan=True)
        path.write_text(text)
        before = snapshot(workdir)
        args = ["bench", str(path), *BENCH]
        check_outcome(invoke(args), workdir, before, [*args, f"(card: {text[-600:]})"])

    bench_card()


# ------------------------------------------------------------------------------------------------ subprocesses
@pytest.mark.subprocess
@pytest.mark.parametrize("args", [
    ["bench", "--n", "abc"],
    ["mix", "--out", "notcard.toml", "--abc", "digits-std", "--rbc", "digits-pgd"],
    ["bench", ".cards/linear.toml", "--attack-option", "n_iter=2.5", "--out", "b"],
])
def test_the_installed_command_fails_in_one_line(workdir, args):
    """The real entry point in its own process (the in-process runner shares state between cases)."""
    CASES["subprocess"] += 1
    before = snapshot(workdir)
    proc = subprocess.run([sys.executable, "-m", "mixzoo.cli", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert snapshot(workdir) == before


# ----------------------------------------------------------------------------------------------- hostile files
# Files a user edited by hand or a hostile party wrote: mix cards (pushed with `push --dry-run`), bench report.json
# files (read by `report --format robustbench`) and bench cache entries (read by the next `bench`). Every case must
# succeed or fail with one line; on failure nothing is written, on success nothing outside --out; and no number
# may differ from the one the untouched file gives.
HOSTILE_CASES = {"hostile cards": 150, "hostile reports": 160, "hostile cache": 40, "edited numbers": 60}
DEEP = "__DEEP__"  # replaced in the file's text by arrays nested 10,000 levels deep
TRAVERSING = ["../outside/net.safetensors", "OUTSIDE", "sub/net.safetensors", "..", ".", "a\\b", "", "é/x"]
NAMES_BAD = ["../../X", "/ABS/X", ".", "..", "", "a/b", "é", "x" * 300, "\\..\\x", None, 5, [], {}, DEEP]
FRACTION_BAD = [-3, 1.5, -1e-9, 1.0000001, "ten", "0.5", None, True, [], {}, float("nan"), float("inf"),
                10 ** 30, DEEP]
COUNT_BAD = [0, -1, 1.5, "ten", None, True, 10 ** 30, 2 ** 63, [], {}, DEEP]
EPS_BAD = [0, -1, "big", None, True, [], float("nan"), float("inf"), 10 ** 400, DEEP]
NORM_BAD = [".", "..", "linf", "L1", None, 5, "/x", "../..", DEEP]
COMPONENTS_BAD = ["x", None, 5, [{"name": 5}], [{"name": "autoattack-standard", "own_broken": -5}],
                  [{"name": "autoattack-standard", "own_broken": 10 ** 30}], [{"own_broken": 1}], [[]], DEEP]
REPORT_FIELDS = {"clean_accuracy": FRACTION_BAD, "robust_accuracy": FRACTION_BAD, "n": COUNT_BAD,
                 "name": NAMES_BAD, "kind": NAMES_BAD, "card_path": NAMES_BAD, "components": COMPONENTS_BAD,
                 "card": ["x", 5, [], DEEP, {"abc": "x"}, {"abc": {"name": 5}}, {"weights": DEEP}]}
TOP_FIELDS = {("settings", "eps"): EPS_BAD, ("settings", "norm"): NORM_BAD, ("settings", "attack"): NAMES_BAD,
              ("settings", "seed"): ["x", 1.5, 10 ** 30, DEEP], ("dataset", "name"): NAMES_BAD,
              ("dataset",): ["x", 5, [], DEEP], ("settings",): ["x", [], None, DEEP], ("models",): ["x", [], {}, DEEP]}
NUMBERS = ("clean_acc", "reported", "autoattack_acc", "external", "eps")


def _dump_json(value) -> str:
    """JSON text with each :data:`DEEP` marker replaced by 10,000 nested arrays."""
    return json.dumps(value, allow_nan=True).replace(f'"{DEEP}"', "[" * 10_000 + "]" * 10_000)


def _files(root: Path) -> dict[str, bytes | str]:
    """Every entry under ``root``, but the cache: path -> bytes (or its kind)."""
    out: dict[str, bytes | str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".cache"]
        for name in [*filenames, *dirnames]:
            p = Path(dirpath) / name
            out[str(p.relative_to(root))] = ("link" if p.is_symlink() else p.read_bytes() if p.is_file()
                                             else "dir")
    return out


_GROUP: list = []


def invoke_fast(args: list[str]):
    """:func:`invoke` with the click command typer builds from ``app`` made once (building it takes most of a
    cheap command's time)."""
    from click.testing import CliRunner as ClickRunner

    if not _GROUP:
        _GROUP.append(typer.main.get_command(app))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        return ClickRunner().invoke(_GROUP[0], args, prog_name="mixzoo")


def check_hostile(result, root: Path, before: dict, out: str, what: str) -> None:
    """Success or one line (exit 2); nothing written on failure, nothing outside ``out`` on success."""
    assert result.exit_code in (0, 2), (what, result.exit_code, result.output[-1500:], repr(result.exception))
    assert "Traceback" not in result.output, (what, result.output[-1500:])
    after = _files(root)
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    if result.exit_code == 2:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), (what, result.stderr[-1500:])
        assert not [p for p in BUILT_IN_PLUGINS if f"plugin '{p}' failed to" in lines[0]], (what, lines[0])
        assert not changed, (what, "wrote files although it failed", changed)
    else:
        outside = [k for k in changed if k != out and not k.startswith(out + os.sep)]
        assert not outside, (what, "wrote outside --out", outside)
    OUTCOMES[f"{what.split(':')[0]}: exit {result.exit_code}"] = OUTCOMES.get(
        f"{what.split(':')[0]}: exit {result.exit_code}", 0) + 1


@pytest.fixture(scope="module")
def hostile_root(workdir, tmp_path_factory):
    """A folder for the hostile-file cases: ``work/`` (the current directory, outputs go to ``work/out``),
    ``cards/`` (with a ``sub/`` folder), ``outside/net.safetensors`` (a real file a card must not reach),
    ``reports/`` and a clean adaptive-strong report of the linear card, with its points, in ``clean/``."""
    root = tmp_path_factory.mktemp("hostile")
    for d in ("work", "cards/sub", "outside", "reports"):
        (root / d).mkdir(parents=True)
    (root / "outside" / "net.safetensors").write_bytes(b"weights from elsewhere")
    res = invoke(["bench", str(workdir / ".cards" / "linear.toml"), "--n", "10", "--attack", "adaptive-strong", "-O",
                  "n_iter=2", "-O", "n_queries=20", "-O", "n_target_classes=1", "--no-curve", "--no-plots",
                  "--no-baseline", "--no-extra-attacks", "--save-adversarial", "--out", str(root / "clean")])
    assert res.exit_code == 0, res.output
    return root


def _hostile_value(draw, pool):
    value = draw(st.sampled_from(pool))
    return value


@st.composite
def hostile_cards(draw, bases: dict[str, dict]) -> tuple[str, dict, bool]:
    """(format, card, names a file outside its folder)."""
    card = json.loads(json.dumps(bases[draw(st.sampled_from(sorted(bases)))]))
    added: list[str] = []
    for _ in range(draw(st.integers(1, 3))):
        action = draw(st.sampled_from(["weights", "deep", "number", "field", "field", "delete"]))
        if action == "weights":
            name = draw(st.one_of(st.sampled_from(TRAVERSING), st.text(max_size=12)))
            card.setdefault("weights", {})
            if not isinstance(card["weights"], dict):
                card["weights"] = {}
            card["weights"][name] = hashlib.sha256(b"weights from elsewhere").hexdigest()
            added.append(name)  # a file no card may name: outside, missing or not a plain name
        elif action == "deep":
            _set(card, draw(st.sampled_from(_fields(card))), DEEP)
        elif action == "number":
            _set(card, draw(st.sampled_from(_fields(card))),
                 draw(st.sampled_from([2 ** 63, -(2 ** 63) - 1, 10 ** 30, float("nan"), "ten", None, []])))
        elif action == "field":
            _set(card, draw(st.sampled_from(_fields(card))), draw(VALUES))
        else:
            _set(card, draw(st.sampled_from(_fields(card))), None, delete=True)
    text = _dump_json(card)
    fmt = "toml" if DEEP not in text and _toml_safe(card) and draw(st.booleans()) else "json"
    weights = card.get("weights")
    return fmt, card, isinstance(weights, dict) and any(name in weights for name in added)


def test_hostile_cards_push_or_fail_in_one_line(workdir, base_cards, hostile_root, monkeypatch):
    from mixzoo.core.card import MixCard

    monkeypatch.chdir(hostile_root / "work")
    outside_file = str(hostile_root / "outside" / "net.safetensors")

    @settings(max_examples=HOSTILE_CASES["hostile cards"], **FUZZ_SETTINGS)
    @given(case=hostile_cards(base_cards))
    def push_card(case):
        CASES["hostile cards"] += 1
        fmt, card, outside = case
        if isinstance(card.get("weights"), dict) and "OUTSIDE" in card["weights"]:
            card["weights"][outside_file] = card["weights"].pop("OUTSIDE")
        path = hostile_root / "cards" / f"hostile.{fmt}"
        path.write_text(tomli_w.dumps(card) if fmt == "toml" else _dump_json(card))
        before = _files(hostile_root)
        res = invoke_fast(["push", str(path), "--repo", "me/hostile", "--dry-run", "--out", "out"])
        what = f"hostile card: {path.read_text()[-600:]}"
        check_hostile(res, hostile_root, before, "work/out", what)
        if res.exit_code == 0:
            assert not outside, (what, "a card naming a file outside its folder was pushed")
            pushed = MixCard.load(hostile_root / "work" / "out" / "card.toml")
            assert pushed.params == MixCard.load(path).params, what  # push changes no number of the card
        path.unlink()
        shutil.rmtree(hostile_root / "work" / "out", ignore_errors=True)

    push_card()


@st.composite
def hostile_reports(draw, clean: dict) -> dict:
    report = json.loads(json.dumps(clean))
    for _ in range(draw(st.integers(1, 3))):
        action = draw(st.sampled_from(["row", "row", "top", "delete", "extra"]))
        rows = report.get("models") if isinstance(report.get("models"), list) else []
        if action == "row" and rows and isinstance(rows[-1], dict):
            key = draw(st.sampled_from(sorted(REPORT_FIELDS)))
            rows[draw(st.integers(0, len(rows) - 1))][key] = draw(st.sampled_from(REPORT_FIELDS[key]))
        elif action == "top":
            where = draw(st.sampled_from(sorted(TOP_FIELDS)))
            table = report
            for k in where[:-1]:
                table = table.get(k) if isinstance(table.get(k), dict) else {}
            table[where[-1]] = draw(st.sampled_from(TOP_FIELDS[where]))
        elif action == "delete":
            where = draw(st.sampled_from([*sorted(REPORT_FIELDS), "settings", "models", "dataset"]))
            (rows[-1] if where in REPORT_FIELDS and rows and isinstance(rows[-1], dict) else report).pop(where, None)
        else:
            report[draw(st.sampled_from(["zz", "notes", "run"]))] = draw(st.sampled_from([DEEP, 10 ** 30, "x"]))
    return report


def test_hostile_reports_convert_or_fail_in_one_line(workdir, hostile_root, monkeypatch):
    monkeypatch.chdir(hostile_root / "work")
    clean_res = invoke_fast(["report", str(hostile_root / "clean"), "--format", "robustbench"])
    assert clean_res.exit_code == 0, clean_res.output
    clean_info = json.loads(clean_res.stdout)
    clean = json.loads((hostile_root / "clean" / "report.json").read_text())

    @settings(max_examples=HOSTILE_CASES["hostile reports"], **FUZZ_SETTINGS)
    @given(report=hostile_reports(clean))
    def convert(report):
        CASES["hostile reports"] += 1
        text = _dump_json(report).replace("/ABS", str(hostile_root / "outside"))
        (hostile_root / "reports" / "report.json").write_text(text)
        before = _files(hostile_root)
        res = invoke_fast(["report", str(hostile_root / "reports"), "--format", "robustbench", "--out", "out"])
        what = f"hostile report: {text[:300]} ... {text[-300:]}"
        check_hostile(res, hostile_root, before, "work/out", what)
        if res.exit_code == 0:
            info = json.loads(res.stdout)
            assert {k: info[k] for k in NUMBERS} == {k: clean_info[k] for k in NUMBERS}, what
        shutil.rmtree(hostile_root / "work" / "out", ignore_errors=True)

    convert()


CACHE_BAD = ["{}", "null", "[]", "", "not json", "\xff\xfe", "[" * 10_000 + "]" * 10_000, "ALL_TRUE", "SHORT",
             "LONG", "STRINGS", "BIG", "NO_COMPONENTS", "TRUNCATED"]


def _hostile_entry(text: str, how: str) -> str:
    """A bench cache entry (JSON) damaged or forged as ``how`` says."""
    if how not in ("ALL_TRUE", "SHORT", "LONG", "STRINGS", "BIG", "NO_COMPONENTS", "TRUNCATED"):
        return how
    if how == "TRUNCATED":
        return text[: len(text) // 2]
    data = json.loads(text)
    n = len(data["clean_correct"])
    if how == "ALL_TRUE":
        data["clean_correct"] = data["robust_correct"] = [True] * n
    elif how == "SHORT":
        data["clean_correct"], data["robust_correct"] = data["clean_correct"][:1], data["robust_correct"][:1]
    elif how == "LONG":
        data["clean_correct"] = data["clean_correct"] * 3
        data["robust_correct"] = data["robust_correct"] * 3
    elif how == "STRINGS":
        data["robust_correct"] = ["yes"] * n
    elif how == "BIG":
        data["seconds"] = 10 ** 30
        for c in data.get("components", []):
            c["newly_broken"] = 10 ** 30
    else:
        data.pop("components", None)
    return json.dumps(data)


HOSTILE_BENCH = ["--n", "4", "--attack", "apgd", "-O", "n_iter=1", "-O", "n_target_classes=1", "--no-curve",
                 "--no-plots", "--no-baseline", "--no-extra-attacks", "--json", "--out", "out"]


def _rows(report: Path) -> list[tuple]:
    data = json.loads(report.read_text())
    return [(m["name"], m["n"], m["clean_accuracy"], m["robust_accuracy"]) for m in data["models"]]


def test_hostile_cache_entries_recompute_or_fail_in_one_line(workdir, hostile_root, monkeypatch):
    monkeypatch.chdir(hostile_root / "work")
    card = str(workdir / ".cards" / "linear.toml")
    bench_dir = Path(os.environ["MIXZOO_CACHE"]) / "bench"
    known = set(bench_dir.glob("*.json")) if bench_dir.is_dir() else set()
    res = invoke_fast(["bench", card, *HOSTILE_BENCH])
    assert res.exit_code == 0, res.output
    clean_rows = _rows(hostile_root / "work" / "out" / "report.json")
    entries = sorted(set(bench_dir.glob("*.json")) - known)
    assert entries, "the bench wrote no cache entry"
    originals = {e: e.read_text() for e in entries}
    shutil.rmtree(hostile_root / "work" / "out")

    @settings(max_examples=HOSTILE_CASES["hostile cache"], **FUZZ_SETTINGS)
    @given(entry=st.sampled_from(entries), how=st.sampled_from(CACHE_BAD))
    def bench_again(entry, how):
        CASES["hostile cache"] += 1
        entry.write_text(_hostile_entry(originals[entry], how))
        try:
            before = _files(hostile_root)
            result = invoke_fast(["bench", card, *HOSTILE_BENCH])
            what = f"hostile cache: {entry.name} {how}"
            check_hostile(result, hostile_root, before, "work/out", what)
            if result.exit_code == 0:
                assert _rows(hostile_root / "work" / "out" / "report.json") == clean_rows, what
        finally:
            entry.write_text(originals[entry])
            shutil.rmtree(hostile_root / "work" / "out", ignore_errors=True)

    bench_again()


# --------------------------------------------------------------------------------------------- edited numbers
# A report whose figures, keys or settings were edited by hand: each stored figure is a copy of the per-image
# outcomes, the settings a copy of the run record, the record sealed by its digest. Whatever is edited, verify,
# report --format robustbench and push --dry-run --report refuse it in one line (exit 2) or give the clean
# report's numbers; verify may also find outcomes edited consistently refuted by the saved points (exit 1).
FIGURES = ("clean_accuracy", "robust_accuracy")
OWN = ("own_broken", "own_outcomes")  # a stand-alone component's own breaks: the count and its outcomes
RECORD_COPIES = {"attack": ["pgd", "apgd", "fast"], "seed": [1, -1, 2 ** 40], "eps": [0.1, 0.3, 1.0],
                 "attack_options": [{"n_iter": 1}, {}], "per_example_seeds": [False], "extra_attacks": [True],
                 "batch_size": [1, 7], "precision_policy": ["bf16", "auto"], "norm": ["L2"],
                 "budget": ["quick", "strong", "standard"]}


@st.composite
def edited_numbers(draw, clean: dict) -> tuple[dict, list[tuple[str, str]], str]:
    """(report, keys written twice as (key, value text), what was edited)."""
    report = json.loads(json.dumps(clean))
    twice: list[tuple[str, str]] = []
    done, owned = [], set()  # owned: components whose own breaks were edited (once each: two edits could agree)
    for _ in range(draw(st.integers(1, 3))):
        key = ""
        action = draw(st.sampled_from(["figure", "figure", "outcome", "component", "own", "twice", "settings",
                                       "record", "budget"]))
        row = report["models"][draw(st.integers(0, len(report["models"]) - 1))]
        n = row["n"]
        if action == "figure":
            key = draw(st.sampled_from(FIGURES))
            row[key] = draw(st.integers(0, n)) / n  # a whole number of images: only the outcomes can refute it
        elif action == "outcome":
            field = draw(st.sampled_from(["clean_outcomes", "robust_outcomes"]))
            i = draw(st.integers(0, n - 1))
            row[field] = row[field][:i] + ("0" if row[field][i] == "1" else "1") + row[field][i + 1:]
        elif action == "component" and row["components"]:
            comp = row["components"][draw(st.integers(0, len(row["components"]) - 1))]
            key = "newly_broken"
            comp[key] = draw(st.integers(0, n))
        elif action == "own" and (alone := [c for m in report["models"] for c in m["components"]
                                            if "own_broken" in c and id(c) not in owned]):
            comp = draw(st.sampled_from(alone))  # a stand-alone component (autoattack-standard), edited once
            owned.add(id(comp))
            key = draw(st.sampled_from([k for k in OWN if k in comp]))
            if key == "own_outcomes":  # one image's stand-alone outcome flipped
                i = draw(st.integers(0, len(comp[key]) - 1))
                comp[key] = comp[key][:i] + ("0" if comp[key][i] == "1" else "1") + comp[key][i + 1:]
            else:  # any count, inside its bounds too: the own outcomes refute it
                comp[key] = draw(st.integers(0, n + 1))
        elif action == "budget":  # what decides the extra attacks: the record's, its settings copy checked
            key = draw(st.sampled_from(["settings", "record"]))
            report[key]["budget"] = draw(st.sampled_from(RECORD_COPIES["budget"]))
        elif action == "twice":
            key = draw(st.sampled_from([*FIGURES, "attack", "eps", "seed"]))
            twice.append((key, json.dumps(draw(st.sampled_from([0.9, 0.0, 1.0, "pgd", 5])))))
        elif action == "settings":
            key = draw(st.sampled_from(sorted(RECORD_COPIES)))
            report["settings"][key] = draw(st.sampled_from(RECORD_COPIES[key]))
        else:
            key = draw(st.sampled_from(sorted(set(RECORD_COPIES) - {"precision_policy"})))
            report["record"][key] = draw(st.sampled_from(RECORD_COPIES[key]))
        done.append(f"{action} {key}")
    return report, twice, ", ".join(done)


def _seams(clean: dict) -> tuple[tuple[dict, list, str], tuple[dict, list, str]]:
    """Two edits every run tries first: settings.budget moved away from the record's, and the stand-alone
    component's own_broken set to another count inside its bounds (its row's new breaks to its worst case)."""
    budget = json.loads(json.dumps(clean))
    budget["settings"]["budget"] = "strong" if clean["settings"]["budget"] != "strong" else "quick"
    own = json.loads(json.dumps(clean))
    row, comp = next((m, c) for m in own["models"] for c in m["components"] if "own_broken" in c)
    high = row["clean_outcomes"].count("1") - row["robust_outcomes"].count("1")
    comp["own_broken"] = next(v for v in range(comp["newly_broken"], high + 1) if v != comp["own_broken"])
    return (budget, [], "settings budget"), (own, [], "own own_broken")


def _copies_moved(report: dict, clean: dict) -> bool:
    """Whether ``report`` moved a copy away from its truth: the settings or the run record (sealed by its digest)
    edited, or a component's own breaks (``own_broken`` beside the ``own_outcomes`` it is counted from)."""
    own = [[{k: c.get(k) for k in OWN} for c in m["components"]] for m in report["models"]]
    return report["settings"] != clean["settings"] or report["record"] != clean["record"] or own != [
        [{k: c.get(k) for k in OWN} for c in m["components"]] for m in clean["models"]]


def _write_twice(text: str, twice: list[tuple[str, str]]) -> str:
    """``text`` with each ``(key, value)`` written a second time right after the key's first occurrence."""
    for key, value in twice:
        text = re.sub(rf'("{key}": [^,}}]+)', rf'\1, "{key}": {value}', text, count=1)
    return text


def _numbers(args: list[str], res, root: Path) -> Any:
    """What a successful command reports: verify's rows, model_info's figures, the pushed model card's metrics."""
    if args[0] == "verify":
        return [(r["name"], r["reported_robust_accuracy"], r["verified_robust_accuracy"], r["passed"])
                for r in json.loads(res.stdout)["rows"]]
    if args[0] == "report":
        return {k: json.loads(res.stdout)[k] for k in NUMBERS}
    return [line for line in (root / "work" / "out" / "README.md").read_text().splitlines() if "%" in line
            or "value" in line]


def test_edited_numbers_are_refused_in_one_line_or_give_the_clean_numbers(workdir, hostile_root, monkeypatch):
    monkeypatch.chdir(hostile_root / "work")
    folder = hostile_root / "numbers"
    folder.mkdir(exist_ok=True)
    shutil.copy(hostile_root / "clean" / "adversarial.safetensors", folder / "adversarial.safetensors")
    commands = [["verify", str(folder), "--json"],
                ["report", str(folder), "--format", "robustbench", "--out", "out"],
                ["push", str(workdir / ".cards" / "linear.toml"), "--repo", "me/numbers", "--dry-run", "--out",
                 "out", "--report", str(folder)]]
    clean_text = (hostile_root / "clean" / "report.json").read_text()
    clean_numbers = []
    for args in commands:
        (folder / "report.json").write_text(clean_text)
        res = invoke_fast(args)
        assert res.exit_code == 0, (args, res.output)
        clean_numbers.append(_numbers(args, res, hostile_root))
        shutil.rmtree(hostile_root / "work" / "out", ignore_errors=True)

    budget, own = _seams(json.loads(clean_text))

    @settings(max_examples=HOSTILE_CASES["edited numbers"], **FUZZ_SETTINGS)
    @given(case=edited_numbers(json.loads(clean_text)), which=st.integers(0, len(commands) - 1))
    @example(case=budget, which=0)
    @example(case=own, which=1)
    def run(case, which):
        CASES["edited numbers"] += 1
        report, twice, done = case
        text = _write_twice(json.dumps(report, indent=1), twice)
        (folder / "report.json").write_text(text)
        args = commands[which]
        before = _files(hostile_root)
        res = invoke_fast(args)
        what = f"edited numbers: {args[0]} after {done} {twice}"
        if _copies_moved(report, json.loads(clean_text)):  # a copy that disagrees with its truth: never used
            assert res.exit_code == 2, (what, res.output[-1500:])
        if args[0] == "verify" and res.exit_code == 1:  # consistent edits of outcomes: the points refute them
            assert json.loads(res.stdout)["passed"] is False and _files(hostile_root) == before, what
            OUTCOMES["edited numbers: exit 1"] = OUTCOMES.get("edited numbers: exit 1", 0) + 1
        else:
            check_hostile(res, hostile_root, before, "work/out", what)
        if res.exit_code == 0:
            assert _numbers(args, res, hostile_root) == clean_numbers[which], (what, res.output[-1500:])
        shutil.rmtree(hostile_root / "work" / "out", ignore_errors=True)

    run()


def test_enough_cases_ran():
    """At least 500 generated cases in all, 300 of them hostile files (run with ``-s`` to see the count)."""
    total = sum(CASES.values())
    print(f"\nCLI fuzz cases: {CASES} = {total}; in-process outcomes: {OUTCOMES}")
    if CASES["options"] and CASES["cards"]:  # the whole file ran (not a -k selection)
        assert total >= 500, CASES
    if CASES["hostile cards"] and CASES["hostile reports"] and CASES["hostile cache"]:
        assert sum(CASES[k] for k in HOSTILE_CASES) >= 300, CASES
