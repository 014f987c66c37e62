"""torchrun ranks started with other arguments stop before any attack: every rank exits 2 with one line naming
the field that differs and both values, and nothing is written (gloo, 2 CPU processes, the digits card)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import mixzoo

SCRIPT = Path(__file__).parent / "scripts" / "torchrun_mismatch.py"
# a traceback frame in mixzoo's own code or in the script (not torch's launcher, whose path may contain "mixzoo"
# when the checkout's folder is called that)
OUR_FRAME = re.compile(r'File "(' + re.escape(str(Path(mixzoo.__file__).parent)) + "|" + re.escape(str(SCRIPT)) + ")")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MIXZOO_DIST_TIMEOUT": "300"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--master-addr=127.0.0.1",
           f"--master-port={free_port()}", str(SCRIPT), *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.subprocess
@pytest.mark.timeout(900)
@pytest.mark.parametrize(("extra", "field", "values"), [
    (["--eps", "0.05"], "eps", ("0.2", "0.05")),
    (["--seed", "7"], "seed", ("0", "7")),
    (["--n-images", "10"], "n", ("20", "10")),
])
def test_ranks_with_other_arguments_stop_before_any_attack(digits_card, tmp_path, extra, field, values):
    out, cache = tmp_path / "out", tmp_path / "cache"
    done = torchrun(str(digits_card), str(out), str(cache), "--", *extra)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode != 0, done.stderr[-3000:]
    # each rank stops with the same one line (torchrun may end the slower one first: at least one prints it)
    assert 1 <= len(errors) <= 2, done.stderr[-3000:]
    assert all(f"disagree on the settings: {field} is {values[0]} on rank 0 and {values[1]} on rank 1" in e
               for e in errors), errors
    # no rank raised past mixzoo's one line (torchrun's launcher prints its own ChildFailedError traceback)
    assert not OUR_FRAME.search(done.stderr), done.stderr[-3000:]
    assert "batches are missing" not in done.stderr and "gloo" not in done.stderr.lower(), done.stderr[-3000:]
    codes = re.findall(r"exitcode\s*:\s*(-?\d+)", done.stderr)  # exit 2, or ended by torchrun after the other
    assert "2" in codes and set(codes) <= {"2", "-15"}, done.stderr[-3000:]
    assert not out.exists()
    assert not (cache / "bench").exists()  # nothing attacked
