"""AutoAttack (standard: APGD-CE, APGD-T, FAB-T, Square; Croce & Hein 2020) on the robust zoo models.

    .venv/bin/python benchmarks/zoo_autoattack.py fmnist-pgd fmnist-trades --n 10000 [--device cuda]

Prints one JSON line per model: clean and AutoAttack accuracy on the first ``n`` evaluation images at the
registry's epsilon. Results recorded in ``benchmarks/zoo_training.md`` and the registry's ``reported``.
With ``--proxy-abc NAME`` each model also gets its PGD-20 margin statistics and the MixedNUTS proxy of
``benchmarks/rbc_candidates.py`` against that accurate model, on the same images.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

import mixzoo.zoo.models
from mixzoo.core.compat import import_autoattack
from mixzoo.zoo.data import load_dataset


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="+")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch-size", type=int, default=1000)
    ap.add_argument("--proxy-abc", default=None)
    ap.add_argument("--skip-aa", action="store_true")
    args = ap.parse_args()
    aa = import_autoattack()
    for name in args.names:
        model = mixzoo.zoo.models.load_model(name, device=args.device)
        spec = model.spec
        data = load_dataset(spec.dataset, "evaluation", n=args.n)
        x, y = data.images.to(args.device), data.labels.to(args.device)
        if args.proxy_abc:
            from rbc_candidates import mixednuts_proxy

            from mixzoo.training.train import margin_metrics, model_logits

            abc = mixzoo.zoo.models.load_model(args.proxy_abc, device=args.device)
            abc_logits, _ = model_logits(abc, data, eps=None)
            clean_logits, adv_logits = model_logits(model, data, eps=spec.epsilon)
            row = {"model": name, "abc": args.proxy_abc, **margin_metrics(data.labels, clean_logits, adv_logits)}
            for beta in (0.985, 0.98):
                row[f"proxy_{beta}"] = mixednuts_proxy(abc_logits, clean_logits, adv_logits, data.labels, beta)
            print(json.dumps(row), flush=True)
        if args.skip_aa:
            continue
        t0 = time.perf_counter()
        adversary = aa.AutoAttack(model, norm=spec.threat_model, eps=spec.epsilon, version="standard",
                                  device=args.device, seed=0)
        x_adv = adversary.run_standard_evaluation(x, y, batch_size=args.batch_size)
        x_adv = x_adv[0] if isinstance(x_adv, tuple) else x_adv  # pyautoattack returns (x_adv, y_adv)
        with torch.no_grad():
            clean = (model(x).argmax(1) == y).float().mean().item()
            robust = (model(x_adv).argmax(1) == y).float().mean().item()
            linf = (x_adv - x).abs().amax().item()
        print(json.dumps({"model": name, "n": len(y), "eps": spec.epsilon, "clean": clean, "autoattack": robust,
                          "max_linf": linf, "seconds": round(time.perf_counter() - t0, 1),
                          "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
                          "sha256": spec.sha256}), flush=True)


if __name__ == "__main__":
    main()
