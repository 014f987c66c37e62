"""Algorithm 1: mixzoo's vectorised search against the authors' per-combination loop, on the same logits, one thread.

The loop follows ``calc_spca.py`` of github.com/Bai-YT/MixedNUTS: for every (s, c, p) of an 8x8x8 grid it maps the
clean-incorrect and attacked-correct RBC logits through ``LNClampPowerScaleMap`` (float64: ``normalize_topk``, GELU,
power, scale, softmax), takes top-2 margins, ``np.percentile`` of the attacked ones, and the share of clean margins
above it. It is written here (the authors' script needs their margin files); its arithmetic is theirs. mixzoo is
timed end to end (:func:`mixzoo.methods.mixednuts.calibrate.calibrate`, default search and ``search="authors"``).
Times are CPU
seconds (``time.process_time``, median of repeats): the machine is shared, so wall times are not reliable.

    nice .venv/bin/python benchmarks/authors_loop_speed.py     # writes benchmarks/authors_loop_speed.md
"""

from __future__ import annotations

import platform
import statistics
import subprocess
import time
from functools import partial
from pathlib import Path

import numpy as np
import torch
from algorithm1_speed import synthetic_logits  # run as a script: benchmarks/ is on sys.path
from torch import nn

from mixzoo.methods.mixednuts.calibrate import Grid, calibrate

OUT = Path(__file__).with_suffix(".md")
BETA = 0.985
GRID = Grid(s_min=0.05, s_max=5.0, c_min=-1.1, c_max=0.0)  # the authors' CIFAR-10 ranges, 8 values per axis


def _normalize_topk(logits: torch.Tensor, k: int = 250) -> torch.Tensor:
    logits = logits.clamp(-1e15, 1e15)
    ref = logits if k >= logits.shape[1] else logits.topk(k, dim=1).values
    return (logits - ref.mean(1, keepdim=True)) / (ref.var(1, keepdim=True) + 1e-8).sqrt()


def _margins(logits: torch.Tensor, s: float, p: float, c: float, gelu: nn.Module) -> torch.Tensor:
    h = gelu(_normalize_topk(logits.double()) + c)
    top2 = (s * (h.abs() ** p * h.sign())).softmax(dim=1).topk(2, dim=1).values
    return top2[:, 0] - top2[:, 1]


def authors_loop(clean, clean_y, attacked, attacked_y, grid: Grid) -> tuple[float, float, float, float]:
    """calc_spca.py's loop; returns (s, p, c, alpha) of the first optimum."""
    cln, atk = clean[clean.argmax(1) != clean_y], attacked[attacked.argmax(1) == attacked_y]
    ss = np.logspace(np.log10(grid.s_min), np.log10(grid.s_max), grid.s_n)
    pp, cc = np.linspace(grid.p_min, grid.p_max, grid.p_n), np.linspace(grid.c_min, grid.c_max, grid.c_n)
    obj, cutoffs = np.empty((len(ss), len(cc), len(pp))), np.empty((len(ss), len(cc), len(pp)))
    gelu = nn.GELU()
    for si, s in enumerate(ss):
        for ci, c in enumerate(cc):
            for pi, p in enumerate(pp):
                cutoff = np.percentile(_margins(atk, s, p, c, gelu).numpy(), 100.0 - 100.0 * BETA)
                cutoffs[si, ci, pi] = cutoff
                obj[si, ci, pi] = (_margins(cln, s, p, c, gelu) >= min(cutoff, 1 - 1e-9)).double().mean().item()
    idx = tuple(a[0] for a in np.where(obj == obj.min()))
    return float(ss[idx[0]]), float(pp[idx[2]]), float(cc[idx[1]]), float(1 / (1 + cutoffs[idx]))


def cpu_time(fn, repeats: int):
    times, out = [], None
    for _ in range(repeats):
        t = time.process_time()
        out = fn()
        times.append(time.process_time() - t)
    return statistics.median(times), out


def main() -> None:
    torch.set_num_threads(1)
    rows = []
    for k in (10, 100, 1000):
        clean, yc, attacked, ya = synthetic_logits(670, k, seed=0)
        args = dict(clean_logits=clean, clean_labels=yc, attacked_logits=attacked, attacked_labels=ya, beta=BETA,
                    grid=GRID, top_k=250 if k > 250 else None)  # the authors' ln_k = 250 (App. D.7)
        t_loop, theirs = cpu_time(partial(authors_loop, clean, yc, attacked, ya, GRID), 1 if k == 1000 else 2)
        t_ours, _ = cpu_time(partial(calibrate, **args), 5)
        t_auth, card = cpu_time(partial(calibrate, **args, search="authors", max_argmax_change=None), 3)
        same = (
            np.allclose((card.params["s"], card.params["p"], card.params["c"]), theirs[:3], rtol=1e-12)
            and abs(card.params["alpha"] / theirs[3] - 1) < 1e-9
        )
        rows.append((k, t_loop, t_ours, t_auth, same))
        print(rows[-1], flush=True)
    model = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((line.split(":", 1)[1].strip() for line in model.splitlines() if line.startswith("Model name")), "?")
    lines = [
        "# Algorithm 1: mixzoo against the authors' loop (same logits, one thread)",
        "",
        f"Machine: {model}, 2 cores shared with other processes; torch {torch.__version__}, one torch thread;"
        f" `benchmarks/authors_loop_speed.py`. Data: `synthetic_logits(670, K)` of `benchmarks/algorithm1_speed.py`;"
        f" beta = {BETA}; 8x8x8 grid over the authors' CIFAR-10 ranges (s 0.05-5, p 1-4, c -1.1-0), GELU; LN over the"
        " top 250 logits (their default `ln_k`), i.e. all of them below 250 classes.",
        "CPU seconds (process time; medians): the machine was loaded, so wall times are not given.",
        "",
        "| classes | authors' loop (s) | mixzoo default (s) | speed-up | mixzoo `search=\"authors\"` (s) | speed-up |"
        " same point and alpha as the loop |",
        "|---|---|---|---|---|---|---|",
    ]
    for k, t_loop, t_ours, t_auth, same in rows:
        lines.append(f"| {k} | {t_loop:.2f} | {t_ours:.3f} | {t_loop / t_ours:.0f}x | {t_auth:.3f} |"
                     f" {t_loop / t_auth:.0f}x | {'yes' if same else 'NO'} |")
    lines += ["", "The default search skips the c values App. D.8.2 excludes and computes the softmax denominators in"
              " float32; `search=\"authors\"` evaluates every point in float64, the same work as the loop.", ""]
    OUT.write_text("\n".join(lines))
    print(f"wrote {OUT} ({platform.python_version()})")


if __name__ == "__main__":
    main()
