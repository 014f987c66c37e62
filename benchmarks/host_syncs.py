"""Operations and host-device synchronisations per FAB-T iteration and per Square query, pyautoattack's against
`adaptive`'s (``fab-t-exact``: pyautoattack's FAB-T through mixzoo's NaN guard; the per-example Square).

Counted by dispatch on the CPU: the same operations run on a GPU, where each synchronisation (``.item()`` /
``bool(tensor)``, ``nonzero``, boolean-mask indexing) makes the host wait for the device. Copies of CPU-drawn random
numbers to the device are not counted (on the CPU there is no copy); pyautoattack's Square makes 3 per query.
Per-step figures are differences between two run lengths, so set-up work cancels out.

    python benchmarks/host_syncs.py --n 40 --out benchmarks/host_syncs_fmnist_cpu.json
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent))

from eval_speed import FMNIST_CARD  # noqa: E402

from mixzoo.attacks.square import SquareSettings

SYNCS = ("aten._local_scalar_dense", "aten.nonzero", "aten.masked_select")


class Count(TorchDispatchMode):
    """Counts every aten operation; boolean-mask indexing gets its own name (it synchronises)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func).rsplit(".", 1)[0]
        if name.startswith("aten.index") and any(
                isinstance(a, list | tuple) and any(isinstance(t, torch.Tensor) and t.dtype == torch.bool
                                                    for t in a) for a in args):
            name += "[bool]"
        self.ops[name] += 1
        return func(*args, **(kwargs or {}))

    def syncs(self) -> int:
        return sum(v for k, v in self.ops.items() if k.startswith(SYNCS) or k.endswith("[bool]"))


def per_step(run: Callable[[int], Count], short: int, long: int) -> dict:
    a, b = run(short), run(long)
    steps = long - short
    syncs = {k: (b.ops[k] - a.ops[k]) / steps for k in b.ops
             if (k.startswith(SYNCS) or k.endswith("[bool]")) and b.ops[k] != a.ops[k]}
    return {"ops": round((sum(b.ops.values()) - sum(a.ops.values())) / steps, 2),
            "syncs": round((b.syncs() - a.syncs()) / steps, 2), "syncs_by_op": syncs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--card", default=str(FMNIST_CARD))
    ap.add_argument("--n", type=int, default=40, help="first N evaluation images (the clean-correct ones attacked)")
    ap.add_argument("--out", default=None, help="write the counts as JSON here")
    args = ap.parse_args()

    import mixzoo
    from mixzoo.attacks.adapters import FiniteGuard
    from mixzoo.attacks.square import min_margin_square
    from mixzoo.core.card import MixCard
    from mixzoo.core.compat import import_autoattack
    from mixzoo.zoo.data import load_dataset
    from mixzoo.zoo.pairs import card_dataset

    torch.set_num_threads(1)
    aa = import_autoattack()
    card = MixCard.load(args.card)
    model = mixzoo.load_mixed(card, device="cpu")
    model.gradient = "exact"
    eps, norm = float(card.attack["eps"]), str(card.attack.get("norm", "Linf"))
    data = load_dataset(card_dataset(card, model.rbc), "evaluation", n=args.n)
    with torch.no_grad():
        keep = model(data.images).argmax(1) == data.labels
    x, y = data.images[keep], data.labels[keep]

    def fab(forward: torch.nn.Module) -> Callable[[int], Count]:
        def run(n_iter: int) -> Count:
            att = aa.fab_pt.FABAttack_PT(forward, n_restarts=1, n_iter=n_iter, eps=eps, seed=0, norm=norm,
                                         verbose=False, device=x.device, targeted=True, n_target_classes=1)
            count = Count()
            with torch.no_grad(), count:
                att.perturb(x.clone(), y.clone())
            return count
        return run

    def square_aa(n_queries: int) -> Count:
        att = aa.square.SquareAttack(model, p_init=0.8, n_queries=n_queries, eps=eps, norm=norm, n_restarts=1,
                                     seed=0, verbose=False, device=x.device, resc_schedule=False)
        count = Count()
        with torch.no_grad(), count:
            att.perturb(x.clone(), y.clone())
        return count

    def square_mixzoo(n_queries: int) -> Count:
        count = Count()
        with torch.no_grad(), count:
            min_margin_square(model, x, y,
                              SquareSettings(eps=eps, norm=norm, n_queries=n_queries, p_init=0.8, seed=0, loss="logit"),
                              layer_norm=False, batch_size=len(x), progress=False, index=torch.arange(len(x)))
        return count

    forward_only = Count()
    with torch.no_grad(), forward_only:
        model(x)
    result = {
        "card": args.card, "n_images": args.n, "n_attacked": len(x),
        "classifier_forward_syncs": forward_only.syncs(),
        "fab-t iteration, pyautoattack": per_step(fab(model), 5, 15),
        "fab-t iteration, mixzoo fab-t-exact": per_step(fab(FiniteGuard(model, "here")), 5, 15),
        "square query, pyautoattack": per_step(square_aa, 20, 60),
        "square query, mixzoo": per_step(square_mixzoo, 20, 60),
    }
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
