"""Claims on PostgreSQL: a row another runner is claiming is skipped, not waited for."""

from __future__ import annotations

import time
from pathlib import Path

from sqlalchemy import create_engine, select

from harness.records import TrialResult
from harness.spec import load_suite
from harness.spec.plan import plan_suite
from harness.store.db import StoreLedger, open_database, suite_run
from harness.store.models import Trial


def test_a_postgresql_claim_skips_a_row_another_runner_holds(
    postgres_url: str, tiny_suite: Path
) -> None:
    engine = open_database(postgres_url)
    trial = plan_suite(load_suite(tiny_suite))[0]
    # a claim that waited for the lock would fail after 5 s instead of returning at once
    impatient = create_engine(postgres_url, connect_args={"options": "-c lock_timeout=5000"})
    with suite_run(engine, "tiny", "manual", 1, None) as run:
        first = StoreLedger(engine, run.id)
        assert first.claim(trial)
        first.finish(trial, TrialResult("failed", error="boom"))
        retrying = StoreLedger(impatient, run.id, retry_failed=True)
        with engine.connect() as other:  # another runner, mid-claim: it holds the row lock
            other.execute(select(Trial.id).where(Trial.key == trial.key).with_for_update())
            started = time.monotonic()
            assert not retrying.claim(trial)
            assert time.monotonic() - started < 4
            other.rollback()
        assert retrying.claim(trial)  # once the lock is released, the failed trial is taken
    impatient.dispose()
    engine.dispose()
