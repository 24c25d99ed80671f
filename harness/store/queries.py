"""Read-side queries shared by the CLI and the leaderboard."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, Engine, Text, cast, func, select
from sqlalchemy.orm import Session

from harness.core import EvalPoint, Status, TrialOutcome
from harness.records import FINAL_STATUSES
from harness.spec.declaration import RankingDeclaration
from harness.store.models import ExampleOutcome, MetricPoint, Result, SuiteRun, Trial
from harness.utils import chunks

CHUNK = 500
OUTCOME_CHUNK = 5000
"""Keys per query of `stored_outcomes`: few round trips, well under the bound-parameter limits
(SQLite's default 32,766; PostgreSQL's 65,535)."""


def trial_statuses(engine: Engine, keys: Iterable[str]) -> dict[str, Status]:
    """Stored status by trial key (keys never stored are absent)."""
    found: dict[str, Status] = {}
    with Session(engine) as session:
        for chunk in chunks(keys, CHUNK):
            rows = session.execute(select(Trial.key, Trial.status).where(Trial.key.in_(chunk)))
            found.update({row.key: Status(row.status) for row in rows})
    return found


def unlogged_count(engine: Engine, suite: str) -> int:
    """Finished trials of a suite not yet logged to MLflow."""
    with Session(engine) as session:
        count = session.scalar(
            select(func.count()).where(
                Trial.suite == suite,
                Trial.mlflow_run_id.is_(None),
                Trial.status.in_(FINAL_STATUSES),
            )
        )
    return count or 0


def status_counts(engine: Engine) -> list[tuple[str, Status, int]]:
    """(suite, status, number of trials) for every stored suite and status, sorted."""
    with Session(engine) as session:
        rows = session.execute(
            select(Trial.suite, Trial.status, func.count()).group_by(Trial.suite, Trial.status)
        )
        return sorted((suite, Status(status), count) for suite, status, count in rows)


OUTCOME_COLUMNS = (
    Trial.id,
    Trial.method,
    Trial.model,
    Trial.task,
    Trial.seed,
    Trial.status,
    cast(Trial.sweep, Text),  # the JSON text, decoded by `Sweeps`
    Trial.key,
    Trial.wall_time_s,
)
FINAL = {status.value: status for status in FINAL_STATUSES}
"""A final status by its stored value."""


def stored_outcomes(
    engine: Engine, keys: Iterable[str], series_metric: str | None = None
) -> list[TrialOutcome]:
    """Finished trials with their final metrics, as the ranking reads them; with
    `series_metric`, also that metric's series as `EvalPoint`s by step.

    Only the columns ranking needs are read (not configs or environments), as Core rows (no ORM
    objects), in chunks of `OUTCOME_CHUNK` keys, so a leaderboard of 100,000 trials loads
    quickly: rows are fetched all at once and unpacked, and each distinct sweep's JSON text is
    decoded once (`Sweeps`)."""
    records: list[TrialOutcome] = []
    sweeps = Sweeps()
    with engine.connect() as connection:
        for chunk in chunks(keys, OUTCOME_CHUNK):
            # the status is tested here, not in SQL: with both, SQLite may scan the status index
            rows = connection.execute(select(*OUTCOME_COLUMNS).where(Trial.key.in_(chunk)))
            trials = [trial for trial in rows.all() if trial[5] in FINAL]
            ids = [trial[0] for trial in trials]
            metrics: dict[int, dict[str, float]] = defaultdict(dict)
            results = select(Result.trial_id, Result.name, Result.value).where(
                Result.trial_id.in_(ids)
            )
            for trial_id, name, value in connection.execute(results).all():
                if value is not None:
                    metrics[trial_id][name] = value
            series = metric_series(connection, ids, series_metric) if series_metric else {}
            records += [
                TrialOutcome(
                    method=method,
                    model=model,
                    task=task,
                    seed=seed,
                    status=FINAL[status],
                    metrics=metrics[trial_id],
                    sweep=sweeps.decoded(sweep),
                    key=key,
                    series=series.get(trial_id, []),
                    wall_time_s=wall_time_s,
                )
                for trial_id, method, model, task, seed, status, sweep, key, wall_time_s in trials
            ]
    return records


class Sweeps:
    """Sweep points read as JSON text and decoded once per distinct text (a suite has a few
    sweep points over thousands of trials); each outcome gets its own copy of the dict."""

    def __init__(self) -> None:
        self._decoded: dict[str | None, dict[str, Any]] = {}

    def decoded(self, text: str | None) -> dict[str, Any]:
        """The sweep point stored as `text` (None: no sweep)."""
        if text not in self._decoded:
            self._decoded[text] = {} if text is None else json.loads(text)
        return dict(self._decoded[text])


def task_sections(engine: Engine, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Task name -> its section as one of these trials ran it (`config["task"]`); one config
    read per task and chunk of keys."""
    sections: dict[str, dict[str, Any]] = {}
    with engine.connect() as connection:
        for chunk in chunks(keys, OUTCOME_CHUNK):
            firsts = select(func.min(Trial.id)).where(Trial.key.in_(chunk)).group_by(Trial.task)
            rows = connection.execute(select(Trial.task, Trial.config).where(Trial.id.in_(firsts)))
            for task, config in rows:
                if isinstance(config, dict) and isinstance(config.get("task"), dict):
                    sections.setdefault(task, config["task"])
    return sections


def metric_series(
    connection: Connection, trial_ids: list[int], name: str
) -> dict[int, list[EvalPoint]]:
    """(step, train_time_s, value) of metric `name` per trial, in step order."""
    rows = connection.execute(
        select(MetricPoint.trial_id, MetricPoint.step, MetricPoint.train_time_s, MetricPoint.value)
        .where(MetricPoint.trial_id.in_(trial_ids), MetricPoint.name == name)
        .order_by(MetricPoint.trial_id, MetricPoint.step)
    )
    series: dict[int, list[EvalPoint]] = defaultdict(list)
    for trial_id, step, train_time_s, value in rows:
        series[trial_id].append(EvalPoint(step, train_time_s, value))
    return series


def recorded_plan(
    engine: Engine, suite: str
) -> tuple[RankingDeclaration | None, list[str] | None] | None:
    """How the suite's latest run said to rank it (its baseline and `rank` section) and the keys
    of the trials it planned (None for runs older than migration 0005); None without runs."""
    with Session(engine) as session:
        runs = session.scalars(
            select(SuiteRun).where(SuiteRun.suite == suite).order_by(SuiteRun.id.desc())
        )
        latest = None
        for run in runs:
            latest = latest or run
            if run.trial_keys is not None:
                return RankingDeclaration.read(run.ranking), list(run.trial_keys)
        return (RankingDeclaration.read(latest.ranking), None) if latest else None


def suite_keys(engine: Engine, suite: str) -> list[str]:
    """Every stored trial key of the suite, current or superseded, in the order stored."""
    with Session(engine) as session:
        return list(
            session.scalars(select(Trial.key).where(Trial.suite == suite).order_by(Trial.id))
        )


def example_outcomes(
    session: Session, trial_keys: Iterable[str]
) -> dict[str, dict[str, dict[str, float]]]:
    """Per-example outcomes of trials: trial key -> metric -> example id -> value.

    Accuracies are 0/1 per example; a perplexity task's bits per byte are per window, with the
    window's bytes under `harness.tasks.base.weight_name(metric)`. A value stored as NULL (not
    finite) reads as NaN; trials without outcomes are absent. Reads only these four columns.
    """
    outcomes: dict[str, dict[str, dict[str, float]]] = {}
    if session.scalar(select(ExampleOutcome.trial_id).limit(1)) is None:
        return outcomes  # no trial stored any: no need to look the keys up
    for chunk in chunks(trial_keys, OUTCOME_CHUNK):
        rows = session.execute(
            select(
                Trial.key, ExampleOutcome.metric, ExampleOutcome.example_id, ExampleOutcome.value
            )
            .join(Trial, Trial.id == ExampleOutcome.trial_id)
            .where(Trial.key.in_(chunk))
        )
        for key, metric, example_id, value in rows:
            by_metric = outcomes.setdefault(key, {}).setdefault(metric, {})
            by_metric[example_id] = math.nan if value is None else value
    return outcomes
