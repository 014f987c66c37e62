"""Variants of a Lipschitz zoo recipe, each trained from scratch and certified on the first 1,000 evaluation images.

    .venv/bin/python benchmarks/lipschitz_recipe_search.py NAME '{"epochs": 4, "r": 1.0}' [--base fmnist-lip075]

``NAME`` labels the run; the JSON changes the base recipe's fields (``mixzoo.training.train.Recipe``), plus two
shorthands: ``r`` (the certified l2 radius the loss aims at: margin ``r * sqrt(2)``) and ``arch`` (merged into
``arch_kwargs``). Nothing is saved but one line of JSON appended to ``--out``
(``results/certify_lipschitz_fmnist/recipe_search.jsonl``): training seconds, clean accuracy and deterministic
certified accuracy at l2 radii 0.25, 0.5, 0.75 and 1.0 (logit-margin bound, the trained network's constant 1), with
the machine. ``certify_lipschitz.md`` summarises the runs that chose ``fmnist-lip100``'s recipe.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

import torch

from mixzoo.certify.radii import logit_lipschitz_radius
from mixzoo.core.machine import machine_line, run_record
from mixzoo.training.train import build_network, get_recipe, train_model
from mixzoo.zoo.data import load_dataset

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name")
    ap.add_argument("changes", help="JSON object of recipe fields (plus r and arch)")
    ap.add_argument("--base", default="fmnist-lip075")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--out", default=str(HERE / "results" / "certify_lipschitz_fmnist" / "recipe_search.jsonl"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    changes = json.loads(args.changes)
    base = get_recipe(args.base)
    if "r" in changes:
        changes["margin_offset"] = changes.pop("r") * math.sqrt(2)
    if "arch" in changes:
        changes["arch_kwargs"] = {**base.arch_kwargs, **changes.pop("arch")}
    recipe = base.replace(name=args.name, **changes)
    t0 = time.perf_counter()
    result = train_model(recipe, save=False, evaluate=False, progress=False)
    seconds = time.perf_counter() - t0
    net = build_network(recipe)
    net.load_state_dict(result.state_dict)
    net.eval()
    data = load_dataset(recipe.dataset, "evaluation", n=args.n)
    with torch.no_grad():
        logits = net(data.images).double()
    radius = logit_lipschitz_radius(logits, 1.0, [1.0])[0]  # the plain network: 1-Lipschitz, no logit scale
    correct = logits.argmax(1) == data.labels
    row = {"name": args.name, "base": args.base, "changes": json.loads(args.changes), "n": args.n,
           "seconds": round(seconds), "clean": correct.double().mean().item(),
           **{f"r{r}": ((radius >= r) & correct).double().mean().item() for r in (0.25, 0.5, 0.75, 1.0)},
           "machine": machine_line(run_record("cpu")) + f"; load {os.getloadavg()[0]:.1f}"}
    print(json.dumps(row), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a") as fh:
        fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
