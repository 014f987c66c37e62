"""How much does one example's break depend on APGD's random start, loss and gradient? (example 96)

    .venv/bin/python benchmarks/investigations/start_sensitivity.py \
        --card benchmarks/results/cards/fmnist_mixednuts.toml --index 96 \
        --batch 250 --k 64 --out benchmarks/results/autoattack_parity/fmnist_n1000_cpu/example96

1. Runs the installed AutoAttack's APGD-CE alone (``version="standard"`` settings, ``--seed``) on the first
   ``--batch`` evaluation images of the card, exactly as its standard evaluation starts, records the torch random
   state at each ``attack_single_run`` call and so recovers the very starting point AutoAttack drew for example
   ``--index``; says whether AutoAttack broke it.
2. Runs mixzoo's APGD-CE (:func:`mixzoo.attacks.apgd.apgd_run`) on that example alone from AutoAttack's start, on
   the exact gradient and on App. B.2.1's transfer gradient (``forward_pair``).
3. From ``--k`` other uniform starts (one batch of k copies of the example, one start each), counts the breaks of
   APGD with each (gradient, loss, iterations) of ``VARIANTS``.

Writes ``--out``.json and .md with the machine.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import torch

from mixzoo.attacks.apgd import ApgdSettings

# (name, gradient: "exact" or "transfer", loss, targeted at AutoAttack's found class, iterations)
VARIANTS = [
    ("exact CE", "exact", "ce", False, 100),
    ("transfer CE (adaptive's apgd-ce)", "transfer", "ce", False, 100),
    ("exact DLR", "exact", "dlr", False, 100),
    ("exact targeted DLR, AutoAttack's class", "exact", "dlr-targeted", True, 100),
    ("transfer targeted DLR, AutoAttack's class", "transfer", "dlr-targeted", True, 100),
    ("exact CE, 500 iterations", "exact", "ce", False, 500),
]


def autoattack_start(model, x, y, eps, norm, seed, index):
    """AutoAttack's APGD-CE on the batch; returns (broken?, predicted class, its start noise for x[index])."""
    from mixzoo.core.compat import import_autoattack

    aa = import_autoattack()
    cls = aa.autopgd_base.APGDAttack
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    original = cls.attack_single_run

    def spy(self, x_run, y_run, x_init=None):
        seen.append((torch.get_rng_state(), x_run.detach().cpu().clone()))
        return original(self, x_run, y_run, x_init)

    attack = aa.AutoAttack(model, norm=norm, eps=eps, seed=seed, version="standard", device=x.device)
    attack.attacks_to_run = ["apgd-ce"]
    cls.attack_single_run = spy
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            adv, _ = attack.run_standard_evaluation(x.clone(), y.clone(), batch_size=len(x))
    finally:
        cls.attack_single_run = original
    with torch.no_grad():
        pred = model(adv[index:index + 1]).argmax(1).item()
    state, x_run = seen[0]
    row = int(torch.nonzero((x_run.flatten(1) == x[index].cpu().flatten()).all(1))[0])
    keep = torch.get_rng_state()
    torch.set_rng_state(state)
    noise = 2 * torch.rand(x_run.shape) - 1  # the first draw of attack_single_run (L-inf)
    torch.set_rng_state(keep)
    return pred != int(y[index]), pred, noise[row:row + 1], len(seen)


def breaks(model, x1, y1, eps, norm, noise, gradient, loss, target, n_iter) -> int:
    from mixzoo.attacks.apgd import apgd_run, clean_record
    from mixzoo.attacks.margins import signed_margin

    k = len(noise)
    xs, ys = x1.expand(k, *x1.shape[1:]).clone(), y1.expand(k).clone()
    forward = model.forward_pair if gradient == "transfer" else model
    model.gradient = "exact"
    rec = clean_record(forward, xs, ys, signed_margin)
    apgd_run(forward, xs, ys, rec, ApgdSettings(eps=eps, norm=norm, n_iter=n_iter, loss=loss),
             target=None if target is None else torch.full((k,), target), noise=noise)
    with torch.no_grad():
        return int((model(rec.x).argmax(1) != ys).sum())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--card", required=True)
    ap.add_argument("--index", type=int, required=True)
    ap.add_argument("--batch", type=int, default=250, help="AutoAttack's batch: the first BATCH evaluation images")
    ap.add_argument("--k", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="benchmarks/start_sensitivity")
    args = ap.parse_args()
    if not 0 <= args.index < args.batch:
        raise SystemExit(f"--index must lie in the batch [0, {args.batch}); got {args.index}")
    torch.set_num_threads(args.threads)

    import mixzoo
    from mixzoo.core.card import MixCard
    from mixzoo.core.machine import machine_summary
    from mixzoo.zoo.data import load_dataset
    from mixzoo.zoo.pairs import card_dataset

    card = MixCard.load(Path(args.card))
    model = mixzoo.load_mixed(card)
    model.gradient = "exact"
    eps, norm = float(card.attack["eps"]), str(card.attack.get("norm", "Linf"))
    if norm != "Linf":
        raise SystemExit("this benchmark recovers AutoAttack's L-inf start only; use a card with norm Linf")
    data = load_dataset(card_dataset(card, model.rbc), "evaluation", n=args.batch)
    x, y = data.images, data.labels
    i = args.index
    t0 = time.perf_counter()
    aa_broken, aa_pred, aa_noise, n_runs = autoattack_start(model, x, y, eps, norm, args.seed, i)
    result = {"card": args.card, "index": i, "label": int(y[i]), "batch": args.batch, "seed": args.seed,
              "eps": eps, "k": args.k, "machine": f"{machine_summary()}, torch {torch.__version__}",
              "autoattack_apgd_ce": {"broken": aa_broken, "predicted": aa_pred, "single_runs": n_runs,
                                     "seconds": round(time.perf_counter() - t0, 1)},
              "from_autoattacks_start": {g: bool(breaks(model, x[i:i + 1], y[i:i + 1], eps, norm, aa_noise, g, "ce",
                                                        None, 100))
                                         for g in ("exact", "transfer")},
              "random_starts": []}
    print(json.dumps(result), flush=True)
    gen = torch.Generator().manual_seed(args.seed + 12345)
    noise = 2 * torch.rand((args.k, *x.shape[1:]), generator=gen) - 1
    for name, gradient, loss, targeted, n_iter in VARIANTS:
        t0 = time.perf_counter()
        n = breaks(model, x[i:i + 1], y[i:i + 1], eps, norm, noise, gradient, loss, aa_pred if targeted else None,
                   n_iter)
        row = {"variant": name, "broken": n, "of": args.k, "seconds": round(time.perf_counter() - t0, 1)}
        result["random_starts"].append(row)
        print(json.dumps(row), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    word = {True: "broken", False: "not broken"}
    own = result["from_autoattacks_start"]
    lines = [f"## Example {i} (label {result['label']}) of {Path(args.card).name}, eps {eps:g}", "",
             f"Machine: {result['machine']}.", "",
             f"AutoAttack's APGD-CE alone on the first {args.batch} images (seed {args.seed}): "
             f"{word[aa_broken]} (predicted {aa_pred}). mixzoo's APGD-CE from AutoAttack's start for this example: "
             f"exact gradient {word[own['exact']]}, transfer gradient {word[own['transfer']]}.", "",
             f"| APGD from {args.k} other uniform starts | broken | s |", "|---|---|---|"]
    lines += [f"| {r['variant']} | {r['broken']} / {r['of']} | {r['seconds']} |" for r in result["random_starts"]]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    from mixzoo.core.errors import run_script

    run_script(main)
