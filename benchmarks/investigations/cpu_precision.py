"""How much faster would the zoo models run in bfloat16 on this CPU (AMX), and is that a way to the bench target?

Measures microseconds per image of a forward pass and of a forward + input-gradient pass (what every APGD / FAB
step costs) at batch 250, float32 vs ``torch.autocast("cpu", dtype=torch.bfloat16)``, for the default ABC and
RBC. The attacks' own bfloat16 mode (``--precision bf16``) is measured end to end by ``benchmarks/precision_speed.py``.
Writes JSON to stdout.

    .venv/bin/python benchmarks/investigations/cpu_precision.py > benchmarks/results/speed/cpu_precision.json
"""

from __future__ import annotations

import json
import platform
import time

import torch

from mixzoo.zoo.models import load_model


def per_image_us(fn, batch: int, repeat: int = 10) -> float:
    for _ in range(3):
        fn()
    t = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - t) / repeat / batch * 1e6


def main() -> None:
    torch.manual_seed(0)
    batch = 250
    x = torch.rand(batch, 1, 28, 28)
    rows = []
    for name in ("fmnist-std", "fmnist-pgd"):
        model = load_model(name).eval()
        for dtype in (torch.float32, torch.bfloat16):
            amp = dict(device_type="cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16)

            def forward(model=model, amp=amp) -> None:
                with torch.no_grad(), torch.autocast(**amp):
                    model(x)

            def forward_backward(model=model, amp=amp) -> None:
                xx = x.clone().requires_grad_(True)
                with torch.autocast(**amp):
                    loss = model(xx).float().logsumexp(1).sum()
                torch.autograd.grad(loss, xx)

            rows.append({"model": name, "dtype": str(dtype).removeprefix("torch."),
                         "forward_us_per_image": round(per_image_us(forward, batch), 1),
                         "forward_backward_us_per_image": round(per_image_us(forward_backward, batch), 1)})
    print(json.dumps({"machine": f"{torch.get_num_threads()} threads, {platform.processor() or platform.machine()}",
                      "torch": torch.__version__, "batch": batch, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
