"""The one reader (mixzoo.core.reading): every file mixzoo reads is size-checked before reading, nesting-checked
before parsing, refused when it names a key twice, each in one line naming the file; and no other module of the
library parses JSON or TOML."""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
import tracemalloc
from pathlib import Path

import pytest

from mixzoo.core.card import MixCard
from mixzoo.core.errors import InputError, RegistryError
from mixzoo.core.reading import CARD_BYTES, MAX_DEPTH, check_depth, check_text_depth, parse_text, read_data

ROOT = Path(__file__).resolve().parents[2]
GRID_CARD = ROOT / "benchmarks" / "results" / "cards" / "fmnist_mixednuts.toml"


def _one_line(err: pytest.ExceptionInfo, *needles: str) -> str:
    text = str(err.value)
    assert "\n" not in text and all(n in text for n in needles), text
    return text


def test_no_module_but_the_reader_parses_json_or_toml():
    """``json.load(s)`` / ``tomllib.load(s)`` (or their names imported) only in mixzoo/core/reading.py."""
    call = re.compile(r"\b(json|tomllib|tomli)\s*\.\s*loads?\s*\("
                      r"|from\s+(json|tomllib|tomli)\s+import\s+[^\n]*\bloads?\b")
    found = []
    for folder in (ROOT / "mixzoo", ROOT / "plugins"):
        for path in folder.rglob("*.py"):
            if path == ROOT / "mixzoo" / "core" / "reading.py":
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
                if call.search(line.split("#")[0]) and not line.lstrip().startswith(('"', "'", "``")):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, found
    assert call.search("data = json.loads(text)") and call.search("from tomllib import loads")  # the pattern bites


@pytest.mark.parametrize("text", ['{"a": 1, "a": 2}', '{"x": {"robust_accuracy": 0.25, "robust_accuracy": 0.9}}',
                                  '[{"k": 1}, {"k": 2, "k": 3}]'])
def test_a_json_key_named_twice_is_refused_in_one_line(text):
    with pytest.raises(InputError) as err:
        parse_text(text, "json", "r.json")
    assert _one_line(err, "r.json").startswith("r.json: field '")
    assert "twice" in str(err.value)
    assert parse_text('[{"k": 1}, {"k": 2}]', "json", "r.json") == [{"k": 1}, {"k": 2}]  # one per object is fine


def test_a_toml_key_named_twice_is_refused_in_one_line(tmp_path):
    path = tmp_path / "card.toml"
    path.write_text('schema_version = 2\nmethod = "linear"\nmethod = "mixednuts"\n')
    with pytest.raises(InputError) as err:
        MixCard.load(path)
    _one_line(err, str(path), "not valid TOML")


@pytest.mark.parametrize("kind", ["json", "toml"])
def test_nesting_is_measured_on_the_text_as_on_the_values(kind):
    """The text's bracket depth gives the same verdict as the parsed value's, brackets in strings and comments
    not counted."""
    def text(depth: int, extra: str = "") -> str:
        inner = "[" * depth + "]" * depth
        return f'{{"a": {inner}{extra}}}' if kind == "json" else f"a = {inner}{extra}\n"

    for depth in (MAX_DEPTH - 1, MAX_DEPTH):
        too_deep = depth >= MAX_DEPTH  # the object / table is one level more
        for check in (lambda t: check_text_depth(t, kind, "f"), lambda t: check_depth(parse_text(t, kind, "f"), "f")):
            if too_deep:
                with pytest.raises(InputError, match="nested deeper than"):
                    check(text(depth))
            else:
                check(text(depth))
    string = ('{"a": "' + "[" * 500 + '"}' if kind == "json"
              else 'a = "' + "[" * 500 + '" # ' + "{" * 500 + "\nb = '" + "[" * 90 + "'\n")
    check_text_depth(string, kind, "f")
    assert parse_text(string, kind, "f")["a"] == "[" * 500


@pytest.mark.parametrize("suffix", [".json", ".toml"])
def test_a_file_nested_10000_deep_is_refused_before_parsing(tmp_path, suffix):
    deep = "[" * 10_000 + "]" * 10_000
    path = tmp_path / f"f{suffix}"
    path.write_text(f'{{"a": {deep}}}' if suffix == ".json" else f"a = {deep}\n")
    with pytest.raises(InputError) as err:
        read_data(path)
    _one_line(err, str(path), "nested deeper than")


def test_a_card_too_large_is_refused_on_its_size_before_reading(tmp_path):
    """A 50 MB card (a sparse file: nothing is read) is one line in well under a second, with no memory to
    speak of."""
    path = tmp_path / "card.toml"
    with open(path, "wb") as fh:
        fh.truncate(50 * 1024 * 1024)
    tracemalloc.start()
    t0 = time.perf_counter()
    with pytest.raises(InputError) as err:
        MixCard.load(path)
    seconds, peak = time.perf_counter() - t0, tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    _one_line(err, str(path), f"{CARD_BYTES:,}")
    assert seconds < 1 and peak < 4 * 1024 * 1024, (seconds, peak)


def test_a_fifo_is_refused_without_reading_it(tmp_path):
    fifo = tmp_path / "report.json"
    os.mkfifo(fifo)
    with pytest.raises(InputError) as err:
        read_data(fifo)
    _one_line(err, str(fifo), "not a regular file")


def test_a_card_sidecar_nested_10000_deep_with_its_digest_is_one_line(tmp_path):
    card = MixCard.load(GRID_CARD).save(tmp_path / "card.toml")
    side = tmp_path / "card.arrays.json"
    text = '{"format": "mixzoo card arrays 1", "arrays": ' + "[" * 10_000 + "]" * 10_000 + "}"
    side.write_text(text)
    old = re.search(r'sha256 = "([0-9a-f]{64})"', card.read_text()).group(1)
    card.write_text(card.read_text().replace(old, hashlib.sha256(text.encode()).hexdigest()))
    with pytest.raises(InputError) as err:
        MixCard.load(card)
    _one_line(err, str(side), "nested deeper than")
    side.write_text(text.replace("[" * 10_000 + "]" * 10_000, '{"a": 1, "a": 2}'))
    card.write_text(card.read_text().replace(hashlib.sha256(text.encode()).hexdigest(),
                                             hashlib.sha256(side.read_bytes()).hexdigest()))
    with pytest.raises(InputError) as err:
        MixCard.load(card)
    _one_line(err, str(side), "'a' appears twice")


def test_a_registry_file_nested_deep_or_naming_a_key_twice_is_one_line(tmp_path, monkeypatch):
    from mixzoo.core.registry import load_registry_file

    path = tmp_path / "registry.toml"
    for text, needle in [("x = " + "[" * 10_000 + "]" * 10_000 + "\n", "nested deeper than"),
                         ('[models.a]\nrole = "robust"\nrole = "accurate"\n', "not valid TOML"),
                         ('models = 5\n', "field 'models'")]:
        path.write_text(text)
        with pytest.raises(RegistryError) as err:
            load_registry_file(path)
        _one_line(err, str(path), needle)


def test_a_damaged_plugin_faults_file_reads_as_empty(tmp_path, monkeypatch):
    from mixzoo.core.plugins.failures import failure_file, read_kept

    monkeypatch.setenv("MIXZOO_CACHE", str(tmp_path))
    for text in ["[" * 10_000 + "]" * 10_000, '{"p": 1, "p": 2}', "\xff", "{"]:
        Path(failure_file()).write_text(text, encoding="latin-1")
        assert read_kept() == {}
    Path(failure_file()).write_text(json.dumps({"p": {"version": "1"}}))
    assert read_kept() == {"p": {"version": "1"}}


def test_a_cache_entry_naming_a_key_twice_is_a_miss(tmp_path):
    from mixzoo.attacks.outcome_cache import read_outcome

    path = tmp_path / "entry.json"
    path.write_text('{"key": "k", "key": "k"}')
    with pytest.warns(UserWarning, match="appears twice"):
        assert read_outcome(path, "k", 0, 1) is None


def test_every_committed_json_and_toml_file_the_library_reads_passes_the_reader():
    """The reader refuses nothing mixzoo wrote: every committed card, report, registry and cache-like file."""
    files = [p for p in (ROOT / "benchmarks", ROOT / "plugins", ROOT / "mixzoo") for p in p.rglob("*")
             if p.suffix in (".json", ".toml") and p.is_file()]
    assert len(files) > 30
    for path in files:
        read_data(path, limit=max(CARD_BYTES, path.stat().st_size))
