"""Shared fixtures: an isolated cache per test session, offline hub settings, quiet threads."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture()
def cache_dir(tmp_path, monkeypatch):
    """A fresh mixzoo cache directory, also exported as MIXZOO_CACHE for subprocesses."""
    path = tmp_path / "cache"
    monkeypatch.setenv("MIXZOO_CACHE", str(path))
    return path


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models: one intra-op thread avoids oversubscribing the shared 2-core machine (10x faster here)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
