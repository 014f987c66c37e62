"""Explore RBC candidates for the built-in Fashion-MNIST pair on a GPU (paper App. D.6: choose the RBC by robust
accuracy *with margin*), then calibrate and bench MixedNUTS for each.

    python benchmarks/gpu_explore.py --out DIR [--candidates a,b,c] [--attack apgd] [--n 1000] [--save-weights DIR]
                                     [--weights DIR] [--abc fmnist-std] [--no-bench]

For each candidate recipe (the shipped zoo recipes and variants of them) this trains on the GPU, calibrates with
``mixzoo.methods.mixednuts.fitting.mix`` (MMAA on 1,000 calibration images, beta 0.985) and evaluates ABC / RBC /
linear / MixedNUTS with ``mixzoo.evaluation.bench.bench`` on the evaluation split. GPU-trained weights differ from
the CPU-trained shipped ones
(floating point order), so these numbers inform the choice of recipe; the shipped figures are re-measured on CPU.
Results are appended to ``OUT/explore.json`` after every candidate.
"""

from __future__ import annotations

import argparse
import json
import time
import traceback
from pathlib import Path
from types import SimpleNamespace

import torch
from rbc_candidates import _L, CANDIDATES  # same folder (scripts run from benchmarks/ on sys.path)

from mixzoo.core.registry import spec_from_dict
from mixzoo.training.train import RECIPES, build_network, save_weights, train_model
from mixzoo.zoo.models import BaseClassifier, freeze

VARIANTS = {
    "fmnist-std": RECIPES["fmnist-std"],
    "fmnist-pgd": RECIPES["fmnist-pgd"],
    "fmnist-trades": RECIPES["fmnist-trades"],
    "trades-b3": RECIPES["fmnist-trades"].replace(name="trades-b3", trades_beta=3.0),
    "trades-wide-12ep": RECIPES["fmnist-trades"].replace(
        name="trades-wide-12ep", arch_kwargs={"widths": (64, 128), "hidden": 256}, epochs=12),
    "pgd-wide-12ep": RECIPES["fmnist-pgd"].replace(
        name="pgd-wide-12ep", arch_kwargs={"widths": (64, 128), "hidden": 256}, epochs=12),
    "trades-bn-12ep": RECIPES["fmnist-trades"].replace(
        name="trades-bn-12ep", arch_kwargs={"widths": (32, 64, 128), "hidden": 256, "convs_per_stage": 2,
                                            "batch_norm": True}, epochs=12),
}
# Capacity: is the small-margin problem of rbc_candidates.md a matter of RBC size? The recipes are
# rbc_candidates.py's ("l": the ABC's architecture, 0.58M parameters; "xl": its widths doubled, 2.3M).
for _name in ("pgd-l10", "trades-l10", "pgd-xl10", "trades-xl10"):
    VARIANTS[_name] = CANDIDATES[_name].replace(name=_name)
VARIANTS["pgd-l10-aug-ema"] = RECIPES["fmnist-pgd"].replace(name="pgd-l10-aug-ema", arch_kwargs=_L, epochs=10,
                                                            augment=True, ema=0.999)


def as_classifier(recipe, state, role: str) -> BaseClassifier:
    net = build_network(recipe)
    net.load_state_dict(state)
    raw = {"role": role, "dataset": recipe.dataset, "num_classes": 10, "input_size": [1, 28, 28],
           "mean": list(recipe.mean), "std": list(recipe.std), "source": {"kind": "explore"}}
    if role == "robust":
        raw.update(threat_model="Linf", epsilon=recipe.eps)
    return freeze(BaseClassifier(net, spec_from_dict(recipe.name, raw)))


def _load_trained(path: Path) -> SimpleNamespace:
    """A state dict written by ``--save-weights`` (or a shipped zoo file) with the recipe from its metadata."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    from mixzoo.training.train import Recipe

    with safe_open(str(path), "pt") as fh:
        raw = json.loads(fh.metadata()["mixzoo_recipe"])
    raw["arch_kwargs"] = {k: tuple(v) if isinstance(v, list) else v for k, v in raw["arch_kwargs"].items()}
    raw["mean"], raw["std"] = tuple(raw["mean"]), tuple(raw["std"])
    return SimpleNamespace(recipe=Recipe(**raw), state_dict=load_file(str(path)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--candidates", default="fmnist-pgd,fmnist-trades,trades-b3,trades-wide-12ep,pgd-wide-12ep")
    ap.add_argument("--attack", default="apgd")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--no-bench", action="store_true", help="calibrate only (the card and Algorithm 1's objective)")
    ap.add_argument("--betas", default="0.985")
    ap.add_argument("--n-calib", type=int, default=1000)
    ap.add_argument("--cache-dir", default=None, help="default: OUT/cache")
    ap.add_argument("--smoke", action="store_true", help="a few training steps, to check the script runs")
    ap.add_argument("--abc", help="a registered accurate model (e.g. fmnist-std); default: train fmnist-std here")
    ap.add_argument("--weights", metavar="DIR", help="evaluate DIR/NAME.safetensors (from --save-weights) if present")
    ap.add_argument("--save-weights", metavar="DIR", help="also write each trained RBC as DIR/NAME.safetensors")
    args = ap.parse_args()
    from mixzoo.evaluation.bench import bench
    from mixzoo.methods.mixednuts.fitting import mix

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cache_dir = Path(args.cache_dir) if args.cache_dir else out / "cache"
    device = "cuda" if torch.cuda.is_available() else "cpu"
    results: dict = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "candidates": {}}
    t = time.perf_counter()
    if args.smoke:
        for key, r in VARIANTS.items():
            VARIANTS[key] = r.replace(epochs=0.01)
    if args.abc:
        from mixzoo.zoo.models import load_model

        abc = load_model(args.abc).to(device)
    else:
        std = train_model(VARIANTS["fmnist-std"], save=False, evaluate=False, progress=False, device=device)
        abc = as_classifier(std.recipe, std.state_dict, "accurate").to(device)
    results["abc_train_seconds"] = time.perf_counter() - t
    for name in args.candidates.split(","):
        rec: dict = {}
        try:
            t = time.perf_counter()
            trained = Path(args.weights or "") / f"{name}.safetensors"
            if args.weights and trained.exists():  # trained by an earlier run: evaluate only
                res = _load_trained(trained)
                rec["weights"] = str(trained)
            else:
                res = train_model(VARIANTS[name], save=False, evaluate=False, progress=False, device=device)
                rec["train_seconds"] = time.perf_counter() - t
            if args.save_weights:
                save_weights({k: v.cpu() for k, v in res.state_dict.items()}, Path(args.save_weights), res.recipe)
            rbc = as_classifier(res.recipe, res.state_dict, "robust").to(device)
            for beta in (float(b) for b in args.betas.split(",")):
                m = mix(abc, rbc, beta=beta, n_calib=args.n_calib, device=device, cache_dir=cache_dir,
                        out=out / f"card-{name}-{beta}.json", progress=False)
                rec[f"beta={beta}"] = {
                    "card": {k: getattr(m.card, k) for k in ("s", "p", "c", "alpha", "objective")},
                    "summary": m.summary,
                    "mix_seconds": m.seconds,
                }
                if args.no_bench:
                    continue
                rep = bench(m.card, abc=abc, rbc=rbc, attack=args.attack, n=args.n, curve=None, plots=False,
                            cache_dir=cache_dir, device=device, progress=False)
                rec[f"beta={beta}"]["models"] = {
                    r.kind: {"clean": r.clean_accuracy, "robust": r.robust_accuracy, "alpha": r.alpha,
                             "seconds": r.seconds} for r in rep.models}
        except Exception:  # noqa: BLE001 - keep exploring the other candidates
            rec["error"] = traceback.format_exc()[-2000:]
        results["candidates"][name] = rec
        (out / "explore.json").write_text(json.dumps(results, indent=2, default=str))
        print(name, json.dumps(rec, default=str)[:1500], flush=True)


if __name__ == "__main__":
    main()
