"""Every code block of README.md and docs/ that a user would run is run here, on the CPU, as written.

A block a user runs is fenced ```bash or ```python. Each one either runs here or is preceded by
``<!-- not run: REASON -->`` saying why not (a GPU, a download, an upload, an install, a fragment). A page's blocks
run in order in one fresh folder, as a reader runs the page top to bottom (one cache for all pages): a block finds
the card or report an earlier block of its page wrote. Sizes are made small only through the variables a block
itself sets on a line of its own (``N=200`` in bash, ``N = 200`` in Python; :data:`SMALL`), so what runs is what
the reader sees. A block fenced without a language
(or ``text``) is output or a formula and must hold no command. tests/test_docs.py parses every `mixzoo` command
against the CLI and checks every cited path; this file runs them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
RUN_LANGS = {"bash": "bash", "sh": "bash", "shell": "bash", "python": "python", "py": "python"}
# the documented size variables and the values the test gives them: evaluation images, calibration images, images
# per trade-off curve point, images certified by Monte Carlo and its noise samples per image
SMALL = {"N": "20", "N_CALIB": "20", "CURVE_N": "5", "N_MC": "4", "SAMPLES": "200"}
# pages whose every row runs the full `adaptive` attack on a Fashion-MNIST mixture (seconds per image): smaller still
SMALLER = {"docs/tutorials/evaluating.md": {"N": "4"}, "docs/methods/linear.md": {"N": "1", "N_CALIB": "10"}}
# a block run in bf16 on a CPU that emulates bfloat16 (mixzoo warns that it is slower there than float32): smaller
EMULATED_BF16 = {"N": "1", "CURVE_N": "2"}
SNIPPET = re.compile(r'^--8<-- "([^"]+)"\s*$', re.M)  # mkdocs snippets: a file included whole
NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<reason>.*?)\s*-->\s*$")
COMMAND_START = re.compile(r"^\s*(mixzoo|pip|make|torchrun|srun|python|import|from \S+ import)(?=\s|$)")


@dataclass(frozen=True)
class Block:
    doc: str
    line: int
    lang: str  # "bash", "python" or "" (output, formulas)
    body: str
    not_run: str | None  # the reason given in the marker before the block, None when it runs

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of ``path``, each with the `not run` reason of the line just before it (blank lines
    between allowed)."""
    text = path.read_text()
    found = []
    for m in re.finditer(r"^```([^\n]*)\n(.*?)^```", text, flags=re.S | re.M):
        before = [ln for ln in text[:m.start()].splitlines() if ln.strip()]
        marker = NOT_RUN.search(before[-1]) if before else None
        reason = marker.group("reason") if marker else None
        included = SNIPPET.findall(m.group(2))
        lang = RUN_LANGS.get(m.group(1).strip().split(" ")[0], "")
        if lang and included and not SNIPPET.sub("", m.group(2)).strip():  # a file shown whole: it runs where it is
            assert all((ROOT / f).is_file() for f in included), f"{path}: a block includes a missing file {included}"
            reason = reason or f"{', '.join(included)}: a file of a package whose own tests run it"
        found.append(Block(path.relative_to(ROOT).as_posix(), text[:m.start()].count("\n") + 1,
                           lang, m.group(2), reason))
    return found


ALL = [b for doc in DOCS for b in blocks(doc)]
RUNNABLE = [b for b in ALL if b.lang and b.not_run is None]
RUN_DOCS = sorted({b.doc for b in RUNNABLE}, key=[d.relative_to(ROOT).as_posix() for d in DOCS].index)


def small(block: Block, *, emulated_bf16: bool = False) -> str:
    """The block with each :data:`SMALL` variable it sets given the small value (:data:`SMALLER` for its page;
    :data:`EMULATED_BF16` for a block run with ``--precision bf16`` when ``emulated_bf16``), on the assignment line
    only."""
    body = block.body
    slow = EMULATED_BF16 if emulated_bf16 and "--precision bf16" in body else {}
    for name, value in {**SMALL, **SMALLER.get(block.doc, {}), **slow}.items():
        assign = f"{name}=" if block.lang == "bash" else f"{name} = "
        body = re.sub(rf"^{re.escape(assign)}\S+(?=[ \t]*(#.*)?$)", assign + value, body, flags=re.M)
    return body


def test_every_command_block_says_its_language():
    """A block holding a command is fenced bash or python, so this file sees it."""
    bad = [b.id for b in ALL if not b.lang and any(COMMAND_START.match(ln) for ln in b.body.splitlines())]
    assert not bad, f"blocks with commands but no bash/python fence: {bad}"


def test_every_block_not_run_gives_a_reason():
    markers = [(b.id, b.not_run) for b in ALL if b.not_run is not None]
    assert all(reason for _, reason in markers), [m for m in markers if not m[1]]
    untagged = [b.id for b in ALL if b.not_run is not None and not b.lang]
    assert not untagged, f"a `not run` marker before a block that is not bash/python: {untagged}"
    for doc in DOCS:  # a marker that does not stand before a block
        text = doc.read_text()
        for m in re.finditer(r"<!--\s*not run:.*?-->", text):
            after = text[m.end():].lstrip("\n")
            assert after.startswith("```"), f"{doc.name}: a `not run` marker not followed by a block: {m.group(0)}"


def test_the_quick_starts_run():
    """The README's quick start (CLI and Python) and the home page's first steps are among the blocks run."""
    ids = {b.doc for b in RUNNABLE}
    assert {"README.md", "docs/index.md"} <= ids, ids
    readme = [b for b in RUNNABLE if b.doc == "README.md"]
    assert {"bash", "python"} <= {b.lang for b in readme}
    assert any("mixzoo bench" in b.body for b in readme)


def test_small_sizes_only_through_the_block_s_variables():
    """The substitution touches the assignment of a documented variable and nothing else."""
    block = Block("x.md", 1, "bash", "N=200   # images\nmixzoo bench card.toml --n $N --out bench/\nNN=200\n", None)
    assert small(block) == "N=20   # images\nmixzoo bench card.toml --n $N --out bench/\nNN=200\n"
    py = Block("x.md", 1, "python", "N = 200\nreport = bench('card.toml', n=N)\nM = 200\n", None)
    assert small(py) == "N = 20\nreport = bench('card.toml', n=N)\nM = 200\n"
    paged = Block("docs/tutorials/evaluating.md", 1, "bash", "N=1000\nCURVE_N=300   # per point\n", None)
    assert small(paged) == f"N={SMALLER[paged.doc]['N']}\nCURVE_N={SMALL['CURVE_N']}   # per point\n"
    bf16 = Block(paged.doc, 1, "bash", "N=1000\nmixzoo bench c.toml --precision bf16 --n $N\n", None)
    assert small(bf16, emulated_bf16=True).startswith(f"N={EMULATED_BF16['N']}\n")
    assert small(bf16) == small(bf16, emulated_bf16=False) and small(bf16).startswith(f"N={SMALLER[bf16.doc]['N']}\n")
    assert small(paged, emulated_bf16=True) == small(paged)  # only a bf16 block
    assert all(set(sizes) <= set(SMALL) for sizes in {**SMALLER, "bf16": EMULATED_BF16}.values()), SMALLER
    literal = r"--(n|n-calib|curve-n|samples) \d+|\b(n|n_calib|curve_n|samples)=\d+"
    big = [b.id for b in RUNNABLE if re.search(literal, b.body)]
    assert not big, f"blocks run here with a literal size instead of N: {big}"


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for the pages of this file, as a reader's machine has: a page run after another finds the
    calibration attacks and rows the earlier one computed."""
    return tmp_path_factory.mktemp("cache")


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("doc", RUN_DOCS)
def test_page_runs(doc: str, tmp_path: Path, shared_cache: Path) -> None:
    """The page's blocks, in order, in one fresh folder, on the CPU, with the small sizes: each exits 0."""
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "MIXZOO_CACHE": str(shared_cache), "MIXZOO_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    from mixzoo.attacks.precision import native_bf16_cpu

    emulated = not native_bf16_cpu()
    for block in (b for b in RUNNABLE if b.doc == doc):
        body = small(block, emulated_bf16=emulated)
        cmd = ["bash", "-euo", "pipefail", "-c", body] if block.lang == "bash" else [sys.executable, "-c", body]
        done = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=1700)
        assert done.returncode == 0, f"{block.id} failed:\n{(done.stdout + done.stderr)[-3000:]}"
