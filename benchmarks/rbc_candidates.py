"""Train candidate robust base classifiers (and accurate ones) and measure what selecting an RBC needs.

For each candidate recipe: clean accuracy, PGD-20 accuracy (L-inf 0.1), the median LN-margin of clean mistakes,
the (1 - beta)-quantiles (beta = 0.985, 0.95) of LN-margins of PGD-attacked examples that stay correct, and the
share of clean mistakes below those quantiles (see :func:`mixzoo.training.train.evaluate_model`). Results go to a JSON
lines file; ``benchmarks/rbc_candidates.md`` holds the recorded table.

With an accurate model (``--abc``: a candidate trained in the same run, ``std`` by default, or a shipped model
such as ``fmnist-std``), each robust candidate also gets a *MixedNUTS proxy*: a small grid search over the RBC
transform M(s, p, c) with the GELU clamp (paper Eq. 4) on
the PGD-20 (not MMAA) evaluation logits, in-sample, choosing the threshold as the (1 - beta)-quantile of the
transformed margins of attacked-correct examples (so about (1 - beta) x robust accuracy is given up) and
reporting the best estimated relative cut of the RBC's clean error by the mixture (fixed RBC mistakes where the
ABC is right, minus RBC-correct examples broken where the ABC is wrong). It only ranks candidates; the real
numbers come from ``mixzoo mix`` / ``mixzoo bench``.

    .venv/bin/python benchmarks/rbc_candidates.py --out rbc.jsonl [--device cuda] [--jobs 8] [NAME ...]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import torch
import torch.nn.functional as F

from mixzoo.methods.mixednuts.transforms import layer_norm
from mixzoo.training.train import RECIPES, Recipe

_PGD, _TRADES, _STD = RECIPES["fmnist-pgd"], RECIPES["fmnist-trades"], RECIPES["fmnist-std"]
_WIDE = {"widths": (48, 96), "hidden": 256}
_BN = {"widths": (32, 64), "hidden": 128, "batch_norm": True}
_L = {"widths": (32, 64, 128), "hidden": 256, "convs_per_stage": 2, "batch_norm": True}
_XL = {"widths": (64, 128, 256), "hidden": 512, "convs_per_stage": 2, "batch_norm": True}

CANDIDATES: dict[str, Recipe] = {
    "pgd-s3": _PGD.replace(epochs=3),
    "pgd-s3-e15": _PGD.replace(train_eps=0.15, epochs=3),
    "trades-s3-e15": _TRADES.replace(train_eps=0.15, epochs=3),
    "pgd-s3-e2": _PGD.replace(train_eps=0.2, epochs=3),
    "trades-s3-e2": _TRADES.replace(train_eps=0.2, epochs=3),
    "pgd-s6-e15": _PGD.replace(train_eps=0.15, epochs=6),
    "trades-s6-e15": _TRADES.replace(train_eps=0.15, epochs=6),
    "trades-w6-e15": _TRADES.replace(train_eps=0.15, epochs=6, arch_kwargs=_WIDE),
    "trades-s3": _TRADES.replace(epochs=3),
    "trades-s3-b3": _TRADES.replace(epochs=3, trades_beta=3.0),
    "trades-s3-b9": _TRADES.replace(epochs=3, trades_beta=9.0),
    "pgd-s6": _PGD,
    "trades-s6": _TRADES,
    "pgd-w3": _PGD.replace(epochs=3, arch_kwargs=_WIDE),
    "trades-w3": _TRADES.replace(epochs=3, arch_kwargs=_WIDE),
    "trades-s3-bn": _TRADES.replace(epochs=3, arch_kwargs=_BN),
    "pgd-s3-bn": _PGD.replace(epochs=3, arch_kwargs=_BN),
    "trades-s3-noramp": _TRADES.replace(epochs=3, eps_warmup=0.0),
    "trades-s3-lr2e-3": _TRADES.replace(epochs=3, lr=2e-3),
    "trades-s3-k10": _TRADES.replace(epochs=3, attack_steps=10),
    "trades-w6": _TRADES.replace(arch_kwargs=_WIDE, epochs=6),
    "pgd-w6": _PGD.replace(arch_kwargs=_WIDE, epochs=6),
    "pgd-s6-aug": _PGD.replace(augment=True),
    "pgd-s6-ema": _PGD.replace(ema=0.999),
    "pgd-s6-aug-ema": _PGD.replace(augment=True, ema=0.999),
    "trades-s6-aug-ema": _TRADES.replace(augment=True, ema=0.999),
    "pgd-s12-aug-ema": _PGD.replace(augment=True, ema=0.999, epochs=12),
    # capacity: "l" is the ABC's architecture (0.58M parameters), "xl" doubles its widths (2.3M)
    "pgd-l10": _PGD.replace(epochs=10, arch_kwargs=_L),
    "trades-l10": _TRADES.replace(epochs=10, arch_kwargs=_L),
    "pgd-xl10": _PGD.replace(epochs=10, arch_kwargs=_XL),
    "trades-xl10": _TRADES.replace(epochs=10, arch_kwargs=_XL),
    # MART (Wang et al. 2020): boosted CE on PGD examples + KL consistency weighted by clean misclassification
    "mart-s6": _PGD.replace(method="mart", trades_beta=6.0),
    # HAT (Rade & Moosavi-Dezfooli 2022): TRADES + helper examples x + 2(x' - x) labelled by the shipped ABC;
    # the paper's CIFAR-10 settings beta 2.5, gamma 0.5, h 2
    "hat-s6": _TRADES.replace(method="hat", trades_beta=2.5, helper="fmnist-std"),
    # AWP (Wu et al. 2020): adversarial weight perturbation, gamma 0.01 for PGD-AT as in the authors' code
    "pgd-s6-awp": _PGD.replace(awp=0.01),
    "std": _STD,
    "std-15": _STD.replace(epochs=15),
    "std-sgd": _STD.replace(optimizer="sgd", lr=0.05),
    "std-noaug": _STD.replace(augment=False),
}


def mixednuts_proxy(abc_clean: torch.Tensor, rbc_clean: torch.Tensor, rbc_adv: torch.Tensor,
                    labels: torch.Tensor, beta: float) -> dict[str, float]:
    """Best estimated relative clean-error cut over a (s, p, c) grid; see the module docstring."""
    rbc_right, abc_right = rbc_clean.argmax(1) == labels, abc_clean.argmax(1) == labels
    adv_right = rbc_adv.argmax(1) == labels
    fixable, breakable = ~rbc_right & abc_right, rbc_right & ~abc_right

    zc, za = layer_norm(rbc_clean), layer_norm(rbc_adv[adv_right])
    best = {"cut": -1.0}
    for s in (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0):
        for p in (1.0, 1.5, 2.0, 3.0, 4.0, 6.0):
            c = torch.linspace(-3, 1, 17).view(-1, 1, 1)

            def margin(z: torch.Tensor, s=s, p=p, c=c) -> torch.Tensor:
                g = F.gelu(z.unsqueeze(0) + c)
                top2 = F.softmax(s * g.abs().pow(p) * g.sign(), dim=-1).topk(2, dim=-1).values
                return top2[..., 0] - top2[..., 1]

            q = torch.quantile(margin(za), 1 - beta, dim=1)  # [C]
            mc = margin(zc)
            fixed = (mc[:, fixable] < q[:, None]).sum(1)
            broken = (mc[:, breakable] < q[:, None]).sum(1)
            cut = (fixed - broken).float() / max(1, int((~rbc_right).sum()))
            k = int(cut.argmax())
            if cut[k] > best["cut"]:
                best = {"cut": cut[k].item(), "s": s, "p": p, "c": c.flatten()[k].item()}
    best["mixed_clean"] = (rbc_right.float().mean() + best["cut"] * (~rbc_right).float().mean()).item()
    best["robust_given_up"] = (1 - beta) * adv_right.float().mean().item()
    best["beta"] = beta
    return best


def run_one(name: str, device: str, save_dir: str | None = None) -> dict:
    import torch

    from mixzoo.training.train import save_weights, train_model

    torch.set_num_threads(int(os.environ.get("THREADS", "2")))
    from mixzoo.core.plugins import register_plugin, table

    if "fashion-mnist" not in table("dataset"):  # running from a checkout that is not pip-installed
        import mixzoo_plugins.datasets

        register_plugin(mixzoo_plugins.datasets, "datasets")
    recipe = CANDIDATES[name].replace(name=f"cand-{name}")
    t0 = time.perf_counter()
    res = train_model(recipe, save=False, progress=False, device=device)
    if save_dir:  # e.g. to calibrate and bench the candidate with mixzoo later (benchmarks/gpu_explore.py --weights)
        save_weights({k: v.cpu() for k, v in res.state_dict.items()}, Path(save_dir), recipe)
    params = sum(v.numel() for k, v in res.state_dict.items() if "running" not in k and "num_batches" not in k)
    return {"logits": res.logits, "candidate": name, "device": device, "train_seconds": round(res.seconds, 1),
            "total_seconds": round(time.perf_counter() - t0, 1), "params": params,
            "recipe": recipe.to_dict(), **res.metrics}


def shipped_clean_logits(name: str) -> torch.Tensor:
    """Clean logits of a registered model on the whole Fashion-MNIST evaluation split (the proxy's ABC)."""
    from mixzoo.training.train import model_logits
    from mixzoo.zoo.data import load_dataset
    from mixzoo.zoo.models import load_model

    return model_logits(load_model(name), load_dataset("fashion-mnist", "evaluation"), eps=None)[0]


def markdown(path: str) -> str:
    """The Markdown table of a results file (rows sorted: accurate models last, robust by proxy cut)."""
    rows, proxy = {}, {}
    for line in open(path):
        r = json.loads(line)
        if "proxy" in r:
            proxy[(r["proxy"]["candidate"], r["proxy"]["beta"])] = r["proxy"]
        else:
            rows[r["candidate"]] = r

    def pct(v: float | None, d: int = 2) -> str:
        return "" if v is None else f"{100 * v:.{d}f}"

    def desc(r: dict) -> str:
        rc = r["recipe"]
        k = rc["arch_kwargs"]
        arch = "-".join(map(str, k["widths"])) + f"/{k['hidden']}" + ("+bn" if k.get("batch_norm") else "")
        arch += "x2" if k.get("convs_per_stage", 1) == 2 else ""
        extra = [f"beta {rc['trades_beta']:g}"] if rc["method"] == "trades" else []
        extra += [f"lambda {rc['trades_beta']:g}"] if rc["method"] == "mart" else []
        extra += [f"beta {rc['trades_beta']:g}, gamma {rc['helper_weight']:g}, h {rc['helper_scale']:g}, helper"
                  f" {rc['helper']}"] if rc["method"] == "hat" else []
        extra += [f"AWP {rc['awp']:g}"] if rc.get("awp") else []
        extra += [f"train eps {rc['train_eps']:g}"] if rc.get("train_eps") else []
        extra += [f"K={rc['attack_steps']}"] if rc["method"] != "standard" and rc["attack_steps"] != 7 else []
        extra += [f"lr {rc['lr']:g}"] if rc["lr"] != 1e-3 else []
        extra += ["no eps ramp"] if rc["method"] != "standard" and not rc["eps_warmup"] else []
        extra += ["aug"] if rc["augment"] else []
        extra += [f"EMA {rc['ema']:g}"] if rc.get("ema") else []
        extra += [rc["optimizer"]] if rc["optimizer"] != "adam" else []
        return f"{rc['method']} | {arch} ({r['params'] / 1e6:.2f}M) | {rc['epochs']:g} | {', '.join(extra)}"

    head = ("| candidate | method | arch (params) | epochs | notes | clean % | PGD-20 % | median margin, clean"
            " mistakes | q1.5% attacked-correct | q5% attacked-correct | mistakes below q1.5% | mistakes below"
            " q5% | proxy cut, beta .985 | proxy cut, beta .98 | train s |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    robust = sorted((r for r in rows.values() if "pgd" in r),
                    key=lambda r: -proxy.get((r["candidate"], 0.985), {}).get("cut", -1))
    accurate = sorted((r for r in rows.values() if "pgd" not in r), key=lambda r: -r["clean"])
    for r in robust + accurate:
        p1, p2 = proxy.get((r["candidate"], 0.985), {}), proxy.get((r["candidate"], 0.98), {})
        q1, q5 = r.get("attacked_correct_margin_q0.015"), r.get("attacked_correct_margin_q0.05")
        lines.append(
            f"| {r['candidate']} | {desc(r)} | {pct(r['clean'])} | {pct(r.get('pgd'))} |"
            f" {r['clean_mistake_margin_median']:.4f} | {'' if q1 is None else f'{q1:.4f}'} |"
            f" {'' if q5 is None else f'{q5:.4f}'} | {pct(r.get('fixable_mistakes_q0.015'), 1)} |"
            f" {pct(r.get('fixable_mistakes_q0.05'), 1)} | {pct(p1.get('cut'), 1)} | {pct(p2.get('cut'), 1)} |"
            f" {r['train_seconds']:.0f} ({'GPU' if r.get('device', 'cuda') != 'cpu' else 'CPU'}) |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", default=list(CANDIDATES))
    ap.add_argument("--out")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--abc", default="std")
    ap.add_argument("--save-weights", metavar="DIR", help="also write each trained model as DIR/cand-NAME.safetensors")
    ap.add_argument("--markdown", metavar="JSONL", help="print the Markdown table of a results file and exit")
    args = ap.parse_args()
    if args.markdown:
        print(markdown(args.markdown), end="")
        return
    logits: dict[str, dict[str, torch.Tensor]] = {}
    abc = None if args.abc in CANDIDATES else shipped_clean_logits(args.abc)  # else: trained in this run
    ctx = multiprocessing.get_context("spawn")  # CUDA cannot be forked
    with open(args.out, "a") as fh, ProcessPoolExecutor(args.jobs, mp_context=ctx) as pool:
        futures = {pool.submit(run_one, n, args.device, args.save_weights): n for n in args.names}
        for fut in as_completed(futures):
            row = fut.result()
            logits[row["candidate"]] = row.pop("logits")
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            print(json.dumps({k: v for k, v in row.items() if k != "recipe"}), flush=True)
            if row["candidate"] == args.abc:
                abc = logits[args.abc]["clean"]
            if abc is None:
                continue
            for name in [n for n, lg in logits.items() if "pgd" in lg]:
                lg = logits.pop(name)
                for beta in (0.985, 0.98):
                    proxy = {"candidate": name, "abc": args.abc,
                             **mixednuts_proxy(abc, lg["clean"], lg["pgd"], lg["labels"], beta)}
                    fh.write(json.dumps({"proxy": proxy}) + "\n")
                    fh.flush()
                    print(json.dumps({"proxy": proxy}), flush=True)

if __name__ == "__main__":
    main()
