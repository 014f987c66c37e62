"""`make demo`: what it sizes (and `FULL=1`, the full-size run), and benchmarks/demo_speed.json, the measurement the
README quotes, checked against the Makefile it measured and against its own figures."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "benchmarks" / "demo_speed.json"

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def _script():
    spec = importlib.util.spec_from_file_location("demo_speed", ROOT / "benchmarks" / "demo_speed.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["demo_speed"] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop("demo_speed", None)
    return module


def _option(cmd: list[str], flag: str) -> str:
    return cmd[cmd.index(flag) + 1]


@pytest.mark.parametrize(("make_vars", "n", "n_calib", "curve_n"), [([], "60", "300", "50"),
                                                                    (["FULL=1"], "200", "1000", "100"),
                                                                    (["N=100"], "100", "300", "50")])
def test_demo_sizes_images_calibration_and_curve_only(make_vars, n, n_calib, curve_n):
    """The sizes move; the attack on every row stays the full adaptive-apgd at the standard budget."""
    mix, bench, verify = _script().demo_commands(make_vars, "BIN", "out")
    assert mix[:2] == ["BIN/mixzoo", "mix"] and _option(mix, "--n-calib") == n_calib
    assert bench[1] == "bench" and (_option(bench, "--n"), _option(bench, "--curve-n")) == (n, curve_n)
    assert _option(bench, "--attack") == "adaptive-apgd" and "--budget" not in bench and "-O" not in bench
    assert "--no-baseline" not in bench and "--save-adversarial" in bench
    assert verify[1:3] == ["verify", "out/bench"]


def test_the_committed_measurement_is_of_today_s_makefile():
    record = json.loads(RECORD.read_text())
    commands = [" ".join(["mixzoo", *c[1:]]) for c in _script().demo_commands(record["make_vars"], "BIN",
                                                                              record["out"])]
    measured = [c["command"] for c in record["commands"]]
    assert measured == commands[:len(measured)], "re-run benchmarks/demo_speed.py: the Makefile changed"
    assert record == _script().summary(record), "the totals are derived from the commands (--summarise)"
    if record["complete"]:
        assert [c["returncode"] for c in record["commands"]] == [0, 0, 0]
