"""The attack runner's cache (mixzoo/attacks/runner.py): an entry is reused only when it is an untouched outcome of
exactly the asked examples and settings; anything else is a miss, attacked again with one warning naming the file,
and the result equals that of a run without a cache."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from torch import nn

from mixzoo.attacks.outcome_cache import outcome_digest
from mixzoo.attacks.runner import evaluate
from mixzoo.core.cache import Cache
from mixzoo.core.record import RunRecord
from mixzoo.core.request import EvalRequest

N = 12


def tiny_case():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 5)).eval()
    images = torch.rand(N, 1, 4, 4)
    labels = model(images).argmax(1)  # every example clean-correct; a few robust at this eps
    return model, images, labels


def run(cache: Cache, **kw):
    model, images, labels = tiny_case()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        record = RunRecord(attack="apgd", eps=kw.pop("eps", 0.05), norm="Linf", seed=0,
                           batch_size=kw.pop("batch_size", 5), attack_options={"n_iter": 3, "n_target_classes": 1})
        ev = evaluate(model, images, labels, EvalRequest(record.replace(**kw), cache, key_parts={"test": "runner"},
                                                         label="tiny", progress=False))
    return ev, [str(w.message) for w in caught if "cache entry" in str(w.message)]


@pytest.fixture(scope="module")
def truth(tmp_path_factory):
    ev, _ = run(Cache(tmp_path_factory.mktemp("none"), enabled=False))
    assert 0 < sum(ev["robust_correct"]) < N  # the case has both kinds of outcome
    return ev


def only_entry(cache: Cache):
    (path,) = (cache.root / "bench").glob("*.json")
    return path


EDITS = {
    "all robust": lambda e: {**e, "robust_correct": [True] * N},
    "five outcomes": lambda e: {**e, "clean_correct": e["clean_correct"][:5],
                                "robust_correct": e["robust_correct"][:5]},
    "empty object": lambda e: {},
    "null": lambda e: None,
    "a list": lambda e: [e],
    "strings for flags": lambda e: {**e, "robust_correct": ["yes"] * N},
    "no components": lambda e: {k: v for k, v in e.items() if k != "components"},
    "negative seconds": lambda e: {**e, "seconds": -1},
    "another key": lambda e: {**e, "key": "0" * 24},
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_an_edited_or_misshapen_entry_is_attacked_again_with_one_warning(edit, tmp_path, truth):
    cache = Cache(tmp_path)
    first, _ = run(cache)
    path = only_entry(cache)
    path.write_text(json.dumps(EDITS[edit](json.loads(path.read_text()))))
    again, warned = run(cache)
    assert not again.get("cached")
    assert again["robust_correct"] == truth["robust_correct"] == first["robust_correct"]
    assert len(warned) == 1 and str(path) in warned[0]
    reused, warned = run(cache)  # the recomputed entry is sound again
    assert reused.get("cached") and not warned and reused["robust_correct"] == truth["robust_correct"]


def test_a_consistent_forgery_with_its_digest_recomputed_is_not_caught_by_the_cache(tmp_path):
    """What the cache cannot prove: an entry rewritten with a fresh digest is served (verify --recheck catches it)."""
    cache = Cache(tmp_path)
    run(cache)
    path = only_entry(cache)
    entry = json.loads(path.read_text())
    entry["robust_correct"] = list(entry["clean_correct"])
    for component in entry["components"]:  # its breaks made to add up to the forged outcomes
        component["newly_broken"] = 0
    entry["digest"] = outcome_digest(entry, entry["key"])
    path.write_text(json.dumps(entry))
    forged, warned = run(cache)
    assert forged.get("cached") and all(forged["robust_correct"]) and not warned


def test_a_forgery_whose_components_do_not_add_up_is_attacked_again(tmp_path, truth):
    cache = Cache(tmp_path)
    run(cache)
    path = only_entry(cache)
    entry = json.loads(path.read_text())
    entry["robust_correct"] = list(entry["clean_correct"])  # the components still count the breaks
    entry["digest"] = outcome_digest(entry, entry["key"])
    path.write_text(json.dumps(entry))
    again, warned = run(cache)
    assert again["robust_correct"] == truth["robust_correct"] and not again.get("cached")
    assert len(warned) == 1 and "components broke" in warned[0]


def test_a_damaged_partial_batch_is_attacked_again(tmp_path, truth):
    cache = Cache(tmp_path)
    run(cache)
    path = only_entry(cache)
    part = path.with_suffix(".partial") / "000001.json"
    part.parent.mkdir()
    entry = json.loads(path.read_text())
    part.write_text(json.dumps({**entry, "robust_correct": [True] * N}))  # a batch of 5 examples cannot hold 12
    path.unlink()
    again, warned = run(cache)
    assert again["robust_correct"] == truth["robust_correct"]
    assert len(warned) == 1 and str(part) in warned[0]


def test_cached_outcomes_carry_their_key_and_digest_but_results_do_not(tmp_path):
    cache = Cache(tmp_path)
    run(cache)
    entry = json.loads(only_entry(cache).read_text())
    assert entry["digest"] == outcome_digest(entry, entry["key"])
    reused, _ = run(cache)
    assert "digest" not in reused and "key" not in reused


# Cache keys and outcomes written by the runner before it took an EvalRequest (evaluate(..., attack=..., eps=...,
# ...)), on tiny_case with key_parts {"test": "golden"}: the same request must find those files, so caches filled
# before stay valid, and give the same outcome example by example.
GOLDEN = {
    "apgd": ({"attack": "apgd", "attack_options": {"n_iter": 3, "n_target_classes": 1}}, "5628ef47430abac83f9f0e6d",
             "100101110111"),
    "adaptive square": ({"attack": "adaptive", "attack_options": {"components": ["square"], "n_queries": 20},
                         "seed": 3}, "f368f8410ffb19de87ffe259", "101111111111"),
    "batch seeds": ({"attack": "apgd", "attack_options": {"n_iter": 3, "n_target_classes": 1},
                     "per_example_seeds": False}, "a324929255a50cd37ebfdcaf", "100101110111"),
}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_a_cache_written_before_the_request_object_is_still_hit(name, tmp_path):
    fields, key, robust = GOLDEN[name]
    model, images, labels = tiny_case()
    record = RunRecord(**{"eps": 0.05, "norm": "Linf", "seed": 0, "batch_size": 5, **fields})
    request = EvalRequest(record, Cache(tmp_path), key_parts={"test": "golden"}, label="golden", progress=False)
    ev = evaluate(model, images, labels, request)
    assert [p.stem for p in (tmp_path / "bench").glob("*.json")] == [key]
    assert "".join("1" if r else "0" for r in ev["robust_correct"]) == robust
    assert evaluate(model, images, labels, request).get("cached") is True


def test_evaluate_returns_a_typed_outcome_that_reads_as_its_mapping_too(tmp_path):
    from mixzoo.attacks.result import Outcome

    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 5))
    images, labels = torch.rand(5, 1, 2, 2), torch.tensor([0, 1, 2, 3, 4])
    request = EvalRequest(RunRecord(attack="apgd", attack_options={"n_iter": 2}, eps=0.1, norm="Linf", batch_size=5),
                          Cache(tmp_path), progress=False)
    ev = evaluate(model, images, labels, request)
    assert isinstance(ev, Outcome) and ev.n == 5 and not ev.cached and ev.adversarial is None
    assert ev["robust_correct"] == ev.robust_correct and "adversarial" not in ev and ev.get("device") == "cpu"
    again = evaluate(model, images, labels, request)
    assert again.cached and again.robust_correct == ev.robust_correct and again.clean_correct == ev.clean_correct
