"""One Holm family over every directional claim of a findings page (issue 42): each suite's
verdicts are Holm-adjusted over that suite's directional checks; a page that reports several
suites together makes more comparisons, and a reader may ask which decisions survive Holm over
all of them (`python docs/results/tables.py --findings-verdicts`, its "page Holm" column).
Ties are not in the family (a tie claim's recipes are a Bonferroni family of their own, each at
alpha / recipes on each side, as in its suite)."""

from __future__ import annotations

from collections.abc import Sequence

from harness.stats.paired import holm


def page_holm(raw: Sequence[float | None]) -> list[float | None]:
    """The Holm-adjusted p of each check over every check with a p-value (None: not in the
    family: a tie, or a check not tested)."""
    members = [i for i, p in enumerate(raw) if p is not None]
    adjusted: list[float] = (
        [float(p) for p in holm([float(raw[i] or 0.0) for i in members])] if members else []
    )
    found: list[float | None] = [None] * len(raw)
    for i, p in zip(members, adjusted, strict=True):
        found[i] = float(p)
    return found


def survives(verdict: str, adjusted: float | None, alpha: float) -> str:
    """ "survives", "does not survive" (a decided directional check whose page-adjusted p is
    not below alpha), or "" (undecided, or not in the family)."""
    if adjusted is None or verdict not in ("reproduced", "contradicted"):
        return ""
    return "survives" if adjusted < alpha else "does not survive"
