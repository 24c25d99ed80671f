"""When each claim of a suite was registered: its `registered:` field, else the first commit of
the suite file's git history whose version states it (same method, compared method, direction
and metric). A claim registered after trials it uses were stored is exploratory
(`harness.claims.exploratory`): its seeds were seen before it was stated.

Reading the history needs `git` and the file inside a work tree; without them (or for a claim no
commit states yet) the registration is unknown and the claim is not marked.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import yaml

from harness.spec.rank import Claim

ClaimIdentity = tuple[str, str | None, str, str | None]
"""(method, compared method, direction, metric): what makes two versions of a claim the same."""


def identity(claim: Claim | dict[str, Any], baseline: str | None) -> ClaimIdentity:
    """The claim's identity, its compared method defaulting to the suite's `baseline`."""
    data = claim.model_dump() if isinstance(claim, Claim) else claim
    return (
        str(data.get("method")),
        data.get("than") or baseline,
        str(data.get("direction")),
        data.get("metric"),
    )


def as_utc(when: datetime | date) -> datetime:
    """A registration time in UTC (a date: its start; a naive time: already UTC)."""
    if not isinstance(when, datetime):
        return datetime(when.year, when.month, when.day, tzinfo=UTC)
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def registrations(
    path: Path, claims: Sequence[Claim], baseline: str | None
) -> tuple[datetime | None, ...]:
    """Per claim, when it was registered (module doc); None where unknown."""
    found = [as_utc(c.registered) if c.registered is not None else None for c in claims]
    if all(when is not None for when in found):
        return tuple(found)
    first = _first_commits(path)
    return tuple(
        when if when is not None else first.get(identity(claim, baseline))
        for claim, when in zip(claims, found, strict=True)
    )


def _git(path: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], cwd=path.parent, capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def _first_commits(path: Path) -> dict[ClaimIdentity, datetime]:
    """Each claim identity -> the commit time of the oldest commit of `path` that states it."""
    path = path.resolve()
    log = _git(path, "log", "--reverse", "--format=%H %cI", "--", path.name)
    if not log:
        return {}
    first: dict[ClaimIdentity, datetime] = {}
    for line in log.splitlines():
        commit, when = line.split()
        text = _git(path, "show", f"{commit}:./{path.name}")
        try:
            data = yaml.safe_load(text or "") or {}
        except yaml.YAMLError:
            continue
        if not isinstance(data, dict):
            continue
        for claim in data.get("expect") or []:
            if isinstance(claim, dict):
                key = identity(claim, data.get("baseline"))
                first.setdefault(key, datetime.fromisoformat(when).astimezone(UTC))
    return first
