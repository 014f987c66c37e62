"""Counter-based random numbers (mixzoo.core.rng): exact 32-bit arithmetic, independence from the batch split,
and the distributions they claim."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mixzoo.attacks.apgd import ApgdSettings
from mixzoo.core import rng

U32 = st.integers(min_value=0, max_value=2 ** 32 - 1)


def _fmix32_reference(h: int) -> int:
    """MurmurHash3's fmix32 on Python ints (unbounded, reduced explicitly)."""
    h ^= h >> 16
    h = (h * 0x85EBCA6B) % 2 ** 32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) % 2 ** 32
    return h ^ (h >> 16)


@settings(max_examples=300, deadline=None)
@given(U32, U32)
def test_mul32_is_exact_mod_2_32(x: int, c: int) -> None:
    assert int(rng.mul32(torch.tensor(x, dtype=torch.int64), c)) == (x * c) % 2 ** 32


@settings(max_examples=300, deadline=None)
@given(U32)
def test_fmix32_matches_python_reference(h: int) -> None:
    assert int(rng.fmix32(torch.tensor(h, dtype=torch.int64))) == _fmix32_reference(h)


def test_fmix32_known_values_and_bijection_on_a_block() -> None:
    assert int(rng.fmix32(torch.tensor(0))) == 0  # the finalizer fixes 0
    block = torch.arange(2 ** 16, dtype=torch.int64) * 65537
    assert rng.fmix32(block).unique().numel() == block.numel()


def test_values_depend_only_on_the_example_index_not_the_batch() -> None:
    index = torch.arange(1000)
    whole = rng.uniform(7, "apgd-start", index, (1, 4, 4))
    perm = torch.randperm(1000, generator=torch.Generator().manual_seed(0))
    for chunk in perm.split(137):  # any split, any order: the same numbers per example
        assert torch.equal(rng.uniform(7, "apgd-start", index[chunk], (1, 4, 4)), whole[chunk])
    assert whole.shape == (1000, 1, 4, 4)


def test_seed_stream_and_index_all_change_the_numbers() -> None:
    index = torch.arange(64)
    base = rng.bits(3, "a", index, (32,))
    assert not torch.equal(base, rng.bits(4, "a", index, (32,)))
    assert not torch.equal(base, rng.bits(3, "b", index, (32,)))
    assert not torch.equal(base, rng.bits(3, "a", index + 1, (32,)))
    assert not torch.equal(base, rng.bits(3 + 2 ** 32, "a", index, (32,)))  # the seed's high word counts
    assert not torch.equal(base, rng.bits(3, "a", index + 2 ** 32, (32,)))  # so does the index's
    assert base.min() >= 0 and base.max() < 2 ** 32


def test_uniform_is_uniform() -> None:
    u = rng.uniform(0, "u", torch.arange(400), (250,)).flatten()  # 100,000 numbers
    assert u.min() >= 0 and u.max() < 1
    counts = torch.histc(u, bins=20, min=0, max=1)
    expected = u.numel() / 20
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 45.3  # chi-square, 19 degrees of freedom, p = 0.001
    # neighbouring elements and neighbouring examples are uncorrelated
    grid = rng.uniform(0, "u", torch.arange(400), (250,))
    assert abs(float(torch.corrcoef(torch.stack([grid[:, :-1].flatten(), grid[:, 1:].flatten()]))[0, 1])) < 0.02
    assert abs(float(torch.corrcoef(torch.stack([grid[:-1].flatten(), grid[1:].flatten()]))[0, 1])) < 0.02


def test_normal_moments() -> None:
    z = rng.normal(1, "z", torch.arange(500), (200,), dtype=torch.float64).flatten()
    assert abs(float(z.mean())) < 0.015
    assert abs(float(z.var()) - 1) < 0.02
    assert abs(float((z > 1.96).double().mean()) - 0.025) < 0.003
    assert torch.isfinite(z).all()


def test_randint_range_and_balance() -> None:
    r = rng.randint(2, "r", torch.arange(1000), (100,), high=7, low=2)
    assert r.min() == 2 and r.max() == 6
    freq = torch.bincount(r.flatten() - 2, minlength=5).double() / r.numel()
    assert torch.allclose(freq, torch.full((5,), 0.2, dtype=torch.float64), atol=0.01)
    per_example = rng.randint(2, "r", torch.arange(4), (3,), high=torch.tensor([[1], [2], [3], [4]]))
    assert (per_example < torch.tensor([[1], [2], [3], [4]])).all() and (per_example >= 0).all()
    with pytest.raises(ValueError):
        rng.randint(2, "r", torch.arange(4), (3,), high=0)


def test_signs_balanced() -> None:
    s = rng.bernoulli_sign(5, "s", torch.arange(100), (1000,))
    assert set(s.unique().tolist()) == {-1.0, 1.0}
    assert abs(float(s.mean())) < 0.02


def test_negative_seed_refused() -> None:
    with pytest.raises(ValueError, match="seed"):
        rng.bits(-1, "a", torch.arange(3), (2,))


def test_stream_ids_are_stable() -> None:
    assert rng.stream_id("a") == 0xE8B7BE43  # CRC-32 of b"a": the same in every process and release
    assert rng.stream_id("a") != rng.stream_id("b")


@pytest.mark.parametrize("norm, eps", [("Linf", 0.15), ("L2", 1.0)])
def test_apgd_per_example_starts_make_outcomes_independent_of_the_batch_split(norm: str, eps: float) -> None:
    """With ``index``, every example's APGD-CE and APGD-T trajectory (2 restarts, random starts) is the same
    whether it is attacked with all 300 examples or in batches of 37, in any order (issue 29)."""
    from digits_models import train_digits_mlp

    from mixzoo.attacks.apgd import apgd_ce, apgd_t

    torch.set_num_threads(1)
    model, x, y = train_digits_mlp()
    index = torch.arange(len(y)) + 1000  # indices in a larger data set

    def attack(sel: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rec = apgd_ce(model, x[sel], y[sel], ApgdSettings(eps=eps, norm=norm, n_iter=10, n_restarts=2, seed=3),
                      index=index[sel], attack_all=True)
        rec = apgd_t(model, x[sel], y[sel], ApgdSettings(eps=eps, norm=norm, n_iter=10, n_target_classes=3, seed=3),
                     record=rec, index=index[sel], attack_all=True)
        return rec.margin, rec.x

    whole_margin, whole_x = attack(torch.arange(len(y)))
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(1))
    for chunk in perm.split(37):
        margin, points = attack(chunk)
        # a batch of another size may round a matrix product differently (1e-6): outcomes must agree exactly
        assert torch.equal(margin < 0, whole_margin[chunk] < 0)
        torch.testing.assert_close(margin, whole_margin[chunk], rtol=0, atol=1e-4)
        torch.testing.assert_close(points, whole_x[chunk], rtol=0, atol=1e-4)
    assert (whole_margin < 0).float().mean() > 0.2  # the attack does break examples: the comparison has content
    # the batch generators instead (AutoAttack's streams): the same examples start elsewhere in another batch
    rec = apgd_ce(model, x[:37], y[:37], ApgdSettings(eps=eps, norm=norm, n_iter=10, n_restarts=2, seed=3),
                  attack_all=True)
    rec2 = apgd_ce(model, x[perm[:37]], y[perm[:37]], ApgdSettings(eps=eps, norm=norm, n_iter=10, n_restarts=2, seed=3),
                   attack_all=True)
    common = [int(i) for i in perm[:37] if i < 37]
    assert common and not torch.equal(rec.x[common], rec2.x[[int((perm[:37] == i).nonzero()) for i in common]])
