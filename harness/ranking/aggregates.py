"""The overall ranking statistics (`rank.aggregate`), registered in `harness.registry.AGGREGATES`:
each scores a method's `Standing` over all groups, higher is better, and the summary is sorted
by it (missing scores last, then mean rank).

A new statistic is one function here (or in a plugin) and its registration:

    @AGGREGATES.register("worst_rank", label="worst rank", summary="the worst rank in any group")
    def worst_rank(standing: Standing) -> float | None:
        return -max(row.rank for row in standing.rows)

The overall table shows its scores in a column of their own (`AggregateEntry.column` None) and
titles itself by its `label`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.core import Direction
from harness.ranking.records import MethodSummary, Ranking, RankRow
from harness.registry import AGGREGATES


@dataclass(frozen=True)
class Standing:
    """What an overall statistic reads of one method: its summary, its rows (one per (task,
    model) group it ran in) and the ranked metric's direction."""

    summary: MethodSummary
    rows: Sequence[RankRow]
    direction: Direction


def mean_win_rate(standing: Standing) -> float | None:
    """HELM's mean win rate over groups (Liang et al., 2022)."""
    return standing.summary.mean_win_rate


def mean_rank(standing: Standing) -> float | None:
    """The mean over groups of the method's rank (lower is better, so negated)."""
    return -standing.summary.mean_rank


def normalized(standing: Standing) -> float | None:
    """HELM's normalized score: the mean over groups of the method's mean / the baseline's, in
    the metric's better direction."""
    value = standing.summary.normalized
    return None if value is None else standing.direction.gain(value)


def performance_profile(standing: Standing) -> float | None:
    """AlgoPerf's performance profile score of the train time to the target (Dahl et al.,
    2023; `harness.ranking.ranker.profile_scores`)."""
    return standing.summary.profile_time


def scores(name: str, standings: Sequence[Standing]) -> dict[str, float | None]:
    """Each method's score by the overall statistic `name`."""
    score = AGGREGATES.get(name)
    return {standing.summary.method: score(standing) for standing in standings}


def standings(ranking: Ranking) -> list[Standing]:
    """Each summarized method's standing, in the summary's order."""
    rows: dict[str, list[RankRow]] = {}
    for row in ranking.rows:
        rows.setdefault(row.method, []).append(row)
    return [Standing(s, rows.get(s.method, []), ranking.direction) for s in ranking.summary]
