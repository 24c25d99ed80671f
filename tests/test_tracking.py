"""MLflow tracking (harness/tracking.py): a new SQLite store starts from the empty store MLflow
migrated once, and is the store MLflow would have made itself."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from mlflow.store.db import utils as mlflow_db
from mlflow.tracking import MlflowClient
from sqlalchemy import create_engine

from harness.tracking import MLflowTracker, start_from_template


def schema(path: Path) -> tuple[dict[str, list[str]], list[tuple[str]]]:
    """The store's tables, indexes and triggers (the clauses of their SQL, in any order: MLflow's
    own migrations order a table's constraints by the process's hash seed), and its Alembic
    revision."""
    with sqlite3.connect(path) as connection:
        objects = connection.execute("SELECT type, name, sql FROM sqlite_master")
        revision = connection.execute("SELECT version_num FROM alembic_version").fetchall()
        clauses = {
            f"{kind} {name}": sorted(line.strip().rstrip(",") for line in (sql or "").splitlines())
            for kind, name, sql in objects
        }
        return clauses, revision


def test_a_new_sqlite_store_is_the_store_mlflow_makes_itself_and_migrates_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAYERBENCH_CACHE", str(tmp_path / "cache"))
    migrations: list[object] = []
    initialize = mlflow_db._initialize_tables
    monkeypatch.setattr(
        mlflow_db, "_initialize_tables", lambda engine: migrations.append(initialize(engine))
    )
    engine = create_engine("sqlite://")
    copied = MLflowTracker(engine, f"sqlite:///{tmp_path / 'copied.db'}").client
    assert len(migrations) == 1  # the template, in the cache
    MLflowTracker(engine, f"sqlite:///{tmp_path / 'again.db'}")
    assert len(migrations) == 1  # copied, not migrated again
    own = MlflowClient(f"sqlite:///{tmp_path / 'own.db'}")
    own.search_experiments()
    assert len(migrations) == 2  # MLflow's own path migrates
    assert schema(tmp_path / "copied.db") == schema(tmp_path / "own.db")
    default = copied.get_experiment("0")
    assert default.name == "Default"
    assert default.artifact_location == own.get_experiment("0").artifact_location
    run = copied.create_run(copied.create_experiment("suite"))
    copied.log_metric(run.info.run_id, "val_loss", 2.5, step=1)
    assert copied.get_metric_history(run.info.run_id, "val_loss")[0].value == 2.5
    assert not list(tmp_path.glob(".*partial"))


def test_an_existing_store_or_another_kind_of_store_is_left_to_mlflow(tmp_path: Path) -> None:
    existing = tmp_path / "existing.db"
    existing.write_bytes(b"")
    start_from_template(f"sqlite:///{existing}")
    assert existing.read_bytes() == b""
    start_from_template(f"sqlite:///{tmp_path / 'missing' / 'store.db'}")
    start_from_template("sqlite:///:memory:")
    start_from_template("postgresql://127.0.0.1/mlflow")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["existing.db"]
