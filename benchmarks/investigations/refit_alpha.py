"""Does the second calibration pass (``mixzoo mix --refit-alpha``, paper App. D.9) keep the promised robustness?

Calibrates the built-in Fashion-MNIST pair twice at the default beta, with one pass (Algorithm 1 on MMAA points of
h^LN) and with two (alpha chosen again on MMAA points of the transformed RBC h^M(s*, p*, c*)), then evaluates the
RBC and both MixedNUTS classifiers on the first N evaluation images with the same attack (default: the gradient
half of the adaptive AutoAttack, as ``make demo``; every row through the cache that ``mixzoo bench`` uses).

    .venv/bin/python benchmarks/investigations/refit_alpha.py [--n 1000] [--attack adaptive-apgd] [--out FILE.json]

Writes a JSON file with the cards, per-row clean / robust accuracy and seconds, and the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import torch

from mixzoo.attacks.runner import evaluate
from mixzoo.core.cache import Cache
from mixzoo.core.record import RunRecord
from mixzoo.core.request import EvalRequest
from mixzoo.methods.mixednuts.fitting import mix
from mixzoo.methods.mixednuts.mixing import MixedClassifier
from mixzoo.zoo.data import load_dataset
from mixzoo.zoo.pairs import card_key_parts as mixed_key_parts
from mixzoo.zoo.pairs import card_models, model_hash


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--attack", default="adaptive-apgd")
    ap.add_argument("--beta", type=float, default=0.985)
    ap.add_argument("--out", type=Path,
                    default=Path("benchmarks/results/mixednuts_fmnist/population_ln/refit_alpha.json"))
    args = ap.parse_args()

    cache = Cache(None)
    cards = {}
    for label, refit in (("one pass", False), ("two passes (--refit-alpha)", True)):
        t0 = time.perf_counter()
        res = mix(beta=args.beta, refit_alpha=refit, progress=True)
        cards[label] = (res.card, time.perf_counter() - t0)
    abc, rbc = card_models(next(iter(cards.values()))[0])
    data = load_dataset("fashion-mnist", "evaluation", n=args.n)
    request = EvalRequest(RunRecord(attack=args.attack, eps=0.1, norm="Linf", seed=0, batch_size=250), cache)
    rows = []
    ev = evaluate(rbc, data.images, data.labels,
                  request.replace(key_parts={"data": data.fingerprint, "model": model_hash(rbc)}, label="RBC"))
    rows.append({"model": "RBC fmnist-pgd", **_row(ev)})
    for label, (card, seconds) in cards.items():
        model = MixedClassifier.from_card(card, abc, rbc)
        ev = evaluate(model, data.images, data.labels,
                      request.replace(key_parts=mixed_key_parts(card, abc, rbc, data), label=f"MixedNUTS, {label}"))
        rows.append(
            {
                "model": f"MixedNUTS, {label}",
                "alpha": card.params["alpha"],
                "objective": card.params["objective"],
                "mix_seconds": seconds,
                **_row(ev),
            }
        )
    out = {"attack": args.attack, "n": len(data), "beta": args.beta, "rows": rows,
           "cards": {label: card.to_dict() for label, (card, _) in cards.items()},
           "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                       "torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability()}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2, default=str) + "\n")
    for r in rows:
        print(f"{r['model']:<40} alpha {r.get('alpha', float('nan')):.5f}  clean {100 * r['clean_accuracy']:.1f}"
              f"  robust {100 * r['robust_accuracy']:.1f}  ({r['seconds']:.0f} s)")


def _row(ev: dict) -> dict:
    return {"clean_accuracy": sum(ev["clean_correct"]) / len(ev["clean_correct"]),
            "robust_accuracy": sum(ev["robust_correct"]) / len(ev["robust_correct"]), "seconds": ev["seconds"]}


if __name__ == "__main__":
    main()
