"""A `harness.ranking.Ranking` as the leaderboard's tables (every number comes from it)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

import pandas as pd

from harness.ranking import Ranking, RankRow, TrialOutcome
from leaderboard.data import RunInfo

MARKS = {"better": "▲ better", "worse": "▼ worse", "tie": "= tie", "baseline": "baseline"}
FAILED_STATUSES = ("failed", "timeout")

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


HISTORY_COLUMNS = ["run", "run_id", "task", "model", "method", "mean", "ci_low", "ci_high"]
ALERT_KINDS = ("regression", "status")  # what "regressions only" keeps


def history_frame(rankings: Iterable[tuple[RunInfo, Ranking]]) -> pd.DataFrame:
    """Each method's mean and CI per (task, model) in each suite run, oldest run first."""
    records = [
        [run.label, run.id, row.task, row.model, row.method, row.mean, row.ci_low, row.ci_high]
        for run, ranking in rankings
        for row in ranking.rows
    ]
    frame = pd.DataFrame.from_records(records, columns=HISTORY_COLUMNS)
    frame = frame.astype({"mean": float, "ci_low": float, "ci_high": float})
    return frame.sort_values("run_id", kind="stable")


def alerts_on_history(history: pd.DataFrame, alerts: pd.DataFrame, metric: str) -> pd.DataFrame:
    """The alerts of the metric (and status alerts) placed on the curve: with the run's label and
    the method's mean in that run, as the History page marks them."""
    shown = alerts[alerts["metric"].isin([metric, "status"])]
    points = history[["run", "run_id", "task", "model", "method", "mean"]]
    return shown.merge(
        points,
        left_on=["suite_run_id", "task", "model", "method"],
        right_on=["run_id", "task", "model", "method"],
    ).drop(columns=["run_id"])
