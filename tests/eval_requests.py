"""Tests' shorthand for an :class:`~mixzoo.core.request.EvalRequest`: run record fields and request fields as one set
of keyword arguments (``ask(attack="apgd", eps=0.1, ..., cache=cache, label="x")``)."""

from __future__ import annotations

import dataclasses
from typing import Any

from mixzoo.core.record import RunRecord
from mixzoo.core.request import EvalRequest

RECORD_FIELDS = {f.name for f in dataclasses.fields(RunRecord)}


def ask(**fields: Any) -> EvalRequest:
    """The request with these run record fields (``attack_options`` as a dict) and request fields."""
    record = RunRecord(**{k: v for k, v in fields.items() if k in RECORD_FIELDS})
    return EvalRequest(record, **{k: v for k, v in fields.items() if k not in RECORD_FIELDS})
