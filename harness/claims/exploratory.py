"""Exploratory claims: a claim registered (`harness.spec.history`) after trials it uses were
stored was stated with some of its seeds already seen, so its verdict is not a confirmatory
test; it is marked and counted apart (issue 42)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from harness.core import TrialOutcome
from harness.spec.rank import Claim


def exploratory_note(
    claim: Claim,
    than: str | None,
    registered: datetime | None,
    outcomes: Sequence[TrialOutcome],
    ended: Mapping[str, datetime],
) -> str:
    """ "registered 2026-12-02 06:38 UTC, after 10 of the 23 trials it uses were stored", or ""
    when the claim was registered before every trial it uses ended (or its time is unknown)."""
    if registered is None:
        return ""
    used = [
        o
        for o in outcomes
        if o.method in (claim.method, than) and (claim.recipes is None or o.model in claim.recipes)
    ]
    before = [o for o in used if o.key in ended and _utc(ended[o.key]) < registered]
    if not before:
        return ""
    return (
        f"registered {registered:%Y-%m-%d %H:%M} UTC, after {len(before)} of the {len(used)} "
        "trials it uses were stored"
    )


def _utc(when: datetime) -> datetime:
    """A stored time (naive: UTC, `harness.store.db.now`) in UTC."""
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when
