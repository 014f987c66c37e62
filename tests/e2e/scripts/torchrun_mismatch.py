"""Run by tests/e2e/test_run_record_ranks.py under ``torchrun``: ``mixzoo bench`` of a digits card where rank 1 is
started with other arguments than rank 0.

usage: torchrun --nproc-per-node 2 torchrun_mismatch.py CARD OUT CACHE -- RANK1_EXTRA_ARGS...
Every rank runs ``mixzoo bench CARD --out OUT --cache-dir CACHE`` with the same small attack; rank 1 appends
RANK1_EXTRA_ARGS (e.g. ``--eps 0.05``), which later options override.
"""

from __future__ import annotations

import os
import sys

import torch

torch.set_num_threads(1)


def main() -> None:
    card, out, cache = sys.argv[1:4]
    extra = sys.argv[5:] if os.environ.get("RANK") == "1" else []
    sys.argv = ["mixzoo", "bench", card, "--out", out, "--cache-dir", cache, "--attack", "adaptive-apgd",
                "-O", "n_iter=3", "-O", "n_target_classes=2", "--n-images", "20", "--batch-size", "10", "--no-curve",
                "--no-baseline", "--no-plots", "--eps", "0.2", "--seed", "0", *extra]
    from mixzoo.cli import main as cli

    cli()


if __name__ == "__main__":
    main()
