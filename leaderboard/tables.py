"""A `harness.ranking.Ranking` as the leaderboard's tables (every number comes from it)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from numbers import Integral, Real
from typing import TYPE_CHECKING, Any

import pandas as pd

from harness.core import Status
from harness.ranking import Ranking, group_table, overall_table
from harness.ranking.records import SeedStats
from harness.ranking.table import EMPTY, values
from leaderboard.data import RunInfo

if TYPE_CHECKING:
    from pandas.io.formats.style import Styler

MARKS = {"better": "▲ better", "worse": "▼ worse", "n.s.": "n.s.", "baseline": "baseline"}
STATUS_COLUMNS = ["family", Status.DIVERGED.value, "failed", "excluded", "n"]
"""Each row's family, its seeds that diverged, its seeds that lose without a value (diverged or
done without the metric: the ranking's `n_failed`, "seeds failed"), its seeds left out as
infrastructure failures (crashed or timed out: `n_excluded`, never a loss), and its ranked seeds."""


def rows_frame(ranking: Ranking, families: Mapping[str, tuple[str, ...]]) -> pd.DataFrame:
    """The group table of `harness.ranking` (its cell values, verdicts marked), one row per
    (task, model, method) in rank order, with each method's family and its seeds' failures."""
    table = group_table(ranking)
    verdict = table.index("verdict")
    records = []
    cells = [(s.keys["task"], s.keys["model"], row) for s in table.sections for row in s.rows]
    for (task, model, row_cells), row in zip(cells, ranking.rows, strict=True):
        values = [cell.value for cell in row_cells]
        values[verdict] = MARKS.get(values[verdict] or "", "")
        diverged = sum(trial["status"] == Status.DIVERGED for trial in row.trials)
        family = family_label(families, row.method)
        seeds = row.seeds
        records.append(
            [task, model, *values, family, diverged, seeds.n_failed, seeds.n_excluded, seeds.n]
        )
    return pd.DataFrame.from_records(
        records, columns=["task", "model", *table.header, *STATUS_COLUMNS]
    )


def summary_frame(ranking: Ranking, families: Mapping[str, tuple[str, ...]]) -> pd.DataFrame:
    """The overall table of `harness.ranking` (its cell values), with each method's family."""
    table = overall_table(ranking)
    rows = values(table, table.keys)
    method = table.index("method")
    frame = pd.DataFrame.from_records(rows, columns=table.header)
    frame.insert(method + 1, "family", [family_label(families, row[method]) for row in rows])
    return frame


def family_label(families: Mapping[str, tuple[str, ...]], method: str) -> str:
    return " + ".join(families.get(method, ()))


def all_failed(ranking: Ranking) -> bool:
    """No method has a value of the metric in any group."""
    return all(row.seeds.n_done == 0 for row in ranking.rows)


def ranked_statuses(ranking: Ranking) -> Counter[str]:
    """Statuses of the ranked trials (one per seed after sweep tuning)."""
    return Counter(trial["status"] for row in ranking.rows for trial in row.trials)


HISTORY_COLUMNS = ["run", "run_id", "task", "model", "method", "mean", "ci_low", "ci_high"]
ALERT_KINDS = ("regression", "status")  # what "regressions only" keeps


def history_frame(rankings: Iterable[tuple[RunInfo, Ranking]]) -> pd.DataFrame:
    """Each method's mean and CI per (task, model) in each suite run, oldest run first."""
    records = [
        [run.label, run.id, row.task, row.model, row.method, *_mean_ci(row.seeds)]
        for run, ranking in rankings
        for row in ranking.rows
    ]
    frame = pd.DataFrame.from_records(records, columns=HISTORY_COLUMNS)
    frame = frame.astype({"mean": float, "ci_low": float, "ci_high": float})
    return frame.sort_values("run_id", kind="stable")


def _mean_ci(seeds: SeedStats) -> tuple[float | None, float | None, float | None]:
    return seeds.mean, seeds.ci_low, seeds.ci_high


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


def shown(value: Any) -> str:
    """A cell as the board shows it by default: integers whole, other numbers to 4 digits, the
    stand-in of an empty number (`board_values`) as EMPTY."""
    if isinstance(value, bool) or not isinstance(value, Real):
        return str(value)
    if math.isinf(value):
        return EMPTY
    if isinstance(value, Integral) or float(value).is_integer():
        return str(int(value))
    return format(float(value), ".4g")


def spec_format(spec: str) -> Callable[[Any], str]:
    """A cell formatter by a format spec (".3f") for finite numbers, `shown` for the rest."""
    return lambda x: format(x, spec) if isinstance(x, Real) and math.isfinite(x) else shown(x)


def board_values(frame: pd.DataFrame) -> pd.DataFrame:
    """What st.dataframe is given. It shows any null as "None" (a Styler's text is not used for
    nulls), so an empty number becomes +inf, shown as EMPTY and sorted last, and an empty text
    becomes EMPTY."""
    out = frame.copy()
    for column in out.columns:
        values = out[column]
        if not values.isna().any():
            continue
        present = values.dropna()
        numeric = pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values)
        if numeric or (
            len(present) and all(isinstance(v, Real) and not isinstance(v, bool) for v in present)
        ):
            out[column] = values.astype(float).fillna(math.inf)
        else:
            out[column] = values.astype(object).where(values.notna(), EMPTY)
    return out


def dashed(frame: pd.DataFrame, formats: Mapping[str, str] | None = None) -> Styler:
    """The frame as the board shows it: an empty value as EMPTY, the en dash of the terminal and
    markdown (`board_values`), numbers by `formats` (format specs by column) or `shown`."""
    styler = board_values(frame).style.format(shown)
    specs = {column: spec for column, spec in (formats or {}).items() if column in frame}
    if specs:
        formatters = {column: spec_format(spec) for column, spec in specs.items()}
        styler = styler.format(formatters, subset=list(specs))  # the others keep `shown`
    return styler
