"""Run by tests/e2e/test_distributed.py under ``torchrun``: ``mixzoo bench`` with one setting differing by rank.

The arguments come as JSON in ``MISMATCH_ARGS``: ``{"bench": [...], "option": "--eps", "values": ["0.2", "0.05"]}``;
rank r runs ``mixzoo bench *bench option values[r]``, as if each rank had been started with its own command.
"""

from __future__ import annotations

import json
import os
import sys

from mixzoo.cli import main

spec = json.loads(os.environ["MISMATCH_ARGS"])
sys.argv = ["mixzoo", "bench", *spec["bench"], spec["option"], spec["values"][int(os.environ.get("RANK", "0"))]]
main()
