"""Run by tests/e2e/test_distributed.py under ``torchrun``: one small bench of a digits card.

usage: torchrun --nproc-per-node N torchrun_bench.py CARD OUT CACHE BATCH_SIZE [KILL_RANK]
With KILL_RANK, that rank exits abruptly (os._exit) after attacking its first batch, as a killed process would.
"""

from __future__ import annotations

import json
import os
import sys

import torch

torch.set_num_threads(1)


def main() -> None:
    card, out, cache, batch_size = sys.argv[1:5]
    kill_rank = int(sys.argv[5]) if len(sys.argv) > 5 else None
    rank = int(os.environ.get("RANK", "0"))
    import mixzoo.attacks.runner as runner

    real, attacked = runner._attack_batch, []

    def counted(model, images, labels, start, stop, batch_index, run):  # which batches this rank attacked (printed
        if kill_rank == rank and attacked:                                # at the end), and the kill
            os._exit(17)  # the next batch never comes
        attacked.append(batch_index)
        return real(model, images, labels, start, stop, batch_index, run)

    runner._attack_batch = counted
    from mixzoo.evaluation.bench import bench

    # plots=True: every rank computes the card method's figure data (its cached steps share their batches out);
    # rank 0 renders the figures
    bench(card, attack="adaptive-apgd", n=60, attack_options={"n_iter": 6, "n_target_classes": 2},
          curve=None, baseline=None, plots=kill_rank is None, progress=False, batch_size=int(batch_size), out=out,
          cache_dir=cache, save_adversarial=True)
    print(json.dumps({"rank": rank, "attacked": len(attacked)}))


if __name__ == "__main__":
    main()
