"""Read-side queries shared by the CLI and the leaderboard."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Collection, Iterable, Iterator
from datetime import datetime
from operator import itemgetter
from typing import Any

from sqlalchemy import (
    ClauseElement,
    ColumnElement,
    Connection,
    Engine,
    Select,
    Text,
    and_,
    cast,
    func,
    select,
)
from sqlalchemy.orm import Session, aliased
from sqlalchemy.sql.compiler import SQLCompiler

from harness.core import EvalPoint, Status, TrialOutcome
from harness.records import FINAL_STATUSES
from harness.spec.declaration import RankingDeclaration
from harness.spec.recipe import stored_recipe
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


def in_progress(engine: Engine) -> list[tuple[str, str, str]]:
    """(suite, trial key, "method/model/task/sSEED") of every running trial."""
    with Session(engine) as session:
        rows = session.execute(
            select(Trial.suite, Trial.key, Trial.method, Trial.model, Trial.task, Trial.seed)
            .where(Trial.status == Status.RUNNING)
            .order_by(Trial.suite, Trial.method, Trial.seed)
        )
        return [(r[0], r[1], f"{r[2]}/{r[3]}/{r[4]}/s{r[5]}") for r in rows]


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
    engine: Engine,
    keys: Iterable[str],
    series_metric: str | None = None,
    suite: str | None = None,
    metrics: Collection[str] | None = None,
) -> list[TrialOutcome]:
    """Finished trials with their final metrics (only those named in `metrics` if given), as
    the ranking reads them; with `series_metric`, also that metric's series as `EvalPoint`s by
    step. `suite`: the suite the keys belong to (a trial key hashes its suite's name), which
    lets many keys be read in one scan of the suite's trials (`_selections`).

    Only the columns ranking needs are read (not configs or environments), as Core rows (no ORM
    objects), so a leaderboard of 100,000 trials loads quickly: rows are fetched all at once and
    unpacked, a few named metrics come as columns of the trials' rows (`_outcome_query`), and
    each distinct sweep's JSON text is decoded once (`Sweeps`). Sorted by key: the same trials
    come in the same order, however and whenever they were stored."""
    wanted = set(keys)
    names = sorted(metrics) if metrics is not None else None
    columns = names if names is not None and len(names) <= METRIC_COLUMNS else None
    trials: list[tuple[Any, ...]] = []
    finals: dict[int, dict[str, float]] = defaultdict(dict)
    series: dict[int, list[EvalPoint]] = {}
    with engine.connect() as connection:
        for selection in _selections(wanted, suite):
            query = _outcome_query(columns or []).where(selection)
            # the status is tested here, not in SQL: with both, SQLite may scan the status index
            rows = driver_rows(connection, query)
            trials += [t for t in rows if t[5] in FINAL and t[7] in wanted]  # status, key
            if columns is None:
                finals |= _final_metrics(connection, selection, names)
            if series_metric:
                series |= metric_series(connection, selection, series_metric)
    trials.sort(key=itemgetter(7))  # by key: the same trials, the same order
    sweeps = Sweeps()
    return [
        TrialOutcome(
            method=method,
            model=model,
            task=task,
            seed=seed,
            status=FINAL[status],
            metrics=finals[trial_id] if columns is None else _stored(columns, named),
            sweep=sweeps.decoded(sweep),
            key=key,
            series=series.get(trial_id, ()),
            wall_time_s=wall_time_s,
        )
        for trial_id, method, model, task, seed, status, sweep, key, wall_time_s, *named in trials
    ]


METRIC_COLUMNS = 16
"""At most this many named final metrics are read as columns of the trials' rows (one outer
join each; SQLite joins at most 64 tables), more in a query of their own."""


def _outcome_query(names: list[str]) -> Select[*tuple[Any, ...]]:
    """The trials' `OUTCOME_COLUMNS` and a column per final metric of `names` (NULL where a
    trial stored none or a non-finite value): one row per trial, without a row per metric to
    fetch and regroup."""
    finals = [aliased(Result) for _ in names]
    query = select(*OUTCOME_COLUMNS, *(final.value for final in finals))
    for name, final in zip(names, finals, strict=True):
        query = query.outerjoin(final, and_(final.trial_id == Trial.id, final.name == name))
    return query


def _stored(names: list[str], values: list[Any]) -> dict[str, float]:
    """The metrics `names` that have a value of `values` (NULL: the trial stored none, or a
    non-finite value)."""
    if None in values:
        return {name: value for name, value in zip(names, values, strict=True) if value is not None}
    return dict(zip(names, values, strict=True))


def _final_metrics(
    connection: Connection, trials: ColumnElement[bool], names: list[str] | None
) -> dict[int, dict[str, float]]:
    """Trial id -> final metric -> value of the trials `trials` (a condition on `Trial`), of the
    metrics `names` (None: all); values stored as NULL (not finite) are left out."""
    query = select(Result.trial_id, Result.name, Result.value).join(Trial).where(trials)
    if names is not None:
        query = query.where(Result.name.in_(names))
    finals: dict[int, dict[str, float]] = defaultdict(dict)
    for trial_id, name, value in driver_rows(connection, query):
        if value is not None:
            finals[trial_id][name] = value
    return finals


def driver_rows(connection: Connection, query: ClauseElement) -> list[tuple[Any, ...]]:
    """The query's rows as the database driver returns them: plain tuples, without SQLAlchemy's
    `Row` objects or type processing, so only for columns the driver returns as stored
    (integers, floats, text). A third less CPU than `Connection.execute` for the 400,000
    results of a 100,000-trial suite (`benchmarks/leaderboard.py`)."""
    compiled = query.compile(
        dialect=connection.dialect, compile_kwargs={"render_postcompile": True}
    )
    assert isinstance(compiled, SQLCompiler)  # a statement's compiler, not DDL's
    params: Any = compiled.params
    if compiled.positiontup is not None:  # qmark or format paramstyle
        params = tuple(params[name] for name in compiled.positiontup)
    cursor = connection.connection.cursor()
    try:
        cursor.execute(str(compiled), params)
        return list(cursor.fetchall())
    finally:
        cursor.close()


def _selections(keys: set[str], suite: str | None) -> Iterator[ColumnElement[bool]]:
    """Conditions on `Trial` whose rows include the trials `keys`: chunks of `OUTCOME_CHUNK`
    keys, or with `suite` and more keys than one chunk, the suite's trials (one indexed scan
    instead of IN lists of thousands of parameters; the rows of other keys are dropped)."""
    if suite is not None and len(keys) > OUTCOME_CHUNK:
        yield Trial.suite == suite
        return
    for chunk in chunks(sorted(keys), OUTCOME_CHUNK):
        yield Trial.key.in_(chunk)


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
    """Task name -> its section as one of these trials ran it (its recipe's `task`, as the
    config holds it); one config read per task and chunk of keys, skipped where it does not
    parse here (`stored_recipe`)."""
    sections: dict[str, dict[str, Any]] = {}
    with engine.connect() as connection:
        for chunk in chunks(keys, OUTCOME_CHUNK):
            firsts = select(func.min(Trial.id)).where(Trial.key.in_(chunk)).group_by(Trial.task)
            rows = connection.execute(select(Trial.task, Trial.config).where(Trial.id.in_(firsts)))
            for task, config in rows:
                recipe = stored_recipe(config)
                if recipe is not None:
                    sections.setdefault(task, recipe.task.model_dump(mode="json"))
    return sections


def metric_series(
    connection: Connection, trials: ColumnElement[bool], name: str
) -> dict[int, list[EvalPoint]]:
    """(step, train_time_s, value) of metric `name` per trial of `trials` (a condition on
    `Trial`), in step order."""
    rows = connection.execute(
        select(MetricPoint.trial_id, MetricPoint.step, MetricPoint.train_time_s, MetricPoint.value)
        .join(Trial)
        .where(trials, MetricPoint.name == name)
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


def end_times(engine: Engine, keys: Iterable[str]) -> dict[str, datetime]:
    """Trial key -> when the trial ended (stored as naive UTC), for the keys that have ended."""
    found: dict[str, datetime] = {}
    with engine.connect() as connection:
        for chunk in chunks(keys, OUTCOME_CHUNK):
            query = select(Trial.key, Trial.ended_at).where(Trial.key.in_(chunk))
            found |= {key: ended for key, ended in connection.execute(query) if ended is not None}
    return found


def cpu_kinds(engine: Engine, keys: Iterable[str]) -> dict[str, int]:
    """CPU model -> how many of the finished trials `keys` ran on that kind of CPU (trials that
    ran on a GPU are not counted)."""
    found: dict[str, int] = defaultdict(int)
    with engine.connect() as connection:
        for chunk in chunks(keys, OUTCOME_CHUNK):
            query = select(Trial.environment, Trial.status).where(Trial.key.in_(chunk))
            for environment, status in connection.execute(query):
                env = environment if isinstance(environment, dict) else {}
                if status in FINAL and env.get("cpu") and env.get("device_name") == env["cpu"]:
                    found[str(env["cpu"])] += 1
    return dict(found)


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
