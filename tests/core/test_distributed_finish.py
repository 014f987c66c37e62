"""mixzoo.core.distributed.finish: a rank that is done waits for the others, then leaves the job."""

import torch.distributed as dist
from typer.testing import CliRunner

from mixzoo.core.distributed import finish


def test_finish_leaves_the_job_and_is_a_no_op_outside_one(tmp_path) -> None:
    finish()  # one process, no job: nothing to do
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    assert dist.is_initialized()
    finish()
    assert not dist.is_initialized()
    finish()  # already left: still nothing to do


def test_a_command_that_succeeds_under_a_launcher_leaves_the_job(tmp_path, monkeypatch) -> None:
    from mixzoo.cli import app

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    monkeypatch.setenv("WORLD_SIZE", "2")  # what torchrun sets; the group above stands in for its job
    try:
        result = CliRunner().invoke(app, ["list", "--dataset", "digits"])
        assert result.exit_code == 0, result.output
        assert not dist.is_initialized()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
