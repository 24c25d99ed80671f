"""A `harness.ranking.Ranking` as the leaderboard's tables (every number comes from it)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

import pandas as pd

from harness.ranking import Ranking, group_table, overall_table
from harness.ranking.table import values
from leaderboard.data import RunInfo

MARKS = {"better": "▲ better", "worse": "▼ worse", "tie": "= tie", "baseline": "baseline"}
FAILED_STATUSES = ("failed", "timeout")
STATUS_COLUMNS = ["family", "diverged", "failed", "n"]


def rows_frame(ranking: Ranking, families: Mapping[str, tuple[str, ...]]) -> pd.DataFrame:
    """The group table of `harness.ranking` (its cell values, verdicts marked), one row per
    (task, model, method) in rank order, with each method's family and its seeds' statuses."""
    table = group_table(ranking)
    verdict = table.header.index("verdict")
    records = []
    cells = [(s.keys["task"], s.keys["model"], row) for s in table.sections for row in s.rows]
    for (task, model, row_cells), row in zip(cells, ranking.rows, strict=True):
        values = [cell.value for cell in row_cells]
        values[verdict] = MARKS.get(values[verdict] or "", "")
        statuses = Counter(trial["status"] for trial in row.trials)
        failed = sum(statuses[status] for status in FAILED_STATUSES)
        family = family_label(families, row.method)
        records.append([task, model, *values, family, statuses["diverged"], failed, row.n])
    return pd.DataFrame.from_records(
        records, columns=["task", "model", *table.header, *STATUS_COLUMNS]
    )


def summary_frame(ranking: Ranking, families: Mapping[str, tuple[str, ...]]) -> pd.DataFrame:
    """The overall table of `harness.ranking` (its cell values), with each method's family."""
    table = overall_table(ranking)
    rows = values(table, table.header)
    method = table.header.index("method")
    frame = pd.DataFrame.from_records(rows, columns=table.header)
    frame.insert(method + 1, "family", [family_label(families, row[method]) for row in rows])
    return frame


def family_label(families: Mapping[str, tuple[str, ...]], method: str) -> str:
    return " + ".join(families.get(method, ()))


def all_failed(ranking: Ranking) -> bool:
    """No method has a value of the metric in any group."""
    return all(row.n_done == 0 for row in ranking.rows)


def ranked_statuses(ranking: Ranking) -> Counter[str]:
    """Statuses of the ranked trials (one per seed after sweep tuning)."""
    return Counter(trial["status"] for row in ranking.rows for trial in row.trials)


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
