from __future__ import annotations

import os

import pytest
import torch

from mixzoo.cache import Cache, atomic_write_text, batched_cached, content_key


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
