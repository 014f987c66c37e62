"""Speed of Algorithm 1 (paper Sec. 4.3): mixzoo's vectorised search vs a per-combination Python loop.

The loop is written the way the reference code does it: for every (s, p, c) it transforms the clean and attacked
logits (LN, clamp, power, scale), takes softmax margins, the (1 - beta) order statistic of the attacked margins
and the share of clean mistakes above it. mixzoo's :func:`mixzoo.methods.mixednuts.calibrate.calibrate` is timed end
to end (input
checks, LN, the search, alpha_d, the card). Both run on the same synthetic but realistic logits: per-example noise
scale, a uniformly random true-class boost tuned so ~40% of clean predictions are wrong, and "attacked" logits
that move mass from the true class to a runner-up (as MMAA does), so margins are spread out.

    .venv/bin/python benchmarks/algorithm1_speed.py            # writes benchmarks/algorithm1_speed.md
    .venv/bin/python benchmarks/algorithm1_speed.py --quick    # smaller repeat counts

Cases: (a) 670 images x 100 classes, 8x8x8 grid; (b) 670 x 1000, 8x8x8; (c) 1000 x 1000, 32x32x32 (the loop is
timed on a sample of combinations and extrapolated).
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import platform
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from mixzoo.methods.mixednuts.calibrate import Grid, calibrate

OUT = Path(__file__).with_suffix(".md")
BETA = 0.985


def synthetic_logits(n: int, k: int, seed: int, error_rate: float = 0.4):
    """Clean and attacked logits (n, k) with labels; the clean error rate is tuned to ``error_rate``."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, k, (n,), generator=g)
    scale = 0.5 + 1.5 * torch.rand(n, 1, generator=g)
    noise = torch.randn(n, k, generator=g) * scale
    u = torch.rand(n, generator=g)
    rows = torch.arange(n)

    def clean_for(b: float) -> torch.Tensor:
        x = noise.clone()
        x[rows, labels] += b * u * scale[:, 0]
        return x

    lo, hi = 0.0, 50.0
    for _ in range(40):  # bisection on the boost amplitude
        mid = (lo + hi) / 2
        err = float((clean_for(mid).argmax(1) != labels).float().mean())
        lo, hi = (mid, hi) if err > error_rate else (lo, mid)
    clean = clean_for(hi)
    attacked = clean.clone()
    runner_up = clean.clone()
    runner_up[rows, labels] = -math.inf
    other = runner_up.argmax(1)
    push = torch.rand(n, generator=g) * hi * 0.5 * scale[:, 0]
    attacked[rows, labels] -= push
    attacked[rows, other] += push
    return clean, labels, attacked, labels.clone()


def _ln(x: torch.Tensor) -> torch.Tensor:
    """LN as the authors' normalize_topk (and mixzoo.methods.mixednuts.transforms.layer_norm): unbiased variance
    + 1e-8."""
    return (x - x.mean(-1, keepdim=True)) / (x.var(-1, unbiased=True, keepdim=True) + 1e-8).sqrt()


def loop_search(clean, clean_labels, attacked, attacked_labels, grid: Grid, combos=None, dtype=torch.float32):
    """The straightforward triple loop (one (s, p, c) at a time, float32 by default). Returns counts and best index."""
    clean, attacked = clean.to(dtype), attacked.to(dtype)
    wrong = clean.argmax(1) != clean_labels
    right = attacked.argmax(1) == attacked_labels
    xc, xa = clean[wrong], attacked[right]
    n = len(xa)
    qi = min(int(math.floor((1 - BETA) * n + 1e-9)), n - 1)
    sv, pv, cv = grid.s_values().tolist(), grid.p_values().tolist(), grid.c_values().tolist()
    counts = {}
    todo = combos if combos is not None else itertools.product(range(len(sv)), range(len(pv)), range(len(cv)))
    for i, j, k in todo:
        margins = []
        for x in (xc, xa):
            h = F.gelu(_ln(x) + cv[k])
            mapped = sv[i] * h.abs().pow(pv[j]) * h.sign()
            prob = torch.softmax(mapped, dim=1).topk(2, dim=1).values
            margins.append(prob[:, 0] - prob[:, 1])
        q = margins[1].sort().values[qi]
        counts[i, j, k] = int((margins[0] >= q).sum())
    best = min(counts, key=lambda ijk: (counts[ijk], pv[ijk[1]], abs(math.log(sv[ijk[0]])), abs(cv[ijk[2]]),
                                        sv[ijk[0]], cv[ijk[2]]))
    return counts, best


def timed(fn, repeats: int):
    walls, cpus, out = [], [], None
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        out = fn()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return statistics.median(walls), statistics.median(cpus), out


def run_case(name, n, k, grid, threads, repeats, loop_sample=None):
    clean, yc, attacked, ya = synthetic_logits(n, k, seed=0)
    torch.set_num_threads(threads)
    # max_argmax_change=None: the full grid, the same work as the loop (the default D.8.2 check skips infeasible c)
    w_vec, c_vec, card = timed(lambda: calibrate(clean_logits=clean, clean_labels=yc, attacked_logits=attacked,
                                                 attacked_labels=ya, beta=BETA, grid=grid, max_argmax_change=None),
                               repeats)
    w_def, c_def, _ = timed(lambda: calibrate(clean_logits=clean, clean_labels=yc, attacked_logits=attacked,
                                              attacked_labels=ya, beta=BETA, grid=grid), repeats)
    sv, pv, cv = grid.s_values(), grid.p_values(), grid.c_values()
    res = {"case": name, "n": n, "k": k, "grid": f"{grid.s_n}x{grid.p_n}x{grid.c_n}", "grid_size": grid.size,
           "threads": threads,
           "n_clean_incorrect": card.data["n_clean_incorrect"], "n_attacked_correct": card.data["n_attacked_correct"],
           "vec_wall": w_vec, "vec_cpu": c_vec, "default_wall": w_def, "default_cpu": c_def}
    if loop_sample is None:
        w_loop, c_loop, _ = timed(lambda: loop_search(clean, yc, attacked, ya, grid), max(1, repeats // 2))
        # the optimum is checked against the loop in float64: float32 softmax saturates at large s (margins of
        # exactly 1.0) and its counts then depend on rounding
        counts, best = loop_search(clean, yc, attacked, ya, grid, dtype=torch.float64)
        ours = (
            int((sv - card.params["s"]).abs().argmin()),
            int((pv - card.params["p"]).abs().argmin()),
            int((cv - card.params["c"]).abs().argmin()),
        )
        vec_counts = torch.as_tensor(card.params["grid"]["objectives"]) * card.data["n_clean_incorrect"]
        differ = sum(int(round(float(vec_counts[ijk]))) != v for ijk, v in counts.items())
        res.update(loop_wall=w_loop, loop_cpu=c_loop, same_optimum=best == ours, loop_optimum=best, optimum=ours,
                   differing_grid_entries=differ, extrapolated=False)
    else:
        g = torch.Generator().manual_seed(1)
        combos = [tuple(int(torch.randint(0, m, (1,), generator=g)) for m in (grid.s_n, grid.p_n, grid.c_n))
                  for _ in range(loop_sample)]
        w, c, _ = timed(lambda: loop_search(clean, yc, attacked, ya, grid, combos), 1)
        res.update(loop_wall=w * grid.size / loop_sample, loop_cpu=c * grid.size / loop_sample, same_optimum=None,
                   extrapolated=True, loop_sample=loop_sample)
    res["speedup_wall"] = res["loop_wall"] / res["vec_wall"]
    res["speedup_cpu"] = res["loop_cpu"] / res["vec_cpu"]
    res["card"] = (card.params["s"], card.params["p"], card.params["c"], card.params["alpha"], card.params["objective"])
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats")
    ap.add_argument("--threads", default="1,2", help="comma-separated torch thread counts")
    args = ap.parse_args()
    repeats = 2 if args.quick else 5
    small, big = Grid(), Grid(s_n=32, p_n=32, c_n=32)
    results = []
    load_before = os.getloadavg()
    for threads in [int(t) for t in args.threads.split(",")]:
        results.append(run_case("(a)", 670, 100, small, threads, repeats))
        results.append(run_case("(b)", 670, 1000, small, threads, repeats))
        results.append(run_case("(c)", 1000, 1000, big, threads, 1, loop_sample=32))
        for r in results[-3:]:
            print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}, flush=True)
    load_after = os.getloadavg()
    write_markdown(results, load_before, load_after)


def write_markdown(results, load_before, load_after) -> None:
    g = Grid()
    lines = [
        "# Algorithm 1 speed: vectorised `mixzoo.calibrate` vs a per-combination loop",
        "",
        f"Machine: {os.cpu_count()} CPU cores ({platform.processor() or platform.machine()}), no GPU; torch"
        f" {torch.__version__}. The machine was shared with other engineers' processes (load average"
        f" {load_before[0]:.1f} before, {load_after[0]:.1f} after on 2 cores), so times are medians of repeated runs"
        " and CPU times (process time) are given beside wall times.",
        "",
        "Data: synthetic logits from `synthetic_logits` (see the script): ~40% clean mispredictions, attacked logits"
        f" that move mass from the true class to the runner-up; beta = {BETA}, GELU clamp, default grid ranges"
        f" (s {g.s_min:g}-{g.s_max:g} log-spaced, p {g.p_min:g}-{g.p_max:g}, c {g.c_min:g}-{g.c_max:g})."
        " mixzoo is timed on the full grid (`max_argmax_change=None`, the same work as the loop); the last column"
        " is the default call, whose App. D.8.2 check skips the c values that change too many predictions.",
        "",
        "| case | examples x classes | grid | threads | clean wrong / attacked right | loop (s, wall / cpu) |"
        " vectorised (s, wall / cpu) | speed-up (wall / cpu) | same optimum | default call (s, cpu) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        loop = f"{r['loop_wall']:.2f} / {r['loop_cpu']:.2f}" + (" (extrapolated)" if r["extrapolated"] else "")
        same = ("n/a (loop sampled)" if r["same_optimum"] is None else
                f"{'yes' if r['same_optimum'] else 'NO'} ({r['differing_grid_entries']} of"
                f" {r['grid_size']} grid counts differ)")
        lines.append(f"| {r['case']} | {r['n']} x {r['k']} | {r['grid']} | {r['threads']} |"
                     f" {r['n_clean_incorrect']} / {r['n_attacked_correct']} | {loop} |"
                     f" {r['vec_wall']:.3f} / {r['vec_cpu']:.3f} | {r['speedup_wall']:.1f}x / {r['speedup_cpu']:.1f}x |"
                     f" {same} | {r['default_cpu']:.3f} |")
    lines += [
        "",
        "Notes:",
        "- (c): the loop was timed on 32 random grid points and scaled to 32,768; the vectorised time is one full run.",
        "- \"grid counts differ\" compares with the loop run in float64; mixzoo computes LN and the margin numerator in"
        " float64 and the denominators in float32, so a clean margin that equals its threshold to ~1e-7 can count"
        " differently. The optimum is compared by grid index. (The timed loop is float32: at large s its softmax"
        " saturates and its own optimum can move.)",
        "- Where the time goes (cProfile of the default call at (b), 1 thread): the four passes over the S*P*C*N*K"
        " softmax-denominator terms (outer product 0.022 s, clip 0.015 s, exp 0.035 s, sum 0.009 s) are ~0.08 s;"
        " the per-(p, c) work (GELU, log, power, top two) ~0.05 s; fixed costs (LN, moving the 8 largest logits to"
        " the front, the auxiliary problem for alpha_d, the card) ~0.06 s. mixzoo computes"
        " u = sgn|Clamp(LN+c)|^p once per (p, c) (the log shared by all p) and evaluates all s at once as"
        " exp(-s (u1 - u)) in cache-sized chunks. Exponent arguments are clipped at -80 because torch's CPU exp is"
        " ~50x slower below about -88 (exp(-80) is far below float32 resolution of a sum >= 1). The vectorised exp"
        " costs ~0.4 ns per term, so the exponentials are no longer the limit: the loop's ~13 ns per term is mostly"
        " its other passes (pow, GELU, softmax, topk) and per-call overhead.",
        "- With 2 threads on this loaded 2-core machine small torch ops are slowed by thread contention; the 1-thread"
        " rows are the cleaner comparison.",
        "- Tried and dropped: sorting every row fully and skipping, per s, the columns whose exp(-s d) cannot reach"
        " float32 resolution (objectives identical). The exponentials are only ~0.04 s of case (b) (vectorised exp is"
        " ~0.4 ns), the sort costs ~0.04 s, so it was a net loss. The D.8.2 check now runs in float32 on top-first rows"
        " with a max instead of an argmax (0.15 s -> 0.04 s at (b)).",
        "",
        "Targets: >= 20x over the loop at (a) and (b) with the same optimum; (c) under 60 s on 2 cores.",
        "",
    ]
    for r in results:
        if r["extrapolated"]:
            ok = r["vec_wall"] < 60
            lines.append(f"- {r['case']} ({r['threads']} thread(s)): {r['vec_wall']:.1f} s wall, {r['vec_cpu']:.1f} s"
                         f" CPU -> target {'met' if ok else 'MISSED'}.")
        else:
            ok = r["speedup_cpu"] >= 20 and r["same_optimum"]
            lines.append(f"- {r['case']} ({r['threads']} thread(s)): {r['speedup_cpu']:.1f}x (CPU time),"
                         f" same optimum: {r['same_optimum']} -> target {'met' if ok else 'MISSED'}.")
    lines.append("- Against the authors' loop run on the same logits (not quoted times):"
                 " `benchmarks/authors_loop_speed.md`.")
    OUT.write_text("\n".join(lines) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
