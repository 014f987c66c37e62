"""Run by tests/e2e/test_distributed.py under ``torchrun``: rank 1 reaches the gather SECONDS late, as a rank whose
last batch takes longer than ``MIXZOO_DIST_TIMEOUT`` would.

usage: torchrun --nproc-per-node 2 torchrun_slow_rank.py SECONDS
"""

from __future__ import annotations

import sys
import time

from mixzoo.core import distributed
from mixzoo.core.errors import run_script


def main() -> None:
    w = distributed.init("cpu")
    if w.rank == 1:
        time.sleep(float(sys.argv[1]))
    print(distributed.gather(w.rank))


if __name__ == "__main__":
    run_script(main)
