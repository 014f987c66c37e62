"""The code versions behind a bench report, so a report whose numbers today's code would not reproduce is found.

Every attack class may declare a ``code_version`` (bumped when its behaviour changes: the runner puts it in the
cache key), every mixing method a :attr:`~mixzoo.methods.MixingMethod.code_version`, and the runner has
:data:`~mixzoo.attacks.runner.BENCH_CODE_VERSION`. A report records those of everything it ran
(``settings.code_versions``); :func:`stale_code` compares a report's record with today's.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mixzoo.attacks.runner import BENCH_CODE_VERSION
from mixzoo.core.errors import MixzooError


def code_versions(attacks: Iterable[str], methods: Iterable[str]) -> dict[str, str | None]:
    """``{"bench": ..., "attack/NAME": ..., "method/NAME": ...}``: today's code versions of the runner, of the
    attacks and of the mixing methods named (None: the attack or method declares none)."""
    from mixzoo.core.plugins import lookup

    out: dict[str, str | None] = {"bench": BENCH_CODE_VERSION}
    for name in sorted(set(attacks)):
        out[f"attack/{name}"] = getattr(lookup("attack", name), "code_version", None)
    for name in sorted(set(methods)):
        out[f"method/{name}"] = lookup("method", name).code_version
    return out


def report_code_versions(report: Any) -> dict[str, str | None]:
    """What a bench :class:`~mixzoo.evaluation.bench.Report` ran: its shared attack, the matched baseline's and the
    curve's attacks, each card method's extra attacks, and the methods of its rows."""
    s = report.settings
    attacks = [s["attack"]]
    if s.get("linear_alpha_match"):
        attacks.append(s["linear_alpha_match"]["attack"])
    if report.curve:
        attacks.append(report.curve["attack"])
    cards = report.cards or [report.card]
    if s.get("extra_attacks", True):
        attacks += [e.attack for c in cards for e in c.mixing_method.extra_attacks(c)]
    methods = [m.method for m in report.models if m.method]
    return code_versions(attacks, methods)


def stale_code(report: dict[str, Any]) -> list[str]:
    """Why today's code would not reproduce a report (its ``report.json`` as a dict): each recorded code version
    that differs from today's, one line each; ``["no code versions recorded"]`` for a report written before they
    were; ``[]`` when every one matches."""
    recorded = (report.get("settings") or {}).get("code_versions")
    if not isinstance(recorded, dict) or not recorded:
        return ["no code versions recorded"]
    out = []
    for key, version in sorted(recorded.items()):
        kind, _, name = key.partition("/")
        try:
            now = code_versions([name], []) if kind == "attack" else code_versions([], [name]) if kind == "method" \
                else code_versions([], [])
        except MixzooError:
            out.append(f"{key}: no longer installed")
            continue
        if key in now and now[key] != version:
            out.append(f"{key}: {version} in the report, {now[key]} today")
    return out


__all__ = ["code_versions", "report_code_versions", "stale_code"]
