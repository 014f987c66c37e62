"""The arithmetic an attack runs in: float32, or bfloat16 autocast with every break confirmed in float32.

With ``precision="bf16"`` an attack's forward and backward passes (its components: our APGD, pyautoattack's
FAB-T and Square, a method's declared extra attacks) run under ``torch.autocast(device_type, torch.bfloat16)``:
matrix products and convolutions in bfloat16 (8 significant bits), the rest as autocast decides. The judgement of
every candidate, and the clean accuracy, are the model's ordinary float32 output outside autocast
(:meth:`mixzoo.attacks.evaluation.Attack.run`), so a point counts as a break only if the exact classifier
misclassifies it; what bfloat16 alone saw as broken is reported beside it
(:class:`~mixzoo.attacks.result.ComponentStat`). An example whose bfloat16 candidate float32 does not confirm was
left by the attack at a false break (its search stops at what looks like a success), so the same component attacks
it again in float32; only those few examples cost float32 time.

Devices: a CUDA GPU without bfloat16 arithmetic (``torch.cuda.is_bf16_supported()`` false) is refused with a
one-line error naming ``--precision float32``. A CPU without bfloat16 instructions (AVX-512 BF16 or AMX) runs
bfloat16 emulated, usually slower than float32; it runs, with a warning saying so.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

import torch

from mixzoo.core.errors import InputError
from mixzoo.core.settings import PRECISIONS, check_precision

EMULATED_BF16 = "this CPU has no bfloat16 instructions (AVX-512 BF16 or AMX)"


def native_bf16_cpu() -> bool:
    """Whether this CPU has bfloat16 arithmetic in hardware (AVX-512 BF16 or AMX tiles)."""
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in probes)


def check_precision_device(precision: str, device: str | torch.device) -> str:
    """``precision`` if ``device`` can run it: a one-line error for an unknown precision or a CUDA device without
    bfloat16; a warning for a CPU that would emulate it."""
    check_precision(precision)
    if precision == "float32":
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
def attack_arithmetic(precision: str, device: str | torch.device) -> Iterator[None]:
    """The autocast an attack's passes run under: none for float32, bfloat16 autocast on ``device``'s type."""
    check_precision(precision)
    if precision == "float32":
        yield
        return
    with torch.autocast(torch.device(device).type, dtype=torch.bfloat16):
        yield


@contextlib.contextmanager
def exact_arithmetic() -> Iterator[None]:
    """No autocast on any device: the model's ordinary float32 output, whatever encloses the call."""
    with torch.autocast("cpu", enabled=False):
        if torch.cuda.is_available():
            with torch.autocast("cuda", enabled=False):
                yield
        else:
            yield


__all__ = ["EMULATED_BF16", "PRECISIONS", "attack_arithmetic", "check_precision_device", "exact_arithmetic",
           "native_bf16_cpu"]
