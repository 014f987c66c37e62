"""Papers are cited by author and year (docs/references.md), never by the internal numbers of the copies the
project was built from (``000`` ... ``004``): not in help texts, docstrings, registry sources, figures or docs."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# a bare 000-004 that is not part of a number (0.001, 10,000), a time, a path or an identifier
CODE = re.compile(r"(?<![\d.,:/\w-])00[0-4](?![\d\w]|\.\d|/)")
# "paper Eq. 5": which paper? (the reader cannot tell without an author)
UNNAMED = re.compile(r"\bpaper (?:Eq|App|Sec|Table|Algorithm|Fig|footnote|Thm|Lemma)\b")


def _files() -> list[Path]:
    found = [p for root in ("mixzoo", "plugins", "docs") for p in (ROOT / root).rglob("*")
             if p.suffix in (".py", ".md", ".toml", ".yml") and p.is_file()]
    return found + [ROOT / name for name in ("README.md", "CONTRIBUTING.md", "mkdocs.yml")]


def test_no_internal_paper_codes_in_user_visible_text():
    hits = []
    for path in _files():
        for k, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if CODE.search(line) or UNNAMED.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{k}: {line.strip()}")
    assert not hits, "cite papers by author and year (docs/references.md):\n" + "\n".join(hits[:20])


def test_the_pattern_finds_codes_and_spares_numbers():
    assert CODE.search("paper 000 Table 5") and CODE.search("(001 Lemma 3.2)") and CODE.search("003's choice")
    assert not any(CODE.search(t) for t in ("0.001", "10,000 images", "x + 0.001 * n", "seed_001", "00:01"))


def test_references_page_does_not_number_the_papers():
    text = (ROOT / "docs" / "references.md").read_text(encoding="utf-8")
    assert not re.search(r"^\d+\. ", text, flags=re.M)
    for handle in ("Bai et al. 2024a", "Bai et al. 2024b", "Bai et al. 2024c", "Bai et al. (local smoothing)"):
        assert f"**{handle}**" in text


def test_every_cited_handle_is_defined_on_the_references_page():
    text = (ROOT / "docs" / "references.md").read_text(encoding="utf-8")
    used = set()
    for path in _files():
        used |= set(re.findall(r"Bai et al\. 2024[a-z]", path.read_text(encoding="utf-8")))
    assert used and all(f"**{h}**" in text for h in used), used


def test_info_of_a_published_pair_model_cites_the_paper_by_author():
    from typer.testing import CliRunner

    from mixzoo.cli import app

    result = CliRunner().invoke(app, ["info", "peng2023-rawrn-70-16"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "Bai et al. 2024a" in result.output and not CODE.search(result.output)
