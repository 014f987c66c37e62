"""Hand edits of a bench report.json made self-consistent, as a forger who knows the format makes them: each row's
figures recomputed from its outcomes, the settings' copies of the run record put into the record, the record's card
digest and its own digest recomputed. A test that checks what ``mixzoo verify`` proves beyond the file (the saved
points, the images, a re-run attack) edits a report and then calls :func:`reseal`; a test of the file's own
consistency edits it and does not."""

from __future__ import annotations

from typing import Any

from mixzoo.core.record import sha256_of
from mixzoo.core.schema import SETTINGS_FROM_RECORD


def reseal(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` (parsed report.json) with every copy made to agree with what was edited: rows from their outcomes
    (the first component's ``newly_broken`` takes up the difference), the record from the settings, the digests
    recomputed."""
    for m in report["models"]:
        n = len(m["robust_outcomes"])
        clean, robust = m["clean_outcomes"].count("1"), m["robust_outcomes"].count("1")
        m["n"], m["clean_accuracy"], m["robust_accuracy"] = n, clean / n, robust / n
        comps = m.get("components") or []
        if comps:
            comps[0]["newly_broken"] = clean - robust - sum(c["newly_broken"] for c in comps[1:])
    record, settings = report["record"], report["settings"]
    for key, field in SETTINGS_FROM_RECORD.items():
        if key in settings:
            record[field] = settings[key]
    component = settings.get("components", {}).get("attack")
    if component:
        component.update(attack=record["attack"], options=record["attack_options"])
    record["dataset"], record["examples"] = report["dataset"]["name"], report["dataset"]["fingerprint"]
    if report.get("cards"):
        record["card"] = sha256_of(report["cards"])
    record["digest"] = sha256_of({k: v for k, v in record.items() if k != "digest"})
    return report
