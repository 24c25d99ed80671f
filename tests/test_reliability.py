"""Small profiles of the reliability campaign (benchmarks/reliability.py, docs/reliability.md):
concurrent claims, leases, writes retried while the database is down, kills inside writes."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, select, update
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session

from benchmarks.reliability import audit, environment, lr_methods, output_of, start, write_suite
from harness.records import TrialResult
from harness.runner.local import Running, renew_leases
from harness.spec import load_suite
from harness.spec.plan import PlannedTrial, plan_suite
from harness.store import db
from harness.store.db import STALE_AFTER, StoreLedger, now, open_database, suite_run
from harness.store.models import Result, Trial
from tests.factories import invoke


def planned(directory: Path, methods: int = 6) -> list[PlannedTrial]:
    return plan_suite(load_suite(write_suite(directory, lr_methods(methods), seeds=2)))


def run_id(engine: Engine) -> int:
    """A suite run for the ledgers' claims to belong to."""
    with suite_run(engine, "campaign", "manual", 0, None) as run:
        return run.id


@pytest.fixture(params=["sqlite", "postgresql"])
def either_database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh SQLite file, then a fresh PostgreSQL database: each test runs on both."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    return str(request.getfixturevalue("postgres_url"))


def test_a_claim_that_breaks_a_constraint_raises_instead_of_passing_for_taken(
    either_database: str, tmp_path: Path
) -> None:
    engine = open_database(either_database)
    trial = planned(tmp_path)[0]
    with pytest.raises(IntegrityError):  # no such suite run: not "another runner has it"
        StoreLedger(engine, suite_run_id=10**6).claim(trial)
    ledger = StoreLedger(engine, suite_run_id=run_id(engine))
    assert ledger.claim(trial) and not StoreLedger(engine, run_id(engine)).claim(trial)


def test_four_runners_claim_each_trial_exactly_once(either_database: str, tmp_path: Path) -> None:
    engine = open_database(either_database)
    trials = planned(tmp_path)
    ledgers = [StoreLedger(engine, suite_run_id=run_id(engine)) for _ in range(4)]
    claimed: list[list[str]] = [[] for _ in ledgers]
    barrier = threading.Barrier(len(ledgers))

    def runner(index: int) -> None:
        barrier.wait()
        claimed[index] = [t.key for t in trials if ledgers[index].claim(t)]

    threads = [threading.Thread(target=runner, args=(i,)) for i in range(len(ledgers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(key for keys in claimed for key in keys) == sorted(t.key for t in trials)
    with Session(engine) as session:
        assert set(session.scalars(select(Trial.attempts))) == {1}


def hold(engine: Engine, trial: PlannedTrial, claimed_by: str, age: timedelta) -> None:
    with engine.begin() as connection:
        connection.execute(
            update(Trial)
            .where(Trial.key == trial.key)
            .values(status="running", claimed_by=claimed_by, heartbeat_at=now() - age)
        )


def test_a_claim_is_taken_only_when_its_lease_expired_or_its_owner_died(tmp_path: Path) -> None:
    engine = open_database(f"sqlite:///{tmp_path / 'lease.db'}")
    trial = planned(tmp_path, 1)[0]
    assert StoreLedger(engine, run_id(engine)).claim(trial)
    ledger = StoreLedger(engine, run_id(engine))
    host = db.socket.gethostname()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        cases = [
            ("elsewhere:1:0", timedelta(0), False),  # another host, lease running
            ("elsewhere:1:0", STALE_AFTER - timedelta(seconds=5), False),
            (f"{host}:{alive.pid}:0", timedelta(0), False),  # this host, owner alive
            (f"{host}:{dead.pid}:0", timedelta(0), True),  # this host, owner dead
            ("elsewhere:1:0", STALE_AFTER + timedelta(seconds=1), True),  # lease expired
        ]
        for claimed_by, age, taken in cases:
            hold(engine, trial, claimed_by, age)
            assert ledger.claim(trial) is taken, (claimed_by, age)
    finally:
        alive.kill()


class CountingLedger:
    def __init__(self) -> None:
        self.beats: list[str] = []

    def heartbeat(self, trial: PlannedTrial) -> None:
        self.beats.append(trial.key)


def test_the_runner_renews_the_lease_of_a_silent_trial(tmp_path: Path) -> None:
    trial = planned(tmp_path, 1)[0]
    silent = Running(trial, process=None, deadline=0.0, last_heartbeat=time.monotonic() - 11)
    recent = Running(trial, process=None, deadline=0.0, last_heartbeat=time.monotonic())
    ledger = CountingLedger()
    renew_leases([silent, recent], ledger)
    assert ledger.beats == [trial.key]
    assert time.monotonic() - silent.last_heartbeat < 1


def test_a_result_write_waits_while_the_database_is_unreachable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = open_database(f"sqlite:///{tmp_path / 'down.db'}")
    trial = planned(tmp_path, 1)[0]
    ledger = StoreLedger(engine, run_id(engine))
    assert ledger.claim(trial)
    store, failures, waits = ledger._store, iter([True, True, True]), []

    def flaky(*args: object) -> int | None:
        if next(failures, False):
            raise OperationalError("INSERT", {}, ConnectionRefusedError("server closed"))
        return store(*args)

    monkeypatch.setattr(ledger, "_store", flaky)
    monkeypatch.setattr(db.time, "sleep", waits.append)
    ledger.finish(trial, TrialResult("done", final={"val_loss": 1.0}))
    assert waits == [1.0, 2.0, 4.0]
    with Session(engine) as session:
        assert session.scalars(select(Trial.status)).one() == "done"
        assert session.scalars(select(Result.value)).all() == [1.0]


@pytest.mark.slow
def test_kills_inside_the_result_and_mlflow_writes_lose_and_duplicate_nothing(
    tmp_path: Path,
) -> None:
    suite = write_suite(tmp_path, lr_methods(2))
    url = f"sqlite:///{tmp_path / 'kills.db'}"
    for where in ("db_write", "mlflow_write"):
        runner = start(suite, url, environment(tmp_path, LB_KILL_AT=where))
        output_of(runner, timeout=600)
        assert runner.returncode == -9, f"the kill inside {where} did not land"
    final = invoke("run", str(suite), "--db", url)  # in this process: nothing is killed now
    assert "Traceback" not in final.output and final.exit_code == 0
    figures = audit(url, suite, f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert (figures["lost"], figures["duplicated"], figures["orphaned_running"]) == (0, 0, 0)
    assert (figures["mlflow_duplicated"], figures["mlflow_missing"]) == (0, 0)
    assert figures["attempts"] == 3  # the trial killed in its result write ran twice
