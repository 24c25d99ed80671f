"""Opening the results database, migrating it, and the runner's ledger on top of it."""

from __future__ import annotations

import atexit
import logging
import os
import platform
import socket
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, create_engine, delete, event, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.orm import Session

from harness.core import Status
from harness.env import git_commit
from harness.records import PlannedTrial, TrialResult
from harness.spec.declaration import RankingDeclaration
from harness.store.models import (
    ExampleOutcome,
    LayerStatistic,
    MetricPoint,
    Result,
    SuiteRun,
    Trial,
)
from harness.store.url import database_url
from harness.trial_metrics import undeclared_metrics

MIGRATIONS = Path(__file__).with_name("migrations")
STALE_AFTER = timedelta(minutes=5)
"""The lease of a claim: a `running` trial whose heartbeat is older is free to take (docs/
reliability.md states the whole rule); the runner renews it every HEARTBEAT_EVERY_S seconds."""
WRITE_RETRY_S = 30 * 60.0
"""How long the runner keeps retrying a write while the database is unreachable."""

log = logging.getLogger("layerbench")
R = TypeVar("R")


class DatabaseError(RuntimeError):
    """The results database cannot be reached or used."""


def now() -> datetime:
    return datetime.now(UTC)


def make_engine(url: str, read_only: bool = False) -> Engine:
    """An engine; SQLite gets WAL, a busy timeout and foreign keys. Its connections are closed
    at exit (`closed_at_exit`)."""
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 60})
        event.listen(engine, "connect", _sqlite_pragmas(read_only))
    else:
        options = "-c default_transaction_read_only=on" if read_only else None
        connect_args = {"options": options} if options else {}
        engine = create_engine(url, connect_args=connect_args, pool_pre_ping=True)
    return closed_at_exit(engine)


def closed_at_exit(engine: Engine) -> Engine:
    """Close the engine's pooled connections when the process exits, if it is still in use:
    SQLite then checkpoints its write-ahead log into the database file and removes it, even
    where the command ends without freeing its objects (`harness.cli.main`)."""
    reference = weakref.ref(engine)

    def dispose() -> None:
        alive = reference()
        if alive is not None:
            alive.dispose()

    atexit.register(dispose)
    return engine


def _sqlite_pragmas(read_only: bool) -> Callable[[Any, Any], None]:
    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        if read_only:
            cursor.execute("PRAGMA query_only=ON")
        else:
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.close()

    return on_connect


def alembic_config(connection: Any) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def upgrade(engine: Engine) -> None:
    """Bring the schema to the latest migration (idempotent)."""
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), "head")


def is_current(engine: Engine) -> bool:
    with engine.connect() as connection:
        current = MigrationContext.configure(connection).get_current_revision()
        head = ScriptDirectory.from_config(alembic_config(connection)).get_current_head()
    return current == head


def open_database(url: str | None = None) -> Engine:
    """Connect, and migrate when the schema is not current; a clear error if unreachable."""
    url = database_url(url)
    try:
        engine = make_engine(url)
        if not is_current(engine):
            upgrade(engine)
    except OperationalError as exc:
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
        raise DatabaseError(f"cannot use the database {redact(url)}: {reason}") from None
    return engine


def redact(url: str) -> str:
    """The URL without its password, for messages."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def unreachable(error: DBAPIError) -> bool:
    """Is this the database being down (worth waiting for), not a bad statement?"""
    return error.connection_invalidated or isinstance(error, OperationalError)


def retrying(write: Callable[[], R], what: str, limit_s: float = WRITE_RETRY_S) -> R:
    """`write()`, retried with backoff (1 s doubling to 30 s) while the database is unreachable.

    Each write is one transaction that can be repeated, so a retry after a lost connection never
    stores a result twice.
    """
    deadline, wait = time.monotonic() + limit_s, 1.0
    while True:
        try:
            return write()
        except DBAPIError as error:
            if not unreachable(error) or time.monotonic() + wait > deadline:
                raise
            reason = str(error.orig).strip().splitlines()[0] if error.orig else type(error).__name__
            log.warning("database unreachable (%s) %s; retrying in %.0f s", reason, what, wait)
            time.sleep(wait)
            wait = min(2 * wait, 30.0)


def runner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{os.urandom(4).hex()}"


def claimant_alive(claimed_by: str | None, heartbeat_at: datetime | None) -> bool:
    """Is the runner holding a claim still at work? (same host: its pid; else: its heartbeat)"""
    if not claimed_by:
        return False
    host, pid, _ = claimed_by.rsplit(":", 2)
    if heartbeat_at is not None and heartbeat_at.tzinfo is None:
        heartbeat_at = heartbeat_at.replace(tzinfo=UTC)
    fresh = heartbeat_at is not None and now() - heartbeat_at < STALE_AFTER
    if host == socket.gethostname():
        return fresh and pid_alive(int(pid))
    return fresh


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def insert_unless_key_exists(connection: Connection, values: dict[str, Any]) -> bool:
    """Insert a trial row unless its key is already stored (another runner's claim won the
    race): whether it was inserted. Any other integrity error (a missing value, a broken
    reference) still raises."""
    dialect = postgresql if connection.dialect.name == "postgresql" else sqlite  # the two
    statement = dialect.insert(Trial).values(values).on_conflict_do_nothing(index_elements=["key"])
    return connection.execute(statement.returning(Trial.id)).first() is not None


class StoreLedger:
    """The runner's ledger on SQL: atomic claims, heartbeats, one transaction per result."""

    def __init__(
        self,
        engine: Engine,
        suite_run_id: int,
        force: bool = False,
        retry_failed: bool = False,
        on_finish: Callable[[PlannedTrial, int], None] | None = None,
    ) -> None:
        self.engine = engine
        self.suite_run_id = suite_run_id
        self.me = runner_id()
        self.force, self.retry_failed = force, retry_failed
        self.on_finish = on_finish

    def claim(self, trial: PlannedTrial) -> bool:
        """Take the trial unless it has a final result (or another live runner has it)."""
        return retrying(lambda: self._claim(trial), f"claiming {trial.label}")

    def _claim(self, trial: PlannedTrial) -> bool:
        if self._insert_claim(trial):
            return True
        with self.engine.begin() as connection:
            # PostgreSQL: a row another runner is claiming right now is skipped, not waited for
            # (SQLite has no row locks and ignores it; the conditional update below decides).
            row = connection.execute(
                select(Trial.status, Trial.claimed_by, Trial.heartbeat_at)
                .where(Trial.key == trial.key)
                .with_for_update(skip_locked=True)
            ).one_or_none()
            if row is None or not self.claimable(row.status, row.claimed_by, row.heartbeat_at):
                return False
            taken = connection.execute(
                update(Trial)
                .where(
                    Trial.key == trial.key,
                    Trial.status == row.status,
                    Trial.claimed_by.is_not_distinct_from(row.claimed_by),
                )
                .values({**self._claim_values(trial), "attempts": Trial.attempts + 1})
            )
        return taken.rowcount == 1

    def claimable(self, status: str, claimed_by: str | None, heartbeat_at: datetime | None) -> bool:
        stored = Status(status)
        if stored is Status.RUNNING:
            return not claimant_alive(claimed_by, heartbeat_at)
        if stored.retried and self.retry_failed:
            return True
        return stored.active or self.force

    def _claim_values(self, trial: PlannedTrial) -> dict[str, Any]:
        stamp = now()
        return {
            "status": Status.RUNNING,
            "claimed_by": self.me,
            "heartbeat_at": stamp,
            "started_at": stamp,
            "ended_at": None,
            "error": None,
            "suite_run_id": self.suite_run_id,
            "config": trial.config,
            "sweep": trial.sweep,
        }

    def _insert_claim(self, trial: PlannedTrial) -> bool:
        values = {
            "key": trial.key,
            "suite": trial.suite,
            "method": trial.method,
            "model": trial.model,
            "task": trial.task,
            "seed": trial.seed,
            "attempts": 1,
            **self._claim_values(trial),
        }
        with self.engine.begin() as connection:
            return insert_unless_key_exists(connection, values)

    def add_attempt(self, trial: PlannedTrial) -> None:
        """Count one more attempt of a trial this runner holds (a backend's own retry)."""
        with self.engine.begin() as connection:
            connection.execute(
                update(Trial)
                .where(Trial.key == trial.key, Trial.claimed_by == self.me)
                .values(attempts=Trial.attempts + 1)
            )

    def heartbeat(self, trial: PlannedTrial) -> None:
        """Renew the claim's lease; a database that is down is skipped (the next one retries)."""
        try:
            with self.engine.begin() as connection:
                connection.execute(
                    update(Trial)
                    .where(Trial.key == trial.key, Trial.claimed_by == self.me)
                    .values(heartbeat_at=now())
                )
        except DBAPIError as error:
            if not unreachable(error):
                raise

    def release(self, trial: PlannedTrial) -> None:
        """Give back a claim without a result: the trial is pending again."""
        with self.engine.begin() as connection:
            connection.execute(
                update(Trial)
                .where(Trial.key == trial.key, Trial.claimed_by == self.me)
                .values(status=Status.PENDING, claimed_by=None, heartbeat_at=None)
            )

    def finish(self, trial: PlannedTrial, result: TrialResult) -> None:
        """Store the result (retried while the database is down), then hand it to `on_finish`.

        An `on_finish` failure (MLflow down, its disk full) is a warning: the result is stored,
        and the next run on the suite logs it (`MLflowTracker.backfill`).
        """
        trial_id = retrying(lambda: self._store(trial, result), f"storing {trial.label}")
        warn_undeclared(trial, result)
        if trial_id is None or self.on_finish is None:
            return
        try:
            self.on_finish(trial, trial_id)
        except Exception as error:  # tracking is best effort; the result is safe in the store
            log.warning(
                "logging %s to MLflow failed (%s); the next run logs it", trial.label, error
            )

    def _store(self, trial: PlannedTrial, result: TrialResult) -> int | None:
        """One transaction: the trial's status and every row of its result (series, statistics,
        per-example outcomes); None if the trial is no longer ours."""
        with Session(self.engine) as session, session.begin():
            trial_id = session.scalars(
                select(Trial.id).where(Trial.key == trial.key, Trial.claimed_by == self.me)
            ).one_or_none()
            if trial_id is None:
                return None
            for table in (MetricPoint, Result, LayerStatistic, ExampleOutcome):
                session.execute(delete(table).where(table.trial_id == trial_id))
            session.execute(update(Trial).where(Trial.id == trial_id).values(finished(result)))
            session.add_all(result_rows(trial_id, result))
        return trial_id


def warn_undeclared(trial: PlannedTrial, result: TrialResult) -> None:
    """A warning for each stored metric that the trial's task entry does not declare."""
    task_type = trial.recipe.task_entry.name
    evaluated = [trial.recipe.evaluation[0].name] if trial.recipe.evaluation else []
    undeclared = undeclared_metrics(task_type, result.final, evaluated)
    if undeclared:
        log.warning(
            "%s stored metrics that task type '%s' does not declare: %s (declare them with "
            "`metrics=` on its catalog entry)",
            trial.label,
            task_type,
            ", ".join(undeclared),
        )


def finished(result: TrialResult) -> dict[str, Any]:
    return {
        "status": result.status,
        "error": result.error,
        "failed_step": result.failed_step,
        "steps_done": result.steps_done,
        "tokens": result.tokens,
        "train_time_s": result.train_time_s,
        "eval_time_s": result.eval_time_s,
        "wall_time_s": result.wall_time_s,
        "resumes": result.resumes,
        "recomputed_steps": result.recomputed_steps,
        "environment": result.environment,
        "ended_at": now(),
        "claimed_by": None,
    }


def finite(value: float) -> float | None:
    """NaN and inf are stored as NULL (not every database keeps them)."""
    return value if value == value and abs(value) != float("inf") else None


def result_rows(trial_id: int, result: TrialResult) -> Iterator[Any]:
    for point in result.series:
        for name, value in point.metrics.items():
            yield MetricPoint(
                trial_id=trial_id,
                name=name,
                step=point.step,
                tokens=point.tokens,
                train_time_s=point.train_time_s,
                wall_time_s=point.wall_time_s,
                value=finite(value),
            )
    for name, value in result.final.items():
        yield Result(trial_id=trial_id, name=name, value=finite(value))
    for stat in result.layer_stats:
        yield LayerStatistic(
            trial_id=trial_id,
            step=stat.step,
            layer=stat.layer,
            name=stat.name,
            value=finite(stat.value),
        )
    for metric, outcomes in result.examples.items():
        for example_id, value in outcomes.items():
            yield ExampleOutcome(
                trial_id=trial_id, metric=metric, example_id=example_id, value=finite(value)
            )


@contextmanager
def suite_run(
    engine: Engine,
    suite: str,
    cadence: str,
    n_planned: int,
    ranking: RankingDeclaration | None,
    trial_keys: list[str] | None = None,
) -> Iterator[SuiteRun]:
    """Record one invocation on a suite: start, end, host, commit, how to rank, trials ran, and
    the keys of its planned trials (what `harness.ranking.suite` ranks)."""
    with Session(engine, expire_on_commit=False) as session, session.begin():
        run = SuiteRun(
            suite=suite,
            cadence=cadence,
            started_at=now(),
            host=platform.node(),
            git_commit=git_commit(),
            n_planned=n_planned,
            n_ran=0,
            ranking=ranking.stored() if ranking is not None else None,
            trial_keys=trial_keys,
        )
        session.add(run)
    try:
        yield run
    finally:
        with Session(engine) as session, session.begin():
            session.execute(
                update(SuiteRun)
                .where(SuiteRun.id == run.id)
                .values(ended_at=now(), n_ran=run.n_ran)
            )
