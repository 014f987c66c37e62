"""Shared fixtures: an isolated cache per test session, offline hub settings, quiet threads; the markers' rules.

Test modules are imported with ``--import-mode=importlib`` (same-named files in different folders do not collide),
so this folder is put on ``sys.path`` here: the helper modules next to this file (``digits_models``, ``hub_cache``,
``autoattack_reference``) import by their plain names from any test folder."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))


# modules whose every test starts a Python process that imports torch (pip installs, fresh virtual environments)
SUBPROCESS_MODULES = {"e2e/test_third_party_plugin.py"}


def pytest_collection_modifyitems(config, items):
    """Every test of :data:`SUBPROCESS_MODULES` is marked ``subprocess``; tests marked ``gpu`` are skipped where CUDA
    is not available."""
    for item in items:
        if Path(item.fspath).resolve().relative_to(TESTS).as_posix() in SUBPROCESS_MODULES:
            item.add_marker(pytest.mark.subprocess)
    gpu = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu:
        return
    import torch

    if not torch.cuda.is_available():
        skip = pytest.mark.skip(reason="needs CUDA (marker gpu)")
        for item in gpu:
            item.add_marker(skip)


@pytest.fixture()
def cache_dir(tmp_path, monkeypatch):
    """A fresh mixzoo cache directory, also exported as MIXZOO_CACHE for subprocesses."""
    path = tmp_path / "cache"
    monkeypatch.setenv("MIXZOO_CACHE", str(path))
    return path


@pytest.fixture(scope="session", autouse=True)
def _one_intra_op_thread():
    """Every test runs torch with one intra-op thread: the models here are tiny, and on a 2-core machine a second
    thread per op costs more than it gives (tests that need another count set it themselves)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models: one intra-op thread avoids oversubscribing the shared 2-core machine (10x faster here)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def pair(one_thread):
    """The built-in digits pair (ABC digits-std, RBC digits-pgd), for the trained methods' tests."""
    from mixzoo.zoo.models import load_model

    return load_model("digits-std"), load_model("digits-pgd")


@pytest.fixture(scope="module")
def train_data():
    """200 images of the digits train split (the trained methods' training data)."""
    from mixzoo.zoo.data import load_dataset

    d = load_dataset("digits", "train", n=200)
    return d.images, d.labels


@pytest.fixture()
def hf_cache(tmp_path, monkeypatch):
    """An empty Hugging Face cache, offline. huggingface_hub read HF_HUB_CACHE at import, so patch its constants
    (read at call time by hf_hub_download); test_real_loading's test_hub_cache_patch_takes_effect checks this."""
    from huggingface_hub import constants

    cache = tmp_path / "hf"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


@pytest.fixture()
def rb_dir(tmp_path, monkeypatch):
    """An empty RobustBench model directory, named by MIXZOO_ROBUSTBENCH_DIR."""
    path = tmp_path / "robustbench"
    monkeypatch.setenv("MIXZOO_ROBUSTBENCH_DIR", str(path))
    return path


class FixedLogitsData:
    """Stands for a calibration split in :func:`fixed_logits` runs: labels only, fingerprint ``f00d``."""

    name, fingerprint = "toy", "f00d"

    def __init__(self, labels):
        self.labels = labels

    def __len__(self) -> int:
        return len(self.labels)


@pytest.fixture()
def fixed_logits(monkeypatch):
    """``install(labels, clean, mmaa)``: App. D.9's check (mixzoo.methods.mixednuts.approximation) on hand-chosen
    logits. The RBC becomes the identity, the split a :class:`FixedLogitsData` of ``labels``, its clean logits
    ``clean`` and its MMAA the callable ``mmaa(rbc, data, transform=None, **settings) -> {"logits": ...}``; the
    counting under test is real, only the attacks are replaced by fixed tensors."""
    from torch import nn

    import mixzoo.methods.mixednuts.fitting
    import mixzoo.zoo.data
    import mixzoo.zoo.pairs

    def install(labels, clean, mmaa) -> None:
        monkeypatch.setattr(mixzoo.zoo.pairs, "card_model", lambda *a, **kw: nn.Identity())
        monkeypatch.setattr(mixzoo.zoo.pairs, "card_dataset", lambda *a, **kw: "toy")
        monkeypatch.setattr(mixzoo.zoo.pairs, "check_model_fits", lambda *a, **kw: None)
        monkeypatch.setattr(mixzoo.zoo.pairs, "cached_logits", lambda *a, **kw: clean)
        monkeypatch.setattr(mixzoo.methods.mixednuts.calibration_data, "cached_mmaa", mmaa)
        monkeypatch.setattr(mixzoo.zoo.data, "load_dataset", lambda *a, **kw: FixedLogitsData(labels))

    return install


# a quick digits MixedNUTS fit: 120 calibration images, MMAA with 8 iterations and 2 targets, batches of 60
FAST_DIGITS_MIX = dict(n_calib=120, n_iter=8, n_target_classes=2, batch_size=60, progress=False)


@pytest.fixture(scope="session")
def digits_card(tmp_path_factory):
    """A MixedNUTS card for digits-std + digits-pgd fitted with :data:`FAST_DIGITS_MIX` (shared, read-only)."""
    from mixzoo.methods.mixednuts.fitting import mix

    root = tmp_path_factory.mktemp("digits-card")
    path = root / "card.toml"
    mix("digits-std", "digits-pgd", out=path, cache_dir=root / "cache", **FAST_DIGITS_MIX)
    return path
