"""Nightly runs and their alerts in the results database (SPEC 11, docs/nightly.md).

A nightly run is a suite run of kind "nightly". Its trials are stored under keys derived from the
planned trial's content key and the run's id (`nightly_key`), so each night's results are kept
beside `layerbench run`'s content-addressed results without touching them.
"""

from __future__ import annotations

import hashlib
import platform
from collections.abc import Collection, Iterable, Sequence
from datetime import UTC, date, datetime
from typing import Any

from sqlalchemy import Engine, func, select, update
from sqlalchemy.orm import Session

from harness.core import RunStatus, Status, TrialOutcome
from harness.env import git_commit
from harness.spec.declaration import RankingDeclaration
from harness.store.db import now
from harness.store.models import Alert, SuiteRun, Trial
from harness.store.queries import CHUNK, stored_outcomes
from harness.utils import chunks

NIGHTLY = "nightly"


def nightly_key(key: str, run_id: int) -> str:
    """The key of a planned trial re-executed by nightly run `run_id`."""
    return hashlib.sha256(f"{key}/nightly/{run_id}".encode()).hexdigest()


def start_nightly_run(
    engine: Engine,
    suite: str,
    cadence: str,
    n_planned: int,
    ranking: RankingDeclaration,
    host_class: str,
    environment: dict[str, Any],
) -> SuiteRun:
    """Record the start of a nightly run on one suite."""
    with Session(engine, expire_on_commit=False) as session, session.begin():
        run = SuiteRun(
            suite=suite,
            cadence=cadence,
            kind=NIGHTLY,
            status=RunStatus.RUNNING,
            started_at=now(),
            host=platform.node(),
            host_class=host_class,
            environment=environment,
            git_commit=git_commit(),
            n_planned=n_planned,
            n_ran=0,
            ranking=ranking.stored(),
        )
        session.add(run)
    return run


def end_nightly_run(engine: Engine, run_id: int, status: RunStatus) -> SuiteRun:
    """Record the end of a nightly run: `done`, or `interrupted` (it can be resumed)."""
    with Session(engine, expire_on_commit=False) as session, session.begin():
        n_ran = session.scalar(
            select(func.count()).where(Trial.suite_run_id == run_id, Trial.status != Status.PENDING)
        )
        session.execute(
            update(SuiteRun)
            .where(SuiteRun.id == run_id)
            .values(ended_at=now(), status=status, n_ran=n_ran)
        )
        return session.get_one(SuiteRun, run_id, populate_existing=True)


def _nightly(suite: str) -> Any:
    return select(SuiteRun).where(SuiteRun.suite == suite, SuiteRun.kind == NIGHTLY)


def nightly_run_on(
    engine: Engine, suite: str, commit: str | None, day: date, host_class: str
) -> SuiteRun | None:
    """The latest nightly run of the suite at `commit` started on `day` (UTC) on the host class."""
    query = _nightly(suite).where(
        SuiteRun.host_class == host_class,
        SuiteRun.git_commit.is_not_distinct_from(commit),
    )
    with Session(engine) as session:
        runs = session.scalars(query.order_by(SuiteRun.id.desc())).all()
        session.expunge_all()
    return next((run for run in runs if _utc_day(run.started_at) == day), None)


def _utc_day(stamp: datetime) -> date:
    return _aware(stamp).astimezone(UTC).date()


def finished_nightly_runs(
    engine: Engine, suite: str, host_class: str | None = None, before: int | None = None
) -> list[SuiteRun]:
    """The suite's finished nightly runs (on the host class, before run id `before`), oldest
    first."""
    query = _nightly(suite).where(SuiteRun.status == RunStatus.DONE)
    if host_class is not None:
        query = query.where(SuiteRun.host_class == host_class)
    if before is not None:
        query = query.where(SuiteRun.id < before)
    with Session(engine) as session:
        runs = list(session.scalars(query.order_by(SuiteRun.id)))
        session.expunge_all()
    return runs


def run_outcomes(
    engine: Engine,
    run_id: int,
    series_metric: str | None = None,
    metrics: Collection[str] | None = None,
) -> list[TrialOutcome]:
    """The finished trials a suite run ran (`stored_outcomes`)."""
    with Session(engine) as session:
        suite = session.get_one(SuiteRun, run_id).suite
        keys = list(session.scalars(select(Trial.key).where(Trial.suite_run_id == run_id)))
    return stored_outcomes(engine, keys, series_metric, suite=suite, metrics=metrics)


def latest_results(
    engine: Engine,
    suite: str,
    keys: Sequence[str],
    series_metric: str | None = None,
    metrics: Collection[str] | None = None,
) -> list[TrialOutcome]:
    """The suite's latest results: its last finished nightly run's trials when that run ended
    after the newest of the planned trials `keys` stored by `layerbench run`, else those
    (`stored_outcomes`: `metrics` names the final metrics to read, None: all)."""
    latest = finished_nightly_runs(engine, suite)
    if latest:
        ended = _aware(latest[-1].ended_at or latest[-1].started_at)
        newest = newest_end(engine, keys)
        if newest is None or ended > _aware(newest):
            return run_outcomes(engine, latest[-1].id, series_metric, metrics)
    return stored_outcomes(engine, keys, series_metric, suite=suite, metrics=metrics)


def newest_end(engine: Engine, keys: Sequence[str]) -> datetime | None:
    """When the last of the trials `keys` ended (None if none did)."""
    query = select(func.max(Trial.ended_at))
    with Session(engine) as session:
        ends = [session.scalar(query.where(Trial.key.in_(chunk))) for chunk in chunks(keys, CHUNK)]
    return max((end for end in ends if end is not None), default=None)


def _aware(stamp: datetime) -> datetime:
    """SQLite returns naive datetimes; every stored time is UTC."""
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)


def run_status_counts(engine: Engine, run_id: int) -> dict[str, int]:
    """How many of the run's trials ended in each status."""
    query = (
        select(Trial.status, func.count())
        .where(Trial.suite_run_id == run_id)
        .group_by(Trial.status)
    )
    with Session(engine) as session:
        return {status: count for status, count in session.execute(query)}


def add_alerts(engine: Engine, alerts: Iterable[Alert]) -> list[Alert]:
    alerts = list(alerts)
    with Session(engine, expire_on_commit=False) as session, session.begin():
        session.add_all(alerts)
    return alerts


def stored_alerts(
    engine: Engine,
    suite: str | None = None,
    run_ids: Iterable[int] | None = None,
    include_acknowledged: bool = True,
) -> list[Alert]:
    """Alerts, oldest first, optionally of one suite, of some runs, or not yet acknowledged."""
    query = select(Alert).order_by(Alert.id)
    if suite is not None:
        query = query.where(Alert.suite == suite)
    if run_ids is not None:
        query = query.where(Alert.suite_run_id.in_(list(run_ids)))
    if not include_acknowledged:
        query = query.where(Alert.acknowledged.is_(False))
    with Session(engine) as session:
        alerts = list(session.scalars(query))
        session.expunge_all()
    return alerts


def acknowledge(engine: Engine, alert_id: int) -> bool:
    """Mark an alert acknowledged; False if there is no such alert."""
    with engine.begin() as connection:
        done = connection.execute(
            update(Alert).where(Alert.id == alert_id).values(acknowledged=True)
        )
    return done.rowcount == 1
