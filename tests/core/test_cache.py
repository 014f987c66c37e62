from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mixzoo.core.cache import (
    Cache,
    atomic_write_text,
    batched_cached,
    check_writable,
    content_key,
    staged_directory,
)
from mixzoo.core.errors import InputError, MixzooError
from mixzoo.core.paths import cache_folder


def test_content_key_is_order_independent_and_sensitive():
    assert content_key({"a": 1, "b": [1, 2]}) == content_key({"b": [1, 2], "a": 1})
    assert content_key({"a": 1}) != content_key({"a": 2})


def test_atomic_write_leaves_no_temp_files(tmp_path):
    target = tmp_path / "sub" / "f.txt"
    atomic_write_text(target, "hello")
    assert target.read_text() == "hello"
    assert os.listdir(target.parent) == ["f.txt"]


def test_batched_cached_resumes_after_interruption(tmp_path):
    cache = Cache(tmp_path)
    calls: list[tuple[int, int]] = []

    def compute(a, b):
        calls.append((a, b))
        if len(calls) == 3 and not hasattr(compute, "failed"):
            compute.failed = True
            raise KeyboardInterrupt  # simulated interruption in the third batch
        return {"x": torch.arange(a, b).float()}

    with pytest.raises(KeyboardInterrupt):
        batched_cached(cache, "k", "key", 10, 3, compute, {})
    assert calls == [(0, 3), (3, 6), (6, 9)]
    assert not cache.path("k", "key").exists()  # nothing half-written as a complete entry
    calls.clear()
    out = batched_cached(cache, "k", "key", 10, 3, compute, {})
    assert calls == [(6, 9), (9, 10)]  # only what was missing
    assert torch.equal(out["x"], torch.arange(10).float())
    calls.clear()
    again = batched_cached(cache, "k", "key", 10, 3, compute, {})
    assert calls == [] and torch.equal(again["x"], out["x"])
    assert cache.hits == ["k/key"]


def test_damaged_entry_is_recomputed(tmp_path):
    cache = Cache(tmp_path)
    batched_cached(cache, "k", "key", 4, 4, lambda a, b: {"x": torch.ones(b - a)}, {})
    cache.path("k", "key").write_bytes(b"garbage")
    out = batched_cached(cache, "k", "key", 4, 4, lambda a, b: {"x": torch.zeros(b - a)}, {})
    assert torch.equal(out["x"], torch.zeros(4))


def test_atomic_writes_get_ordinary_file_permissions(tmp_path):
    import os

    mask = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "report.json", "{}")
        assert (tmp_path / "report.json").stat().st_mode & 0o777 == 0o644  # mkstemp alone would give 0600
        os.umask(0o077)
        atomic_write_text(tmp_path / "private.json", "{}")
        assert (tmp_path / "private.json").stat().st_mode & 0o777 == 0o600
    finally:
        os.umask(mask)


@pytest.mark.parametrize("fail_in", ["fsync", "replace"])
def test_an_interrupted_write_keeps_the_old_file_and_leaves_no_temp_file(tmp_path, monkeypatch, fail_in):
    target = tmp_path / "card.toml"
    atomic_write_text(target, "old")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt  # e.g. Ctrl-C between writing and renaming

    monkeypatch.setattr(os, fail_in, interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_text(target, "new and longer")
    monkeypatch.undo()
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["card.toml"]


def test_a_damaged_partial_batch_is_recomputed(tmp_path):
    cache = Cache(tmp_path)
    calls: list[tuple[int, int]] = []

    def compute(a, b):
        calls.append((a, b))
        return {"x": torch.arange(a, b).float()}

    for index, start in enumerate(range(0, 9, 3)):  # three saved batches, as an interrupted run leaves them
        cache.save_batch("k", "key", index, compute(start, start + 3))
    (cache.partial_dir("k", "key") / "000001.safetensors").write_bytes(b"garbage")
    calls.clear()
    out = batched_cached(cache, "k", "key", 10, 3, compute, {})
    assert calls == [(3, 6), (9, 10)]  # the damaged batch and the missing one, nothing else
    assert torch.equal(out["x"], torch.arange(10).float())
    assert not cache.partial_dir("k", "key").exists()


@pytest.mark.parametrize(("first_size", "second_size", "n"), [(4, 2, 8), (4, 2, 10), (2, 4, 9), (3, 5, 11)])
def test_a_resume_with_another_batch_size_never_misaligns_rows(tmp_path, first_size, second_size, n):
    """Batches saved under one batch size are not concatenated into a run with another: every row of the result
    is the row ``compute`` gives for that image, whichever saved batch files an interrupted run left."""
    cache = Cache(tmp_path)

    def interrupted(a, b):
        if a > 0:
            raise KeyboardInterrupt
        return {"x": torch.arange(a, b)}

    with pytest.raises(KeyboardInterrupt):
        batched_cached(cache, "k", "key", n, first_size, interrupted, {})
    # the last batch of an interrupted run can have as many rows as another batch size's batch at that index
    last = (n - 1) // first_size
    cache.save_batch("k", "key", last, {"x": torch.arange(last * first_size, n)},
                     rows=(last * first_size, n))
    out = batched_cached(cache, "k", "key", n, second_size, lambda a, b: {"x": torch.arange(a, b)}, {})
    assert out["x"].tolist() == list(range(n))


def test_saved_batches_from_the_same_batch_size_are_still_reused(tmp_path):
    cache = Cache(tmp_path)
    cache.save_batch("k", "key", 1, {"x": torch.tensor([-2, -3])}, rows=(2, 4))
    out = batched_cached(cache, "k", "key", 5, 2, lambda a, b: {"x": torch.arange(a, b)}, {})
    assert out["x"].tolist() == [0, 1, -2, -3, 4]


# --------------------------------------------------------------------------------------------------- cache.py
def test_content_key_is_24_hex_digits_and_canonical_for_nested_and_non_json_values():
    key = content_key({"a": 1})
    assert len(key) == 24 and all(ch in "0123456789abcdef" for ch in key)
    assert content_key({"x": {"b": 1, "a": 2}}) == content_key({"x": {"a": 2, "b": 1}})
    assert content_key({"p": Path("w/model.pt")}) == content_key({"p": "w/model.pt"})  # non-JSON values by str()


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=5), st.integers() | st.text(max_size=5), min_size=2, max_size=6))
def test_content_key_ignores_key_order(parts):
    assert content_key(dict(reversed(list(parts.items())))) == content_key(parts)


def test_check_writable_probes_an_existing_directory_itself(tmp_path, monkeypatch):
    """An existing output directory that refuses writes is refused even when its parent accepts them."""
    locked = tmp_path / "locked"
    locked.mkdir()
    real = tempfile.mkstemp

    def mkstemp(*args, dir=None, **kwargs):
        if dir is not None and Path(dir) == locked:
            raise PermissionError(13, "Permission denied")
        return real(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    with pytest.raises(InputError, match="is not writable"):
        check_writable(locked, directory=True)


def test_check_writable_leaves_no_probe_file(tmp_path):
    (tmp_path / "out").mkdir()
    check_writable(tmp_path / "card.toml", what="card")
    check_writable(tmp_path / "out", directory=True)
    assert sorted(os.listdir(tmp_path)) == ["out"] and os.listdir(tmp_path / "out") == []


def test_atomic_write_renames_from_the_same_directory(tmp_path, monkeypatch):
    """A rename within one directory is atomic (same file system); the temp file must live next to the target."""
    sources = []
    real = os.replace

    def replace(src, dst):
        sources.append((Path(src), Path(dst)))
        return real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    target = tmp_path / "d" / "f.json"
    atomic_write_text(target, "{}")
    ((src, dst),) = sources
    assert dst == target and src.parent == target.parent and src != target


def test_atomic_write_fsyncs_before_renaming(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append("replace"), real_replace(a, b))[1])
    atomic_write_text(tmp_path / "f.txt", "data")
    assert events == ["fsync", "replace"]


def test_atomic_write_leaves_the_umask_unchanged(tmp_path):
    mask = os.umask(0o027)
    try:
        atomic_write_text(tmp_path / "a.txt", "x")
        assert os.umask(0o027) == 0o027
        assert (tmp_path / "a.txt").stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(mask)


def test_staged_directory_replaces_the_set_and_removes_stale_members(tmp_path):
    out = tmp_path / "report"
    out.mkdir()
    (out / "a.json").write_text("old a")
    (out / "b.png").write_text("old b")
    (out / "mine.txt").write_text("not part of the set")
    with staged_directory(out, ("a.json", "b.png")) as stage:
        (stage / "a.json").write_text("new a")
        assert not (out / "a.json").read_text() == "new a"  # nothing visible before the block completes
    assert (out / "a.json").read_text() == "new a"
    assert not (out / "b.png").exists()  # an older run's file no longer passes for this one's
    assert (out / "mine.txt").read_text() == "not part of the set"
    assert sorted(os.listdir(tmp_path)) == ["report"]  # no stage directory left behind


def test_staged_directory_failure_leaves_the_output_as_it_was(tmp_path):
    out = tmp_path / "report"
    out.mkdir()
    (out / "a.json").write_text("old a")
    (out / "b.png").write_text("old b")
    with pytest.raises(RuntimeError), staged_directory(out, ("a.json", "b.png")) as stage:
        (stage / "a.json").write_text("new a")
        raise RuntimeError("plot failed")
    assert (out / "a.json").read_text() == "old a" and (out / "b.png").read_text() == "old b"
    assert sorted(os.listdir(tmp_path)) == ["report"]
    with pytest.raises(RuntimeError), staged_directory(tmp_path / "fresh", ("a.json",)) as stage:
        (stage / "a.json").write_text("x")
        raise RuntimeError
    assert not (tmp_path / "fresh").exists()


def test_cache_folder_follows_mixzoo_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MIXZOO_CACHE", str(tmp_path / "c"))
    assert cache_folder() == tmp_path / "c"
    monkeypatch.delenv("MIXZOO_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_folder() == tmp_path / "home" / ".cache" / "mixzoo"


def test_save_writes_the_description_next_to_the_tensors(tmp_path):
    import json

    cache = Cache(tmp_path)
    cache.save("k", "key", {"x": torch.arange(3)}, {"model": "m", "eps": 0.1})
    assert json.loads(cache.path("k", "key").with_suffix(".json").read_text()) == {"model": "m", "eps": 0.1}
    assert torch.equal(cache.load("k", "key")["x"], torch.arange(3))


def test_a_damaged_entry_is_treated_as_absent_and_removed(tmp_path):
    cache = Cache(tmp_path)
    cache.path("k", "key").parent.mkdir(parents=True)
    cache.path("k", "key").write_bytes(b"not safetensors")
    assert cache.load("k", "key") is None
    assert not cache.path("k", "key").exists() and cache.hits == []
    batch = cache.partial_dir("k", "key") / "000000.safetensors"
    batch.parent.mkdir(parents=True)
    batch.write_bytes(b"garbage")
    assert cache.load_batch("k", "key", 0) is None and not batch.exists()


def test_a_disabled_cache_neither_reads_nor_writes(tmp_path):
    Cache(tmp_path).save("k", "key", {"x": torch.ones(2)}, {})
    Cache(tmp_path).save_batch("k", "other", 0, {"x": torch.ones(2)})
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    off = Cache(tmp_path, enabled=False)
    assert off.load("k", "key") is None and off.load_batch("k", "other", 0) is None
    out = batched_cached(off, "k", "new", 5, 2, lambda a, b: {"x": torch.arange(a, b)}, {})
    assert torch.equal(out["x"], torch.arange(5))
    off.save("k", "more", {"x": torch.ones(1)}, {})
    off.save_batch("k", "more", 0, {"x": torch.ones(1)})
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_clear_removes_every_kind(tmp_path):
    cache = Cache(tmp_path / "root")
    cache.save("rbc-logits", "a", {"x": torch.ones(1)}, {})
    cache.save("mmaa", "b", {"x": torch.ones(1)}, {})
    cache.clear()
    assert not (tmp_path / "root").exists()


@pytest.mark.parametrize(("n", "batch_size"), [(10, 3), (9, 3), (1, 4), (7, 7)])
def test_progress_counts_every_example_once_computed_or_served(tmp_path, n, batch_size):
    cache = Cache(tmp_path)
    steps: list[int] = []
    out = batched_cached(cache, "k", "key", n, batch_size, lambda a, b: {"x": torch.arange(a, b)}, {}, steps.append)
    expected = [min(batch_size, n - start) for start in range(0, n, batch_size)]
    assert steps == expected and sum(steps) == n
    assert torch.equal(out["x"], torch.arange(n))
    steps.clear()
    batched_cached(cache, "k", "key", n, batch_size, lambda a, b: pytest.fail("recomputed"), {}, steps.append)
    assert steps == [n]


def test_an_empty_data_set_is_an_error_not_a_crash(tmp_path):
    with pytest.raises(MixzooError, match="empty"):
        batched_cached(Cache(tmp_path), "k", "key", 0, 4, lambda a, b: {"x": torch.arange(a, b)}, {})


def test_resume_uses_saved_batches_at_their_batch_index(tmp_path):
    """Batches saved by an earlier run (even with values a fresh run would not give) are reused, in batch order."""
    cache = Cache(tmp_path)
    cache.save_batch("k", "key", 0, {"x": torch.tensor([100, 101])})
    cache.save_batch("k", "key", 2, {"x": torch.tensor([104])})
    calls = []

    def compute(a, b):
        calls.append((a, b))
        return {"x": torch.arange(a, b)}

    out = batched_cached(cache, "k", "key", 5, 2, compute, {})
    assert calls == [(2, 4)]
    assert out["x"].tolist() == [100, 101, 2, 3, 104]


def test_a_complete_entry_with_other_rows_than_asked_is_computed_again_naming_the_file(tmp_path):
    """An entry of 30 rows where 100 are asked (an edited or foreign file) is a miss: one warning naming it, then
    the asked rows are computed and cached in its place."""
    import warnings

    from mixzoo.core.cache import Cache, batched_cached

    cache = Cache(tmp_path)
    cache.save("mmaa", "k", {"margin": torch.zeros(30)}, {"test": True})
    calls = []

    def compute(start, stop):
        calls.append((start, stop))
        return {"margin": torch.arange(start, stop, dtype=torch.float32)}

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = batched_cached(cache, "mmaa", "k", 100, 50, compute, {"test": True})
    assert torch.equal(out["margin"], torch.arange(100, dtype=torch.float32)) and calls == [(0, 50), (50, 100)]
    msgs = [str(w.message) for w in caught]
    assert len(msgs) == 1 and str(cache.path("mmaa", "k")) in msgs[0] and "30 rows where 100" in msgs[0]
    assert batched_cached(cache, "mmaa", "k", 100, 50, compute, {"test": True})["margin"].shape == (100,)
    assert len(calls) == 2  # the recomputed entry is reused
