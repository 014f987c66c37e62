"""Run records: every bench/sanity report says what ran where, and every row which machine attacked it."""

from __future__ import annotations

import json
import os
import platform

import pytest
import torch
from eval_requests import ask

from mixzoo.attacks.runner import evaluate
from mixzoo.core.cache import Cache
from mixzoo.core.machine import describe_machine, machine_line, machine_summary, run_record
from mixzoo.zoo.data import load_dataset
from mixzoo.zoo.models import load_model


def test_describe_machine_reports_this_cpu():
    m = describe_machine("cpu")
    assert m["cpu_count"] == os.cpu_count()
    assert m["torch_threads"] == torch.get_num_threads()
    assert m["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    if os.path.exists("/proc/cpuinfo"):
        names = [line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")]
        assert m["cpu"] == names[0]
    assert "gpu" not in m  # a CPU run names no GPU, even on a machine that has one


def test_machine_summary_names_capability_and_threads():
    torch_threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        two = machine_summary("cpu")
    finally:
        torch.set_num_threads(torch_threads)
    assert two.endswith(", 2 threads") and describe_machine()["cpu"] in two
    assert f"({torch.backends.cpu.get_cpu_capability()})" in two


def test_run_record_and_its_line():
    record = run_record("cpu", seed=3)
    assert record["torch_version"] == torch.__version__
    assert record["python_version"] == platform.python_version()
    assert record["device"] == "cpu" and record["seed"] == 3
    assert record["machine"] == describe_machine("cpu")
    json.dumps(record)  # goes into report.json as is
    line = machine_line(record)
    assert line.startswith(describe_machine()["cpu"])
    assert f"torch {torch.__version__}" in line and record["created"] in line
    if record.get("git_commit"):
        assert record["git_commit"][:12] in line
        assert ("uncommitted" in line) == bool(record["source_modified"])
    assert machine_line({}) == "machine not recorded"
    gpu = machine_line({"machine": {"gpu": "NVIDIA H100 80GB HBM3", "cpu": "x", "cpu_count": 16,
                                    "torch_threads": 4, "cpu_capability": "AVX512"}})
    assert gpu.startswith("NVIDIA H100 80GB HBM3;") and "AVX512" not in gpu


def test_a_resumed_evaluation_names_both_machines(tmp_path):
    from mixzoo.attacks.outcome_cache import sealed

    """Batches record the machine that attacked them; a row finished elsewhere lists both, a cached one keeps them."""
    rbc = load_model("digits-pgd")
    data = load_dataset("digits", "evaluation", n=40)
    kwargs = dict(attack="apgd", eps=0.2, norm="Linf", seed=0, batch_size=20, key_parts={"test": "machine"},
                  label="rbc", attack_options={"n_iter": 3, "n_target_classes": 1}, progress=False)
    here = machine_summary("cpu")
    whole = evaluate(rbc, data.images, data.labels, ask(cache=Cache(tmp_path / "a"), **kwargs))
    assert whole["machine"] == here
    # the same evaluation interrupted after its first batch on another machine, then finished here
    cache = Cache(tmp_path / "b")
    evaluate(rbc, data.images, data.labels, ask(cache=cache, **kwargs))
    [final] = (cache.root / "bench").glob("*.json")
    partial = final.with_suffix(".partial")
    partial.mkdir()
    first = json.loads((tmp_path / "a" / "bench" / final.name).read_text())
    broken = sum(c and not r for c, r in zip(first["clean_correct"][:20], first["robust_correct"][:20], strict=True))
    batch = {"clean_correct": first["clean_correct"][:20], "robust_correct": first["robust_correct"][:20],
             "components": [{**c, "newly_broken": broken if i == 0 else 0} for i, c in enumerate(first["components"])],
             "warnings": [],
             "seconds": 1.0, "device": "cuda", "machine": "NVIDIA H100 80GB HBM3"}
    (partial / "000000.json").write_text(sealed(batch, final.stem))
    final.unlink()
    resumed = evaluate(rbc, data.images, data.labels, ask(cache=cache, **kwargs))
    assert resumed["machine"] == f"NVIDIA H100 80GB HBM3 + {here}"
    assert resumed["device"] == "cpu+cuda"
    again = evaluate(rbc, data.images, data.labels, ask(cache=cache, **kwargs))
    assert again["cached"] and again["machine"] == resumed["machine"]


@pytest.mark.parametrize("machines", [["m1", "m1", "m1", "m1"], ["m1", "m2", "m1", "m1"]])
def test_report_md_names_the_machines(machines):
    from dataclasses import replace

    from mixzoo.core.card import MixCard
    from mixzoo.evaluation.bench import ModelResult, Report
    from mixzoo.evaluation.report import markdown

    base = ModelResult(name="x", kind="abc", clean_accuracy=0.9, robust_accuracy=0.5, attack="apgd", epsilon=0.1,
                       norm="Linf", n=10, seconds=1.0)
    rows = [replace(base, name=k.upper(), kind=k, machine=m)
            for k, m in zip(("abc", "rbc", "linear", "mixednuts"), machines, strict=True)]
    card = MixCard("mixednuts", {"s": 1.0, "p": 1.0, "c": 0.0, "alpha": 0.9, "beta": 0.985, "clamp": "gelu"})
    report = Report(models=rows, card=card, settings={"attack": "apgd", "norm": "Linf", "eps": 0.1, "seed": 0},
                    dataset={"name": "digits", "split": "evaluation", "n": 10, "fingerprint": "f"},
                    run=run_record("cpu"))
    text = markdown(report)
    if len(set(machines)) == 1:
        assert "Every row was attacked on: m1." in text
    else:
        assert ("attacked on different machines: ABC ABC: m1; RBC RBC: m2; LINEAR: m1; MIXEDNUTS: m1." in text)
    assert f"Run on: {machine_line(report.run)}." in text
