"""Cost per step of FAB-T and Square, pyautoattack's against `adaptive`'s, on one classifier, images and device.

Times, in one process and alternating order (pyautoattack, mixzoo, pyautoattack, mixzoo), on the clean-correct
examples among the first ``--n`` evaluation images of a card:

* FAB-T: pyautoattack's ``FABAttack_PT`` called on the classifier (as standard AutoAttack runs it) and the
  ``fab-t-exact`` component of ``adaptive`` (the same FAB-T through mixzoo's NaN guard), ``--fab-targets``
  targets x 100 iterations; their adversarial images must be equal (FAB-T with one restart draws nothing);
* Square: pyautoattack's ``SquareAttack`` and mixzoo's per-example Square as ``adaptive`` runs it
  (``min_margin_square`` with the logit margin), ``--queries`` queries.

Reports milliseconds per FAB iteration (per target and iteration) and per Square query, with the device
synchronised before every clock reading. Run on a GPU with ``--device cuda`` (about a minute on one GPU with the
defaults); on a CPU it runs too, slowly.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from eval_speed import FMNIST_CARD, machine  # noqa: E402

from mixzoo.attacks.square import SquareSettings


def _clock(device: str) -> float:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--card", default=str(FMNIST_CARD))
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--fab-targets", type=int, default=3)
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default="benchmarks/step_cost")
    args = ap.parse_args()

    import mixzoo
    from mixzoo.attacks.adapters import _pyautoattack
    from mixzoo.attacks.square import min_margin_square
    from mixzoo.core.card import MixCard
    from mixzoo.core.compat import import_autoattack
    from mixzoo.zoo.data import load_dataset
    from mixzoo.zoo.pairs import card_dataset

    aa = import_autoattack()
    card = MixCard.load(args.card)
    model = mixzoo.load_mixed(card, device=args.device)
    model.gradient = "exact"
    eps, norm = float(card.attack["eps"]), str(card.attack.get("norm", "Linf"))
    data = load_dataset(card_dataset(card, model.rbc), "evaluation", n=args.n)
    x, y = data.images.to(args.device), data.labels.to(args.device)
    with torch.no_grad():
        keep = model(x).argmax(1) == y
    x, y = x[keep], y[keep]
    index = torch.nonzero(keep).squeeze(1).to(args.device)
    n, t = len(x), args.fab_targets
    opts = {"n_iter": 100, "n_restarts": 1, "n_queries": args.queries}

    def fab_pyautoattack() -> torch.Tensor:
        att = aa.fab_pt.FABAttack_PT(model, n_restarts=1, n_iter=100, eps=eps, seed=0, norm=norm, verbose=False,
                                     device=x.device, targeted=True, n_target_classes=t)
        with torch.no_grad():
            return att.perturb(x.clone(), y.clone())

    component = _pyautoattack("fab-t", model, opts, eps, norm, 0, t, "exact")

    def fab_mixzoo() -> torch.Tensor:
        return component.fn(x, y)

    def square_pyautoattack() -> torch.Tensor:
        att = aa.square.SquareAttack(model, p_init=0.8, n_queries=args.queries, eps=eps, norm=norm, n_restarts=1,
                                     seed=0, verbose=False, device=x.device, resc_schedule=False)
        with torch.no_grad():
            return att.perturb(x.clone(), y.clone())

    def square_mixzoo() -> torch.Tensor:
        return min_margin_square(model, x, y,
                                 SquareSettings(eps=eps, norm=norm, n_queries=args.queries, p_init=0.8, seed=0,
                                                loss="logit"),
                                 layer_norm=False, batch_size=n, progress=False, index=index).adv_images

    runs: dict[str, list[float]] = {}
    outputs: dict[str, torch.Tensor] = {}
    for _ in range(args.repeats):
        for name, fn in (("fab-t pyautoattack", fab_pyautoattack), ("fab-t mixzoo", fab_mixzoo),
                         ("square pyautoattack", square_pyautoattack), ("square mixzoo", square_mixzoo)):
            t0 = _clock(args.device)
            outputs[name] = fn()
            runs.setdefault(name, []).append(_clock(args.device) - t0)
            print(f"[step_cost] {name}: {runs[name][-1]:.2f} s", flush=True)
    steps = {"fab-t": t * 100, "square": args.queries}
    rows = {name: {"seconds": [round(s, 3) for s in secs],
                   "ms_per_step": round(1000 * min(secs) / steps[name.split()[0]], 3)} for name, secs in runs.items()}
    result = {"card": args.card, "n_images": args.n, "n_attacked": n, "fab_targets": t, "fab_iterations": 100,
              "square_queries": args.queries, "device": args.device, "machine": machine(args.device),
              "fab_outputs_equal": bool(torch.equal(outputs["fab-t pyautoattack"], outputs["fab-t mixzoo"])),
              "rows": rows}
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1))
    lines = [f"# FAB-T and Square per step: {Path(args.card).name}, {n} clean-correct of the first {args.n} images",
             "", "Script: `benchmarks/step_cost.py`. Machine: " + str(result["machine"].get("summary")) + ".",
             f"FAB-T outputs equal: {result['fab_outputs_equal']}.", "",
             "| run | seconds (each repeat) | ms per FAB iteration / Square query (fastest) |", "|---|---|---|"]
    lines += [f"| {name} | {', '.join(map(str, r['seconds']))} | {r['ms_per_step']} |" for name, r in rows.items()]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(json.dumps(rows), flush=True)


if __name__ == "__main__":
    main()
