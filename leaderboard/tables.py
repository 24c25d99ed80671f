"""A `harness.ranking.Ranking` as the leaderboard's tables (every number comes from it)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

import pandas as pd

from harness.ranking import Ranking, RankRow, TrialOutcome
from harness.records import FAILED_STATUSES
from leaderboard.data import RunInfo

MARKS = {"better": "▲ better", "worse": "▼ worse", "tie": "= tie", "baseline": "baseline"}

ROW_COLUMNS = [
    "task",
    "model",
    "rank",
    "method",
    "family",
    "mean",
    "± 95% CI",
    "Δ vs baseline",
    "p (Holm)",
    "verdict",
    "win rate",
    "seeds failed",
    "diverged",
    "failed",
    "n",
]
SUMMARY_COLUMNS = ["position", "method", "family", "mean win rate", "mean rank", "trials", "failed"]

Cell = tuple[str, str, str]  # (task, model, method)


def status_counts(tuned: Iterable[TrialOutcome]) -> dict[Cell, Counter[str]]:
    """Statuses of the ranked trials (one per seed after sweep tuning) by (task, model, method)."""
    counts: dict[Cell, Counter[str]] = {}
    for outcome in tuned:
        counts.setdefault((outcome.task, outcome.model, outcome.method), Counter())[
            outcome.status
        ] += 1
    return counts


def rows_frame(
    ranking: Ranking,
    families: Mapping[str, tuple[str, ...]],
    counts: Mapping[Cell, Counter[str]],
) -> pd.DataFrame:
    """One row per (task, model, method), in rank order within each group."""
    records = [_row_record(row, families, counts) for row in ranking.rows]
    return pd.DataFrame.from_records(records, columns=ROW_COLUMNS)


def _row_record(
    row: RankRow, families: Mapping[str, tuple[str, ...]], counts: Mapping[Cell, Counter[str]]
) -> list[object]:
    statuses = counts.get((row.task, row.model, row.method), Counter())
    return [
        row.task,
        row.model,
        row.rank,
        row.method,
        family_label(families, row.method),
        row.mean,
        half_width(row),
        row.delta,
        row.p_value,
        MARKS.get(row.verdict or "", ""),
        row.win_rate,
        row.n_failed,
        statuses["diverged"],
        sum(statuses[status] for status in FAILED_STATUSES),
        row.n,
    ]


def half_width(row: RankRow) -> float | None:
    """Half the width of the 95% CI (the `±` of `mean ± CI`)."""
    if row.ci_low is None or row.ci_high is None:
        return None
    return (row.ci_high - row.ci_low) / 2


def summary_frame(ranking: Ranking, families: Mapping[str, tuple[str, ...]]) -> pd.DataFrame:
    """The methods' standing over all selected groups, best first."""
    records = [
        [
            position,
            summary.method,
            family_label(families, summary.method),
            summary.mean_win_rate,
            summary.mean_rank,
            summary.n_trials,
            summary.n_failed,
        ]
        for position, summary in enumerate(ranking.summary, start=1)
    ]
    return pd.DataFrame.from_records(records, columns=SUMMARY_COLUMNS)


def family_label(families: Mapping[str, tuple[str, ...]], method: str) -> str:
    return " + ".join(families.get(method, ()))


def all_failed(ranking: Ranking) -> bool:
    """No method has a value of the metric in any group."""
    return all(row.mean is None for row in ranking.rows)


HISTORY_COLUMNS = ["run", "run_id", "task", "model", "method", "mean"]
HISTORY_KEYS = ["task", "model", "method"]


def history_frame(rankings: Iterable[tuple[RunInfo, Ranking]]) -> pd.DataFrame:
    """Each method's mean per (task, model) in each suite run, oldest run first."""
    records = [
        [run.label, run.id, row.task, row.model, row.method, row.mean]
        for run, ranking in rankings
        for row in ranking.rows
    ]
    frame = pd.DataFrame.from_records(records, columns=HISTORY_COLUMNS)
    return frame.astype({"mean": float}).sort_values("run_id", kind="stable")


def flag_regressions(history: pd.DataFrame, direction: str, tolerance: float) -> pd.DataFrame:
    """`history` with the change since the method's previous run, and whether it regressed.

    A regression is a change in the worse direction of the metric by more than `tolerance`.
    """
    previous = history.groupby(HISTORY_KEYS)["mean"].shift()
    change = history["mean"] - previous
    worse = change > tolerance if direction == "min" else change < -tolerance
    return history.assign(previous=previous, change=change, regression=worse)
