"""Counter-based random numbers: every value is a pure function of (seed, stream, example index, element index).

Why: results must not depend on how the examples are split into batches, processes or GPUs. A
:class:`torch.Generator` hands out numbers in draw order, so example i's random start depends on how many numbers
were drawn before it, that is on the batch it falls in. Here each number is a hash of its coordinates, a
counter-based generator in the sense of Salmon et al. (SC 2011, "Parallel random numbers: as easy as 1, 2, 3"),
computed with integer tensor operations on any device and identical on all of them.

The hash is MurmurHash3's 32-bit finalizer (``fmix32``) chained over the coordinates. Arithmetic is done in int64
tensors on values below 2**32; the 32-bit products are split into 16-bit halves so no intermediate exceeds 2**49
(signed int64 overflow is undefined in the C++ kernels, so it is never relied on).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence

import torch

MASK32 = 0xFFFFFFFF
_GOLDEN = 0x9E3779B1  # 2**32 / golden ratio, odd: spreads consecutive coordinates


def mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """``(x * c) mod 2**32`` for int64 ``x`` in [0, 2**32) and a constant ``c`` in [0, 2**32), without overflow."""
    lo, hi = c & 0xFFFF, c >> 16
    return (x * lo + (((x * hi) & 0xFFFF) << 16)) & MASK32


def fmix32(h: torch.Tensor) -> torch.Tensor:
    """MurmurHash3's 32-bit finalizer (Appleby, 2011) on int64 values in [0, 2**32): a bijection with full
    avalanche."""
    h = h ^ (h >> 16)
    h = mul32(h, 0x85EBCA6B)
    h = h ^ (h >> 13)
    h = mul32(h, 0xC2B2AE35)
    return h ^ (h >> 16)


def stream_id(name: str) -> int:
    """A stable 32-bit number for a stream name (``"apgd-start"``, ``"square-window"``...): CRC-32 of its UTF-8."""
    return zlib.crc32(name.encode())


def hash_words(words: Sequence[torch.Tensor | int]) -> torch.Tensor:
    """Chain ``fmix32`` over ``words`` (ints or int64 tensors, broadcast together; each taken mod 2**32)."""
    h: torch.Tensor | int = 0
    for w in words:
        w = w & MASK32
        h = fmix32(torch.as_tensor(mul32(torch.as_tensor(h, dtype=torch.int64), _GOLDEN) ^ w, dtype=torch.int64))
    assert isinstance(h, torch.Tensor)
    return h


def bits(seed: int, stream: str | int, index: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """32 random bits (int64 in [0, 2**32)) of shape ``[len(index), *shape]``: element ``(i, e)`` depends only on
    ``seed``, ``stream``, ``index[i]`` (an example's index in its whole data set) and ``e`` (the flat position in
    ``shape``)."""
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    sid = stream_id(stream) if isinstance(stream, str) else int(stream) & MASK32
    index = index.to(torch.int64).reshape(-1, 1)
    size = math.prod(shape)
    element = torch.arange(size, dtype=torch.int64, device=index.device).reshape(1, -1)
    h = hash_words([seed & MASK32, seed >> 32, sid, index & MASK32, index >> 32, element])
    return h.expand(index.shape[0], size).reshape(index.shape[0], *shape)


def uniform(seed: int, stream: str | int, index: torch.Tensor, shape: Sequence[int], *,
            dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Uniform numbers in [0, 1) with 24 random bits (a float32's mantissa), shape ``[len(index), *shape]``."""
    return (bits(seed, stream, index, shape) >> 8).to(dtype) * 2.0 ** -24


def normal(seed: int, stream: str | int, index: torch.Tensor, shape: Sequence[int], *,
           dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Standard normal numbers by the Box-Muller transform of two uniform streams (``STREAM/r`` and
    ``STREAM/theta``)."""
    name = stream if isinstance(stream, str) else str(stream)
    u1 = uniform(seed, f"{name}/r", index, shape, dtype=torch.float64)
    u2 = uniform(seed, f"{name}/theta", index, shape, dtype=torch.float64)
    return (torch.sqrt(-2.0 * torch.log1p(-u1)) * torch.cos(2.0 * math.pi * u2)).to(dtype)


def randint(seed: int, stream: str | int, index: torch.Tensor, shape: Sequence[int], high: int | torch.Tensor,
            low: int | torch.Tensor = 0) -> torch.Tensor:
    """Integers in [low, high) by multiply-shift of 32 random bits (Lemire, 2019); ``high - low`` (a number or a
    tensor broadcast against ``[len(index), *shape]``) must be in [1, 2**31), and each value's bias is below
    ``(high - low) / 2**32``."""
    span = torch.as_tensor(high, dtype=torch.int64) - torch.as_tensor(low, dtype=torch.int64)
    if bool((span < 1).any()) or bool((span >= 2 ** 31).any()):
        raise ValueError("randint needs 1 <= high - low < 2**31")
    span = span.to(index.device)
    return ((bits(seed, stream, index, shape) * span) >> 32) + torch.as_tensor(low, dtype=torch.int64,
                                                                                  device=index.device)


def bernoulli_sign(seed: int, stream: str | int, index: torch.Tensor, shape: Sequence[int], *,
                   dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Random signs, -1 or +1 with probability 1/2 each (the top bit of the hash)."""
    return ((bits(seed, stream, index, shape) >> 31).to(dtype) * 2 - 1)
