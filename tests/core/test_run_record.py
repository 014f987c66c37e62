"""The run record (mixzoo.core.record) and the cache entries bound to it: an entry that is not this request's
(edited, of the wrong shape or type, from an older format) is a miss, recomputed with one warning naming it."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from eval_requests import ask

from mixzoo.attacks.runner import evaluate
from mixzoo.core.cache import Cache, CacheWarning, batched_cached
from mixzoo.core.errors import InputError
from mixzoo.core.record import RunRecord
from mixzoo.core.settings import RunSettings

N = 20
OPTIONS = {"n_iter": 4, "n_target_classes": 2}


def test_the_record_is_hashable_its_digest_stable_and_its_differences_named():
    a = RunRecord.from_settings(RunSettings(eps=0.2, norm="Linf", attack="adaptive-apgd",
                                            attack_options={"n_iter": 5, "a": 1}))
    b = RunRecord.from_settings(RunSettings(eps=0.2, norm="Linf", attack="adaptive-apgd",
                                            attack_options={"a": 1, "n_iter": 5}))
    assert a == b and hash(a) == hash(b) and a.digest() == b.digest() and len(a.digest()) == 64
    c = a.replace(eps=0.05, seed=3)
    assert c.digest() != a.digest() and a.eps == 0.2  # frozen: replace makes a copy
    assert [d[0] for d in a.differences(c)] == ["eps", "seed"]
    assert a.differences(c)[0] == ("eps", 0.2, 0.05)
    assert a.replace(attack_options={"n_iter": 6}).options() == {"n_iter": 6}
    with pytest.raises(InputError, match="unknown run record field 'epsilon'"):
        a.replace(epsilon=1)
    assert RunRecord(**{**a.to_dict(), "attack_options": a.attack_options}) == a


def test_the_record_holds_what_decides_the_extra_attacks():
    """The budget and the -O counts (which set every component's counts) are fields of the record, in its digest;
    the counts, like the options, are kept as canonical JSON and given back as a dict."""
    s = RunSettings(eps=0.2, norm="Linf", attack="apgd", budget="quick")
    a = RunRecord.from_settings(s, count_overrides={"n_iter": 3, "n_restarts": 2})
    b = RunRecord.from_settings(s, count_overrides={"n_restarts": 2, "n_iter": 3})
    assert a == b and a.budget == "quick" and a.counts() == {"n_iter": 3, "n_restarts": 2}
    assert a.to_dict()["count_overrides"] == {"n_iter": 3, "n_restarts": 2} and a.to_dict()["budget"] == "quick"
    assert RunRecord(**a.to_dict()) == a
    assert [d[0] for d in a.differences(a.replace(budget="strong", count_overrides={}))] == ["budget",
                                                                                           "count_overrides"]
    assert RunRecord.from_settings(s.changed(budget="standard")).digest() != RunRecord.from_settings(s).digest()


@pytest.fixture(scope="module")
def digits(one_thread):
    from mixzoo.zoo.data import load_dataset
    from mixzoo.zoo.models import load_model

    d = load_dataset("digits", "evaluation", n=N)
    return load_model("digits-pgd"), d.images, d.labels


def run(digits, cache, n=N):
    model, x, y = digits
    return evaluate(model, x[:n], y[:n], ask(attack="adaptive-apgd", attack_options=OPTIONS, eps=0.2, norm="Linf",
                                             seed=0, batch_size=10, cache=cache, key_parts={"model": "digits-pgd"},
                                             label="RBC", progress=False))


def entry(cache) -> tuple:
    (path,) = (cache.root / "bench").glob("*.json")
    return path, json.loads(path.read_text())


def rerun(digits, cache):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ev = run(digits, cache)
    stale = [w for w in caught if issubclass(w.category, CacheWarning)]
    return ev, stale


@pytest.mark.parametrize("edit", ["all_true_wrong_digest", "five_outcomes", "empty", "null", "strings"])
def test_a_cache_entry_that_is_not_the_requests_is_attacked_again_with_one_warning(digits, tmp_path, edit):
    cache = Cache(tmp_path)
    clean = run(digits, cache)
    assert 0 < sum(clean["robust_correct"]) < N  # something robust, something broken: the edits change numbers
    path, data = entry(cache)
    if edit == "all_true_wrong_digest":
        data = {**data, "clean_correct": [True] * N, "robust_correct": [True] * N, "digest": "0" * 64}
    elif edit == "five_outcomes":
        data = {**data, "clean_correct": data["clean_correct"][:5], "robust_correct": data["robust_correct"][:5]}
    elif edit == "empty":
        data = {}
    elif edit == "null":
        data = None
    else:
        data = {**data, "robust_correct": ["yes"] * N}
    path.write_text(json.dumps(data))
    ev, stale = rerun(digits, cache)
    assert not ev.get("cached")
    assert ev["clean_correct"] == clean["clean_correct"] and ev["robust_correct"] == clean["robust_correct"]
    assert len(stale) == 1 and str(path) in str(stale[0].message), [str(w.message) for w in stale]
    again, stale = rerun(digits, cache)  # the recomputed entry replaced it and is used
    assert again.get("cached") and not stale and again["robust_correct"] == clean["robust_correct"]


def test_a_clean_entry_is_used_without_a_warning(digits, tmp_path):
    cache = Cache(tmp_path)
    first = run(digits, cache)
    ev, stale = rerun(digits, cache)
    assert ev.get("cached") and not stale and ev["robust_correct"] == first["robust_correct"]


def test_a_batched_entry_with_other_rows_than_asked_is_recomputed_naming_its_file(tmp_path):
    """An MMAA / logits entry (batched_cached) with 30 rows for 100: a miss, with one warning naming it."""
    cache = Cache(tmp_path)
    calls = []

    def compute(a, b):
        calls.append((a, b))
        return {"logits": torch.arange(a, b, dtype=torch.float32)[:, None].repeat(1, 3)}

    first = batched_cached(cache, "mmaa", "k" * 24, 100, 50, compute, {"what": "test"})
    path = cache.path("mmaa", "k" * 24)
    from mixzoo.core.cache import atomic_save_tensors

    atomic_save_tensors(path, {"logits": first["logits"][:30]}, {"digest": "k" * 24})
    calls.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = batched_cached(cache, "mmaa", "k" * 24, 100, 50, compute, {"what": "test"})
    stale = [w for w in caught if issubclass(w.category, CacheWarning)]
    assert calls == [(0, 50), (50, 100)] and torch.equal(out["logits"], first["logits"])
    assert len(stale) == 1 and str(path) in str(stale[0].message) and "30 rows where 100" in str(stale[0].message)
    # a well-shaped entry without this key as its digest (an older format, or another request's file): a miss
    atomic_save_tensors(path, {"logits": first["logits"]})
    calls.clear()
    with pytest.warns(CacheWarning, match="digest"):
        batched_cached(cache, "mmaa", "k" * 24, 100, 50, compute, {"what": "test"})
    assert calls
