"""The leaderboard's database reads: SELECTs only, on an engine that refuses writes.

SQLite connections run with `PRAGMA query_only`, PostgreSQL sessions with
`default_transaction_read_only` (`harness.store.db.make_engine(read_only=True)`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd
from sqlalchemy import Engine, Select, func, inspect, select
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from harness.ranking import TrialOutcome
from harness.spec.declaration import RankingDeclaration
from harness.store.db import DatabaseError, make_engine
from harness.store.models import Alert, LayerStatistic, MetricPoint, Result, SuiteRun, Trial
from harness.store.queries import CHUNK, stored_outcomes
from harness.store.url import database_url
from harness.tasks.trivial import TRIVIAL_SUFFIX
from harness.utils import chunks


@dataclass(frozen=True)
class RunInfo:
    """One stored suite run (an invocation of `layerbench run` or a nightly)."""

    id: int
    cadence: str
    started_at: datetime
    git_commit: str | None
    n_ran: int
    ranking: RankingDeclaration | None = None  # the suite's baseline and `rank` section
    kind: str = "run"  # or "nightly"

    @property
    def label(self) -> str:
        commit = f" @ {self.git_commit[:8]}" if self.git_commit else ""
        started = f"{self.started_at:%Y-%m-%d %H:%M}"
        what = "nightly" if self.kind == "nightly" else self.cadence
        return f"#{self.id} {what} {started}{commit}, {self.n_ran} trials run"


@dataclass(frozen=True)
class TrialDetail:
    """Everything stored about one trial, for the Trial page."""

    trial: Trial
    results: dict[str, float | None]


def read_only_engine(url: str | None = None) -> Engine:
    """An engine on the results database that cannot write; a missing SQLite file is an error."""
    url = database_url(url)
    parsed = make_url(url)
    path = parsed.database if parsed.get_backend_name() == "sqlite" else None
    if path not in (None, "", ":memory:") and not Path(path).is_file():
        raise DatabaseError(f"no such file: {path}")
    return make_engine(url, read_only=True)


def has_trials_table(engine: Engine) -> bool:
    return inspect(engine).has_table(Trial.__tablename__)


def suites(engine: Engine) -> list[str]:
    with Session(engine) as session:
        return list(session.scalars(select(Trial.suite).distinct().order_by(Trial.suite)))


def version(engine: Engine, suite: str) -> tuple[Any, ...]:
    """Changes whenever the suite's stored trials change (a cache key)."""
    query = select(func.count(), func.max(Trial.ended_at), func.max(Trial.suite_run_id))
    with Session(engine) as session:
        return tuple(session.execute(query.where(Trial.suite == suite)).one())


def suite_runs(engine: Engine, suite: str) -> list[RunInfo]:
    """The suite's runs, oldest first."""
    query = select(SuiteRun).where(SuiteRun.suite == suite).order_by(SuiteRun.id)
    with Session(engine) as session:
        return [
            RunInfo(
                id=run.id,
                cadence=run.cadence,
                started_at=run.started_at,
                git_commit=run.git_commit,
                n_ran=run.n_ran,
                ranking=RankingDeclaration.read(run.ranking),
                kind=run.kind,
            )
            for run in session.scalars(query)
        ]


PARETO_AXES = ("effective_bits", "model_bytes", "layers_removed")
"""Final metrics of a compressed model that the Pareto plots put against the ranked metric."""

ALERT_COLUMNS = [
    Alert.id,
    Alert.suite_run_id,
    Alert.method,
    Alert.model,
    Alert.task,
    Alert.metric,
    Alert.kind,
    Alert.direction,
    Alert.old_mean,
    Alert.new_mean,
    Alert.delta,
    Alert.percent,
    Alert.p_value,
    Alert.z,
    Alert.acknowledged,
]


def alerts(engine: Engine, suite: str) -> pd.DataFrame:
    """The suite's nightly alerts, oldest first (`layerbench alerts` acknowledges them)."""
    query = select(*ALERT_COLUMNS).where(Alert.suite == suite).order_by(Alert.id)
    return _frame(engine, [query], [c.key for c in ALERT_COLUMNS])


def outcomes(engine: Engine, suite: str) -> list[TrialOutcome]:
    """Every finished trial of the suite, with its final metrics."""
    with Session(engine) as session:
        keys = session.scalars(select(Trial.key).where(Trial.suite == suite).order_by(Trial.id))
        keys = list(keys)
    return stored_outcomes(engine, keys, suite=suite)


def run_of_trials(engine: Engine, suite: str) -> dict[str, int | None]:
    """The suite run that last ran each trial, by trial key."""
    query = select(Trial.key, Trial.suite_run_id).where(Trial.suite == suite)
    with Session(engine) as session:
        return {row.key: row.suite_run_id for row in session.execute(query)}


def method_configs(engine: Engine, suite: str) -> dict[str, dict[str, Any]]:
    """The resolved config of each method's first stored trial, in the order first stored."""
    first = select(func.min(Trial.id)).where(Trial.suite == suite).group_by(Trial.method).subquery()
    query = select(Trial.method, Trial.config).where(Trial.id.in_(select(first))).order_by(Trial.id)
    with Session(engine) as session:
        return {row.method: row.config for row in session.execute(query)}


def metric_names(engine: Engine, suite: str) -> list[str]:
    """Names of the final metrics stored for the suite (not the trivial predictor's levels a
    trial reports beside them)."""
    query = (
        select(Result.name)
        .join(Trial, Trial.id == Result.trial_id)
        .where(Trial.suite == suite)
        .distinct()
        .order_by(Result.name)
    )
    with Session(engine) as session:
        return [name for name in session.scalars(query) if not name.endswith(TRIVIAL_SUFFIX)]


def trials(engine: Engine, suite: str) -> pd.DataFrame:
    """One row per stored trial of the suite: identity, sweep point, status, MLflow run."""
    columns = [
        Trial.key,
        Trial.method,
        Trial.model,
        Trial.task,
        Trial.seed,
        Trial.sweep,
        Trial.status,
        Trial.suite_run_id,
        Trial.mlflow_run_id,
    ]
    query = select(*columns).where(Trial.suite == suite).order_by(Trial.id)
    return _frame(engine, [query], [c.key for c in columns])


def trial_environments(engine: Engine, suite: str) -> list[dict[str, Any]]:
    """The environment each stored trial of the suite recorded (none for those without)."""
    query = select(Trial.environment).where(Trial.suite == suite, Trial.environment.is_not(None))
    with Session(engine) as session:
        return [dict(environment) for environment in session.scalars(query)]


def trial_configs(engine: Engine, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The resolved config of each trial, by key."""
    queries = [
        select(Trial.key, Trial.config).where(Trial.key.in_(chunk)) for chunk in chunks(keys, CHUNK)
    ]
    with Session(engine) as session:
        return {row.key: row.config for query in queries for row in session.execute(query)}


def trial_detail(engine: Engine, key: str) -> TrialDetail | None:
    with Session(engine) as session:
        trial = session.scalars(select(Trial).where(Trial.key == key)).one_or_none()
        if trial is None:
            return None
        results = session.execute(
            select(Result.name, Result.value).where(Result.trial_id == trial.id)
        )
        detail = TrialDetail(trial, {row.name: row.value for row in results})
        session.expunge(trial)
    return detail


def series(engine: Engine, keys: Iterable[str], name: str) -> pd.DataFrame:
    """The metric `name` at each evaluation of the trials: key, step, train_time_s, value."""
    columns = [Trial.key, MetricPoint.step, MetricPoint.train_time_s, MetricPoint.value]
    queries = [
        select(*columns)
        .join(Trial, Trial.id == MetricPoint.trial_id)
        .where(Trial.key.in_(chunk), MetricPoint.name == name)
        for chunk in chunks(keys, CHUNK)
    ]
    return _frame(engine, queries, ["key", "step", "train_time_s", "value"])


def series_names(engine: Engine, keys: Iterable[str]) -> list[str]:
    names: set[str] = set()
    with Session(engine) as session:
        for chunk in chunks(keys, CHUNK):
            query = (
                select(MetricPoint.name)
                .join(Trial, Trial.id == MetricPoint.trial_id)
                .where(Trial.key.in_(chunk))
                .distinct()
            )
            names.update(session.scalars(query))
    return sorted(names)


def layer_stats(engine: Engine, keys: Iterable[str]) -> pd.DataFrame:
    """The layer statistics of the trials: key, step, layer, name, value (maybe no rows)."""
    columns = [
        Trial.key,
        LayerStatistic.step,
        LayerStatistic.layer,
        LayerStatistic.name,
        LayerStatistic.value,
    ]
    queries = [
        select(*columns)
        .join(Trial, Trial.id == LayerStatistic.trial_id)
        .where(Trial.key.in_(chunk))
        for chunk in chunks(keys, CHUNK)
    ]
    return _frame(engine, queries, ["key", "step", "layer", "name", "value"])


def trial_devices(engine: Engine, keys: Iterable[str]) -> dict[str, str | None]:
    """The device each trial ran on (its stored environment's `device_name`), by key."""
    queries = [
        select(Trial.key, Trial.environment).where(Trial.key.in_(chunk))
        for chunk in chunks(keys, CHUNK)
    ]
    with Session(engine) as session:
        rows = [tuple(row) for query in queries for row in session.execute(query)]
    return {key: (environment or {}).get("device_name") for key, environment in rows}


def final_values(engine: Engine, keys: Iterable[str], names: Iterable[str]) -> pd.DataFrame:
    """Final metrics `names` of the trials: key, name, value."""
    names = list(names)
    queries = [
        select(Trial.key, Result.name, Result.value)
        .join(Trial, Trial.id == Result.trial_id)
        .where(Trial.key.in_(chunk), Result.name.in_(names))
        for chunk in chunks(keys, CHUNK)
    ]
    return _frame(engine, queries, ["key", "name", "value"])


def _frame(engine: Engine, queries: list[Select[Any]], columns: list[str]) -> pd.DataFrame:
    with Session(engine) as session:
        rows = [tuple(row) for query in queries for row in session.execute(query)]
    return pd.DataFrame(rows, columns=columns)
