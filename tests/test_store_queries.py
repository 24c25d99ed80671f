"""Ranking's reads at more trials than one query chunk: plain columns, every trial, no ORM rows."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import Engine, event, func, select
from sqlalchemy.orm import Session

from harness.store import queries
from harness.store.db import make_engine, upgrade
from harness.store.models import LayerStatistic, MetricPoint, Result
from harness.store.nightly import latest_results
from harness.store.queries import CHUNK, stored_outcomes
from tests.factories import fake_result, planned, store, store_bulk

N_TRIALS = CHUNK + 20


def results(seeds: range, rng_seed: int = 0) -> list:
    rng = np.random.default_rng(rng_seed)
    trials = planned("q", {"m": {}}, ["gpt"], ["t"], seeds)
    return [
        (trial, fake_result("diverged" if trial.seed == 3 else "done", 1.5, rng))
        for trial in trials
    ]


def engine_at(path: Path) -> Engine:
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine)
    return engine


@pytest.fixture
def no_orm_rows() -> Iterator[list[object]]:
    """ORM instances loaded while the test runs."""
    loaded: list[object] = []

    def record(session: Session, instance: object) -> None:
        loaded.append(instance)

    event.listen(Session, "loaded_as_persistent", record)
    yield loaded
    event.remove(Session, "loaded_as_persistent", record)


def test_stored_outcomes_reads_every_trial_as_plain_columns(
    tmp_path: Path, no_orm_rows: list[object]
) -> None:
    engine = engine_at(tmp_path / "q.db")
    stored = results(range(N_TRIALS))
    store_bulk(engine, stored)
    keys = [trial.key for trial, _ in stored]
    records = {r.key: r for r in stored_outcomes(engine, keys, "val_loss")}
    assert set(records) == set(keys)
    first, diverged, last = (records[stored[i][0].key] for i in (0, 3, -1))
    assert first.metrics == pytest.approx({"val_loss": 1.5, "train_loss": 1.45})
    assert diverged.status == "diverged" and diverged.metrics == {}
    assert [step for step, _, _ in last.series] == [50, 100, 150, 200]
    assert latest_results(engine, "q", keys) == stored_outcomes(engine, keys)
    assert no_orm_rows == []


def test_bulk_store_writes_what_the_row_builders_write(tmp_path: Path) -> None:
    by_orm, in_bulk = engine_at(tmp_path / "orm.db"), engine_at(tmp_path / "bulk.db")
    store(by_orm, results(range(5)))
    store_bulk(in_bulk, results(range(5)))
    keys = [trial.key for trial, _ in results(range(5))]
    assert stored_outcomes(by_orm, keys, "val_loss") == stored_outcomes(in_bulk, keys, "val_loss")
    for table in (MetricPoint, Result, LayerStatistic):
        counts = [
            Session(e).scalar(select(func.count()).select_from(table)) for e in (by_orm, in_bulk)
        ]
        assert counts[0] == counts[1] > 0


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_suites_keys_read_in_one_scan_are_those_read_in_chunks(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """More keys than a chunk with their suite: one scan of the suite's trials, the rows of
    other keys (superseded trials, other suites) dropped; the same outcomes as read by keys, in
    key order whatever order the keys are given in (the driver's own rows, on both backends)."""
    monkeypatch.setattr(queries, "OUTCOME_CHUNK", 4)
    if backend == "sqlite":
        engine = engine_at(tmp_path / "q.db")
    else:
        engine = make_engine(request.getfixturevalue("postgres_url"))
        upgrade(engine)
    stored = results(range(10))
    store_bulk(engine, stored)
    other = planned("other", {"m": {}}, ["gpt"], ["t"], range(3))
    store_bulk(
        engine, [(trial, fake_result("done", 1.0, np.random.default_rng(2))) for trial in other]
    )
    keys = [trial.key for trial, _ in stored[:8]]
    by_suite = stored_outcomes(engine, keys[::-1], "val_loss", suite="q")
    assert by_suite == stored_outcomes(engine, keys, "val_loss")
    assert [o.key for o in by_suite] == sorted(keys)
    assert [o.series != [] for o in by_suite] == [True] * 8


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_named_metrics_read_as_columns_or_in_their_own_query_equal_a_full_read(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """`metrics=`: only those final metrics, as in a read of all of them; a metric stored as
    NULL (not finite) or never stored is absent either way, whether the metrics come as
    columns of the trials' rows or, past `METRIC_COLUMNS`, in a query of their own."""
    if backend == "sqlite":
        engine = engine_at(tmp_path / "q.db")
    else:
        engine = make_engine(request.getfixturevalue("postgres_url"))
        upgrade(engine)
    rng = np.random.default_rng(3)
    extra = {"effective_bits": 4.0, "blown": math.inf}
    stored = [(t, fake_result("done", 1.5, rng, extra)) for t, _ in results(range(6))]
    store_bulk(engine, stored)
    keys = [trial.key for trial, _ in stored]
    named = {"val_loss", "blown", "effective_bits", "never_stored"}
    full = stored_outcomes(engine, keys, suite="q")
    expected = [{k: v for k, v in o.metrics.items() if k in named} for o in full]
    assert expected[0] == pytest.approx({"val_loss": 1.5, "effective_bits": 4.0})
    as_columns = stored_outcomes(engine, keys, suite="q", metrics=named)
    monkeypatch.setattr(queries, "METRIC_COLUMNS", 2)
    own_query = stored_outcomes(engine, keys, suite="q", metrics=named)
    for read in (as_columns, own_query):
        assert [o.metrics for o in read] == expected
        assert [o.key for o in read] == [o.key for o in full]


def test_the_reuse_check_counts_stored_cpu_trials_by_cpu_kind(tmp_path: Path) -> None:
    import shutil
    import sqlite3
    from unittest import mock

    from harness.service import run as service_run

    db = tmp_path / "dyt.db"
    shutil.copyfile(Path(__file__).parents[1] / "docs/results/data/findings-dyt-derf.db", db)
    keys = [k for (k,) in sqlite3.connect(db).execute("SELECT key FROM trials")]
    engine = make_engine(f"sqlite:///{db}", read_only=True)
    kinds = queries.cpu_kinds(engine, keys)
    assert kinds == {"AMD EPYC": 75, "Intel(R) Xeon(R) Processor": 18}  # the audit's mixed run
    trials = [mock.Mock(key=k) for k in keys]
    with mock.patch.object(service_run, "cpu_model", return_value="AMD EPYC"):
        others = service_run._other_cpus(engine, trials, trials[:1])
        assert service_run._other_cpus(engine, trials, []) == {}  # nothing runs: no warning
        note = service_run.mixed_cpus_note(others)
    assert others == {"Intel(R) Xeon(R) Processor": 18}
    assert note.startswith(
        "18 stored trials this run reuses ran on another kind of CPU than this machine's "
        "(AMD EPYC): 18 on Intel(R) Xeon(R) Processor."
    )
