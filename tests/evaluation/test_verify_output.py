"""``mixzoo verify --out``: the result file is checked like every writing command's output (nothing replaced that
mixzoo did not write, no special file written through, nothing written on a refusal)."""

from __future__ import annotations

import json

import pytest
from foreign_files import put_foreign, tree_state
from typer.testing import CliRunner

from mixzoo.cli import app
from mixzoo.core.errors import InputError
from mixzoo.evaluation.bench import bench
from mixzoo.evaluation.verify import verify_report


@pytest.fixture(scope="module")
def bench_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("verify-out")
    res = CliRunner().invoke(app, ["mix", "--method", "linear", "--abc", "digits-std", "--rbc", "digits-pgd", "-O",
                                   "alpha=0.9", "--out", str(root / "lin.toml")])
    assert res.exit_code == 0, res.output
    bench(root / "lin.toml", out=root / "bench", cache_dir=root / "cache", save_adversarial=True, attack="apgd", n=8,
          attack_options={"n_iter": 2, "n_target_classes": 1}, curve=None, plots=False, baseline=None,
          extra_attacks=False, batch_size=8, progress=False)
    return root / "bench"


@pytest.mark.parametrize("kind", ["fifo", "directory", "link", "unrelated", "bench report"])
def test_verify_refuses_what_it_did_not_write_at_its_out(bench_dir, tmp_path, kind):
    if kind == "bench report":  # --out pointed at the report being verified
        target = tmp_path / "out" / "report.json"
        target.parent.mkdir()
        target.write_bytes((bench_dir / "report.json").read_bytes())
    else:
        target = tmp_path / "out" / "verify.json"
        put_foreign(target, kind, tmp_path)
    before = tree_state(tmp_path)
    res = CliRunner().invoke(app, ["verify", str(bench_dir), "--out", str(target)])
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (res.output,
                                                                                       repr(res.exception))
    assert target.name in lines[0] and "--out" in lines[0], lines[0]
    with pytest.raises(InputError, match="--out"):
        verify_report(bench_dir, out=target)
    assert tree_state(tmp_path) == before  # the thing in the way untouched, nothing written beside it


def test_verify_replaces_its_own_result_and_writes_a_new_one(bench_dir, tmp_path):
    target = tmp_path / "v" / "verify.json"
    first = CliRunner().invoke(app, ["verify", str(bench_dir), "--out", str(target)])
    assert first.exit_code == 0, first.output
    written = json.loads(target.read_text())
    assert written["passed"] is True and written["rows"]
    target.write_text(json.dumps({**written, "passed": False}))  # an earlier result of verify: replaced
    again = CliRunner().invoke(app, ["verify", str(bench_dir), "--out", str(target)])
    assert again.exit_code == 0, again.output
    assert json.loads(target.read_text())["passed"] is True
    empty = tmp_path / "empty.json"  # an empty file (e.g. from mktemp) is no one's result
    empty.touch()
    assert verify_report(bench_dir, out=empty).passed and json.loads(empty.read_text())["passed"] is True


def test_a_refused_verify_writes_no_result(bench_dir, tmp_path):
    """Unusable input (exit 2) leaves no result file behind."""
    target = tmp_path / "v.json"
    res = CliRunner().invoke(app, ["verify", str(tmp_path / "nowhere"), "--out", str(target)])
    assert res.exit_code == 2 and not target.exists()
