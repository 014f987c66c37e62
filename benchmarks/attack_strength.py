"""How complete is the adaptive attack? Extra gradient attacks on the examples it leaves robust.

    .venv/bin/python benchmarks/attack_strength.py CARD --n 1000 --alpha-linear 0.95 \
        [--variants exact,transfer-s1] [--cache-dir DIR] [--device cpu] [--out results/attack_strength.json]

For MixedNUTS (the card) and the linear baseline (``--alpha-linear``), takes the examples that ``mixzoo bench CARD
--attack adaptive --n N`` left robust (its evaluation, read from the mixzoo cache when that bench ran with the same
cache, else computed; or a saved evaluation given with ``--robust-json``), and runs on them:

* ``exact``: APGD-CE and APGD-T (9 targets, 100 iterations) on the exact gradient of the mixture formula
  (``MixedClassifier(gradient="exact")``), which the adaptive attack of App. B.2.1 does not use;
* ``transfer-sK``: the adaptive attack's own transfer-based APGD-CE + APGD-T again with seed K;
* ``bypass``: APGD-CE + APGD-T on the bypass gradient of App. B.2.2 (the gradient FAB-T gets).

It prints and writes, per model and variant, how many more examples break, and the union over all variants: the
robust accuracy the adaptive attack would have reported had it included them. Nothing here changes a bench number.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from mixzoo.attacks import AdaptiveStrong
from mixzoo.attacks.apgd import effective_n_targets
from mixzoo.attacks.runner import evaluate
from mixzoo.attacks.suites import extra_apgd
from mixzoo.core.cache import Cache
from mixzoo.core.card import MixCard
from mixzoo.core.record import RunRecord
from mixzoo.core.request import EvalRequest
from mixzoo.methods.mixednuts.mixing import MixedClassifier
from mixzoo.zoo.data import load_dataset
from mixzoo.zoo.models import load_model
from mixzoo.zoo.pairs import card_key_parts as mixed_key_parts
from mixzoo.zoo.pairs import model_key


class ExtraAPGD(AdaptiveStrong):
    """One variant of the extra gradient attacks (``mixzoo.attacks.suites.extra_apgd``) on its own."""

    name = "attack-strength"
    defaults = {**AdaptiveStrong.defaults, "variant": "exact"}

    def components(self, model, n_classes):
        n_targets = effective_n_targets(n_classes, int(self.options["n_target_classes"]))
        variant = self.options["variant"]
        if variant in ("exact", "bypass"):
            return extra_apgd(model, self.options, self.eps, self.norm, n_targets, modes=(variant,), seed=self.seed)
        if variant.startswith("transfer-s"):
            return extra_apgd(model, self.options, self.eps, self.norm, n_targets,
                              seeds={variant: int(variant.removeprefix("transfer-s"))})
        raise SystemExit(f"unknown variant {variant!r}: use exact, bypass or transfer-sK")


def extra_breaks(model: MixedClassifier, x: torch.Tensor, y: torch.Tensor, variant: str, eps: float, norm: str,
                 batch_size: int) -> torch.Tensor:
    """Boolean mask over ``x``: broken by the variant's APGD-CE or APGD-T (judged on the model's true output)."""
    res = ExtraAPGD(eps=eps, norm=norm, variant=variant, batch_size=batch_size).run(model, x, y, progress=False)
    return (res.clean_correct & ~res.robust_correct).to(y.device)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("card")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--alpha-linear", type=float, default=None, help="also check the linear baseline at this alpha")
    ap.add_argument("--variants", default="exact,transfer-s1")
    ap.add_argument("--robust-json", action="append", default=[],
                    help="KIND=PATH: a saved bench evaluation (kind mixednuts or linear) instead of the cache")
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch-size", type=int, default=250)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    card = MixCard.load(args.card)
    abc, rbc = load_model(card.abc["name"], device=args.device), load_model(card.rbc["name"], device=args.device)
    eps, norm = card.attack["eps"], card.attack["norm"]
    data = load_dataset(card.dataset, "evaluation", n=args.n)
    saved = dict(item.split("=", 1) for item in args.robust_json)
    models = {"mixednuts": (MixedClassifier.from_card(card, abc, rbc), mixed_key_parts(card, abc, rbc, data))}
    if args.alpha_linear is not None:
        models["linear"] = (MixedClassifier.linear(abc, rbc, alpha=args.alpha_linear),
                            {"data": data.fingerprint, "abc": model_key(abc), "rbc": model_key(rbc),
                             "linear_alpha": args.alpha_linear})
    results = {"card": args.card, "n": args.n, "eps": eps, "norm": norm, "device": args.device,
               "alpha_linear": args.alpha_linear, "models": {}}
    for kind, (model, key_parts) in models.items():
        if kind in saved:
            ev = json.loads(Path(saved[kind]).read_text())
        else:
            record = RunRecord(attack="adaptive", eps=eps, norm=norm, seed=0, batch_size=args.batch_size)
            ev = evaluate(model, data.images, data.labels,
                          EvalRequest(record, Cache(args.cache_dir), key_parts=key_parts, label=kind))
        robust = torch.tensor(ev["robust_correct"])
        idx = robust.nonzero().squeeze(1)
        x, y = data.images[idx].to(args.device), data.labels[idx].to(args.device)
        row = {"adaptive_robust": int(robust.sum()), "variants": {}}
        union = torch.zeros(len(idx), dtype=torch.bool, device=y.device)
        for variant in args.variants.split(","):
            t0 = time.perf_counter()
            broken = extra_breaks(model, x, y, variant, eps, norm, args.batch_size)
            union |= broken
            row["variants"][variant] = {"newly_broken": int(broken.sum()), "seconds": time.perf_counter() - t0,
                                        "examples": idx[broken.cpu()].tolist()}
            print(kind, variant, row["variants"][variant], flush=True)
        row["union_newly_broken"] = int(union.sum())
        row["robust_accuracy_adaptive"] = int(robust.sum()) / args.n
        row["robust_accuracy_with_extras"] = (int(robust.sum()) - int(union.sum())) / args.n
        results["models"][kind] = row
        print(kind, {k: v for k, v in row.items() if k != "variants"}, flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
