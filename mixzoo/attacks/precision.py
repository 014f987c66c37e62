"""The arithmetic an attack runs in (a named policy), with every break confirmed in float32.

Policies (``--precision``, :data:`mixzoo.core.settings.PRECISIONS`):

* ``float32``: strict float32 (TF32 off for matrix products and cuDNN convolutions).
* ``tf32``: the attack's passes with TF32 tensor-core matrix products and convolutions (:func:`tf32_flags`; 10
  significant bits, float32 range) and the network in channels-last memory format where it has 2-D convolutions
  (:func:`channels_last`). On a CPU TF32 does not exist: the passes are float32 (channels-last still applies).
* ``bf16``: the attack's forward and backward passes under ``torch.autocast(device_type, torch.bfloat16)`` (matrix
  products and convolutions in bfloat16, 8 significant bits); on a GPU also channels-last as for ``tf32``.
* ``auto``: ``bf16`` on a GPU with bfloat16 arithmetic, ``tf32`` on another GPU, ``float32`` on a CPU
  (:func:`resolve_precision`; reports record the policy and what it resolved to).

Whatever the policy, the judgement of every candidate and the clean accuracy are the model's output in strict
float32 (:func:`exact_arithmetic`: no autocast, TF32 off; :meth:`mixzoo.attacks.base.Attack.run`), so a point
counts as a break only if the exact classifier misclassifies it; what the low precision alone saw as broken is
reported beside it (:class:`~mixzoo.attacks.result.ComponentStat`). An example whose candidate float32 does not
confirm was left by the attack at a false break (its search stops at what looks like a success), so the same
component attacks it again in float32; only those few examples cost float32 time. Which devices run which
policy: :func:`check_precision_device`.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

import torch
from torch import nn

from mixzoo.core.errors import InputError
from mixzoo.core.settings import check_precision

EMULATED_BF16 = "this CPU has no bfloat16 instructions (AVX-512 BF16 or AMX)"


def native_bf16_cpu() -> bool:
    """Whether this CPU has bfloat16 arithmetic in hardware (AVX-512 BF16 or AMX tiles)."""
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in probes)


def resolve_precision(precision: str, device: str | torch.device) -> str:
    """The concrete policy ``precision`` names on ``device``: ``auto`` becomes ``bf16`` on a GPU with bfloat16
    arithmetic, ``tf32`` on another GPU and ``float32`` elsewhere; the other names are themselves."""
    check_precision(precision)
    if precision != "auto":
        return precision
    if torch.device(device).type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "tf32"
    return "float32"


def check_precision_device(precision: str, device: str | torch.device) -> str:
    """``precision`` (``auto`` resolved, :func:`resolve_precision`) if ``device`` can run it: a one-line error for
    an unknown precision or a CUDA device without bfloat16; a warning for a CPU that would emulate bfloat16."""
    precision = resolve_precision(precision, device)
    if precision in ("float32", "tf32"):
        return precision
    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_bf16_supported():
            raise InputError("--precision bf16: this GPU has no bfloat16 arithmetic; use --precision float32")
    elif dev.type == "cpu":
        if not native_bf16_cpu():
            warnings.warn(f"--precision bf16: {EMULATED_BF16}, so bfloat16 is emulated and likely slower than"
                          " float32; --precision float32 is the faster choice here", stacklevel=2)
    else:
        raise InputError(f"--precision bf16 runs on cpu or cuda, not {dev.type}; use --precision float32")
    return precision


@contextlib.contextmanager
def tf32_flags(enabled: bool) -> Iterator[None]:
    """TF32 matrix products and cuDNN convolutions allowed (``enabled``) or not for the block, restored after."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


@contextlib.contextmanager
def attack_arithmetic(precision: str, device: str | torch.device) -> Iterator[None]:
    """The arithmetic an attack's passes run under: strict float32 (TF32 off) for ``float32``, TF32 allowed for
    ``tf32``, bfloat16 autocast on ``device``'s type for ``bf16``; ``auto`` as :func:`resolve_precision` says."""
    precision = resolve_precision(precision, device)
    bf16 = torch.autocast(torch.device(device).type, dtype=torch.bfloat16) if precision == "bf16" else None
    with tf32_flags(precision == "tf32"), bf16 or contextlib.nullcontext():
        yield


def uses_channels_last(model: nn.Module, precision: str, device: str | torch.device) -> bool:
    """Whether ``precision`` runs ``model`` in channels-last memory format on ``device``: ``tf32`` anywhere and
    ``bf16`` on a GPU, for a network with a 2-D convolution (channels-last is a layout of 4-D tensors)."""
    precision = resolve_precision(precision, device)
    if precision == "tf32" or (precision == "bf16" and torch.device(device).type == "cuda"):
        return any(isinstance(m, nn.Conv2d) for m in model.modules())
    return False


@contextlib.contextmanager
def channels_last(model: nn.Module, enabled: bool = True) -> Iterator[None]:
    """``model``'s 4-D parameters and buffers in channels-last memory format for the block (same values; cuDNN's
    NHWC kernels run faster on tensor cores), then back in the format each had."""
    tensors = [t for t in (*model.parameters(), *model.buffers()) if t.dim() == 4] if enabled else []
    kept = [(t, t.data) for t in tensors if not t.is_contiguous(memory_format=torch.channels_last)]
    for t, data in kept:
        t.data = data.contiguous(memory_format=torch.channels_last)
    try:
        yield
    finally:
        for t, data in kept:
            t.data = data


def as_channels_last(images: torch.Tensor, enabled: bool = True) -> torch.Tensor:
    """4-D ``images`` in channels-last memory format when ``enabled`` (same values), else unchanged."""
    if enabled and images.dim() == 4:
        return images.contiguous(memory_format=torch.channels_last)
    return images


@contextlib.contextmanager
def exact_arithmetic() -> Iterator[None]:
    """Strict float32 on any device: no autocast and TF32 off, whatever encloses the call (the judgement)."""
    cuda = torch.autocast("cuda", enabled=False) if torch.cuda.is_available() else contextlib.nullcontext()
    with tf32_flags(False), torch.autocast("cpu", enabled=False), cuda:
        yield
