"""Tests written from a mutation audit of mixzoo/mixing.py (Eq. 5 / Eq. 1 / Eq. 8, MixedClassifier) and
mixzoo/cache.py (content keys, atomic writes, staged directories, the batch cache). Expected mixtures are computed
here by hand from the paper's definitions, independently of ``mix_log_probs`` and ``rbc_transform``."""

from __future__ import annotations

import inspect
import math
import os
import tempfile
import warnings
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from mixzoo.cache import (
    Cache,
    atomic_write_text,
    batched_cached,
    check_writable,
    content_key,
    default_cache_dir,
    staged_directory,
)
from mixzoo.card import MixCard
from mixzoo.errors import InputError, MixzooError
from mixzoo.mixing import MixedClassifier, auxiliary_log_probs, mix_log_probs, weight_mismatches
from mixzoo.models import weight_hash

K = 4


# ----------------------------------------------------------------------------------------- independent references
def hand_transform(h: torch.Tensor, s: float, p: float, c: float) -> torch.Tensor:
    """Paper Eq. 4 written out: LN over classes (unbiased variance + 1e-8, the authors' normalize_topk), GELU (erf
    form) clamp, signed power, scale."""
    h = h.double()
    mean = h.mean(-1, keepdim=True)
    std = (((h - mean) ** 2).sum(-1, keepdim=True) / (h.shape[-1] - 1) + 1e-8).sqrt()
    u = (h - mean) / std + c
    clamped = 0.5 * u * (1 + torch.erf(u / math.sqrt(2)))
    return s * clamped.abs() ** p * torch.sign(clamped)


def softmax(z: torch.Tensor) -> torch.Tensor:
    e = torch.exp(z - z.max(-1, keepdim=True).values)
    return e / e.sum(-1, keepdim=True)


def hand_mixture(g, h, s, p, c, alpha, temperature):
    """Eq. 5: (1 - alpha) * softmax(g / T) + alpha * softmax(M(s, p, c)(h)), T = 0 meaning the one-hot argmax."""
    g = g.double()
    if temperature == 0:
        pg = torch.zeros_like(g)
        pg[torch.arange(len(g)), g.argmax(-1)] = 1.0
    else:
        pg = softmax(g / temperature)
    return (1 - alpha) * pg + alpha * softmax(hand_transform(h, s, p, c))


class Net(nn.Module):
    """A tiny real classifier on 1x2x2 images."""

    def __init__(self, seed: int, scale: float = 1.0):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.lin = nn.Linear(4, K)
        with torch.no_grad():
            self.lin.weight.copy_(torch.randn(K, 4, generator=gen) * scale)
            self.lin.bias.copy_(torch.randn(K, generator=gen))

    def forward(self, x):
        return self.lin(x.flatten(1))


def images(n=5, seed=0):
    return torch.rand(n, 1, 2, 2, generator=torch.Generator().manual_seed(seed))


# -------------------------------------------------------------------------------------------------- mixing.py
G = torch.tensor([[2.0, 0.5, -1.0, 0.0], [0.1, 0.3, 3.0, -2.0], [-1.0, -1.0, 0.5, 0.4]])
H = torch.tensor([[0.2, 1.5, -0.3, 0.7], [1.0, -0.5, 0.0, 2.5], [0.3, 0.2, 0.1, -0.4]])


@pytest.mark.parametrize(("alpha", "temperature"), [(0.5, 0.0), (0.73, 0.0), (0.8, 0.5), (0.6, 2.0)])
def test_mixture_equals_equation_5_written_out(alpha, temperature):
    out = mix_log_probs(G, H, s=1.7, p=1.5, c=-0.4, alpha=alpha, temperature=temperature)
    ref = hand_mixture(G, H, 1.7, 1.5, -0.4, alpha, temperature)
    assert torch.allclose(out.double().exp(), ref, atol=1e-6)
    # each row is a distribution on its own (classes, not the batch, are normalised)
    assert torch.allclose(out.double().exp().sum(-1), torch.ones(len(G), dtype=torch.float64), atol=1e-6)


def test_single_row_mixture_does_not_depend_on_the_rest_of_the_batch():
    full = mix_log_probs(G, H, s=2.0, p=1.0, c=0.0, alpha=0.7, temperature=1.0)
    for i in range(len(G)):
        alone = mix_log_probs(G[i:i + 1], H[i:i + 1], s=2.0, p=1.0, c=0.0, alpha=0.7, temperature=1.0)
        assert torch.allclose(alone[0], full[i], atol=1e-6)


@pytest.mark.parametrize("bad", [True, False, "0.7", math.nan, -0.01, 1.01])
def test_alpha_that_is_not_a_number_in_the_unit_interval_is_refused(bad):
    with pytest.raises(InputError, match=r"alpha must be a number in \[0, 1\]"):
        mix_log_probs(G, H, s=1, p=1, c=0, alpha=bad)
    with pytest.raises(InputError, match=r"alpha must be a number in \[0, 1\]"):
        MixedClassifier(Net(0), Net(1), alpha=bad, allow_any_alpha=True)


def test_alpha_of_exactly_one_half_is_allowed_without_allow_any_alpha():
    assert MixedClassifier(Net(0), Net(1), alpha=0.5).alpha == 0.5  # footnote 1: below 1/2 is refused, 1/2 is not


def test_missing_rbc_logits_with_positive_alpha_is_an_input_error():
    with pytest.raises(InputError, match="rbc_logits is None"):
        mix_log_probs(G, None, s=1, p=1, c=0, alpha=0.6)
    assert torch.equal(mix_log_probs(G, None, s=1, p=1, c=0, alpha=0.0, temperature=1.0),
                       torch.log_softmax(G, -1))


def test_logits_of_different_batch_sizes_are_refused_not_broadcast():
    with pytest.raises(InputError, match="differ in shape"):
        mix_log_probs(G, H[:1], s=1, p=1, c=0, alpha=0.7)
    with pytest.raises(InputError, match="differ in shape"):
        mix_log_probs(G[:1], H, s=1, p=1, c=0, alpha=0.7)


def hand_auxiliary(g, h, s, p, c, a, r):
    """Eq. 8: (1 - a) softmax(g) + a r softmax(h) + a (1 - r) softmax(M(s, p, c)(h))."""
    return (1 - a) * softmax(g.double()) + a * r * softmax(h.double()) + a * (1 - r) * softmax(
        hand_transform(h, s, p, c))


@pytest.mark.parametrize("r_d", [0.0, 0.35, 1.0])
def test_auxiliary_mixture_is_equation_8_including_the_r_d_endpoints(r_d):
    out = auxiliary_log_probs(G, H, s=1.7, p=1.5, c=-0.4, alpha_d=0.8, r_d=r_d)
    assert torch.allclose(out.double().exp(), hand_auxiliary(G, H, 1.7, 1.5, -0.4, 0.8, r_d), atol=1e-6)


def test_auxiliary_with_a_missing_model_uses_the_other_one_alone():
    rbc_only = auxiliary_log_probs(None, H, s=1.7, p=1.5, c=-0.4, alpha_d=0.3, r_d=0.6)
    assert torch.allclose(rbc_only.double().exp(), hand_auxiliary(G, H, 1.7, 1.5, -0.4, 1.0, 0.6), atol=1e-6)
    abc_only = auxiliary_log_probs(G, None, s=1.7, p=1.5, c=-0.4, alpha_d=0.7, r_d=0.6)
    assert torch.allclose(abc_only.double().exp(), softmax(G.double()), atol=1e-6)


@pytest.mark.parametrize("r_d", [0.0, 1.0])
def test_mixed_classifier_accepts_the_r_d_endpoints(r_d):
    abc, rbc = Net(0, 3.0), Net(1)
    model = MixedClassifier(abc, rbc, s=1.7, p=1.5, c=-0.4, alpha=0.8, r_d=r_d, gradient="bypass")
    x = images()
    with torch.no_grad():
        g, h = abc(x), rbc(x)
        assert torch.allclose(model.auxiliary(x).double().exp(), hand_auxiliary(g, h, 1.7, 1.5, -0.4, 0.8, r_d),
                              atol=1e-6)


@pytest.mark.parametrize("bad", [1.5, -0.2, math.nan, True])
def test_alpha_d_is_validated(bad):
    with pytest.raises(InputError, match="alpha_d"):
        MixedClassifier(Net(0), Net(1), alpha=0.8, alpha_d=bad)


def input_gradient(fn, weights, n=5):
    x = images(n).requires_grad_()
    out = fn(x)
    (out * weights).sum().backward()
    return out.detach(), x.grad


def test_bypass_with_alpha_one_still_takes_the_auxiliary_gradient_through_the_abc():
    """alpha = 1 serves the RBC values, but App. B.2.2's bypass gradient is that of Eq. 8 with alpha_d < 1, which
    involves the ABC."""
    abc, rbc = Net(0, 3.0), Net(1)
    model = MixedClassifier(abc, rbc, s=1.5, p=2.0, c=-0.3, alpha=1.0, alpha_d=0.6, gradient="bypass")
    weights = torch.randn(5, K, generator=torch.Generator().manual_seed(3))
    values, grad = input_gradient(model, weights)
    _, aux_grad = input_gradient(model.auxiliary, weights)
    with torch.no_grad():
        x = images()
        ref = softmax(hand_transform(rbc(x), 1.5, 2.0, -0.3))
    assert torch.allclose(values.double().exp(), ref, atol=1e-6)
    assert torch.allclose(grad, aux_grad, atol=1e-6)


def test_forward_pair_in_bypass_mode_gives_the_bypass_gradient():
    abc, rbc = Net(0, 3.0), Net(1)
    model = MixedClassifier(abc, rbc, s=1.5, p=2.0, c=-0.3, alpha=0.9, alpha_d=0.7, gradient="bypass")
    weights = torch.randn(5, K, generator=torch.Generator().manual_seed(4))
    v_pair, g_pair = input_gradient(lambda x: model.forward_pair(x)[0], weights)
    v_fwd, g_fwd = input_gradient(model, weights)
    assert torch.allclose(v_pair, v_fwd, atol=1e-6)
    assert torch.allclose(g_pair, g_fwd, atol=1e-6)
    _, g_aux = input_gradient(model.auxiliary, weights)
    assert torch.allclose(g_pair, g_aux, atol=1e-6)


def test_linear_baseline_keeps_the_gradient_mode():
    abc, rbc = Net(0, 3.0), Net(1)
    model = MixedClassifier.linear(abc, rbc, 0.7, gradient="bypass")
    assert model.gradient == "bypass"
    x = images()
    with torch.no_grad():
        ref = 0.3 * softmax(abc(x).double()) + 0.7 * softmax(rbc(x).double())
        assert torch.allclose(model(x).double().exp(), ref, atol=1e-6)


class RowNaN(nn.Module):
    """Whole rows of NaN logits for the first ``bad`` images."""

    def __init__(self, bad: int):
        super().__init__()
        self.bad = bad

    def forward(self, x):
        out = torch.zeros(len(x), K)
        out[: self.bad] = float("nan")
        return out


def test_non_finite_logits_are_counted_per_image():
    with pytest.raises(InputError, match="for 2 of 5 images"):
        MixedClassifier(RowNaN(2), Net(1), alpha=0.9)(images())


def card_for(abc_hash: str | None, rbc_hash: str | None) -> MixCard:
    return MixCard(s=1.5, p=2.0, c=-0.3, alpha=0.9, beta=0.98,
                   abc={"name": "a", "weight_hash": abc_hash} if abc_hash else {},
                   rbc={"name": "r", "weight_hash": rbc_hash} if rbc_hash else {})


def test_weight_mismatch_message_names_the_right_model_and_both_hashes():
    abc, rbc, other = Net(0), Net(1), Net(2)
    card = card_for(weight_hash(abc), weight_hash(rbc))
    assert weight_mismatches(card, abc, rbc) == []
    (message,) = weight_mismatches(card, abc, other)
    assert message.startswith("RBC ") and "'r'" in message
    assert f"has weight hash {weight_hash(other)} " in message
    assert f"with hash {weight_hash(rbc)};" in message
    (message,) = weight_mismatches(card, other, rbc)
    assert message.startswith("ABC ") and "'a'" in message


def test_a_missing_model_is_not_checked_against_the_card():
    rbc = Net(1)
    card = card_for(weight_hash(Net(0)), weight_hash(rbc))
    assert weight_mismatches(card, None, rbc) == []
    rbc_alone = MixCard(s=1.5, p=2.0, c=-0.3, alpha=1.0, beta=0.98, abc={"name": "a", "weight_hash": "0" * 16},
                        rbc={"name": "r", "weight_hash": weight_hash(rbc)})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = MixedClassifier.from_card(rbc_alone, None, rbc)
    assert model.abc is None


def test_from_card_warn_false_is_silent_even_on_a_mismatch():
    card = card_for(weight_hash(Net(0)), weight_hash(Net(1)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        MixedClassifier.from_card(card, Net(0), Net(5), warn=False)


def wrapper(card, abc, rbc):
    return MixedClassifier.from_card(card, abc, rbc, stacklevel=3)


def test_from_card_warning_points_at_the_callers_line():
    card = card_for(weight_hash(Net(0)), weight_hash(Net(1)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = inspect.currentframe().f_lineno + 1
        wrapper(card, Net(0), Net(5))
    (w,) = caught
    assert Path(w.filename).resolve() == Path(__file__).resolve() and w.lineno == line


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


def test_default_cache_dir_follows_mixzoo_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MIXZOO_CACHE", str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("MIXZOO_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "mixzoo"


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

