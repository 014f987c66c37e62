"""Each learned-gate method page's "Declared attacks" table names every extra attack the method declares for its
published card, so a declared attack (such as ``gate-logit``) cannot go undocumented."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mixzoo.core.card import MixCard

ROOT = Path(__file__).resolve().parents[1]

CASES = [  # page, a card of the method
    ("docs/methods/adaptive-smoothing.md", "plugins/cards/fmnist-adaptive-smoothing-c.toml"),
    ("docs/methods/local-smoothing.md", "benchmarks/results/local_smoothing_fmnist/adaptive_full_split/card.toml"),
]


def documented(page: str) -> set[str]:
    """The code-span names in the first column of the table under the page's "## Declared attacks"."""
    text = (ROOT / page).read_text()
    section = text.split("## Declared attacks", 1)[1].split("\n## ", 1)[0]
    firsts = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    return {name for cell in firsts for name in re.findall(r"`([^`]+)`", cell)}


@pytest.mark.parametrize(("page", "card"), CASES)
def test_every_declared_attack_is_in_the_page_table(page, card):
    c = MixCard.load(ROOT / card)
    declared = {extra.name for extra in c.mixing_method.extra_attacks(c)}
    assert "gate-logit" in declared
    missing = declared - documented(page)
    assert not missing, f"{page}: the 'Declared attacks' table lacks {sorted(missing)} (declared by {card})"
