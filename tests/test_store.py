"""The database schema: Alembic migrations create it and keep existing data."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from sqlalchemy import create_engine, inspect, text

from harness.store.db import alembic_config, is_current, open_database


def test_migrations_keep_data_across_upgrades(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = create_engine(url)
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), "0001")
        connection.execute(
            text(
                "INSERT INTO suite_runs (suite, cadence, started_at, host, n_planned, n_ran) "
                "VALUES ('kept', 'manual', '2026-01-01 00:00:00', 'h', 3, 2)"
            )
        )
    assert not is_current(engine)
    upgraded = open_database(url)
    assert is_current(upgraded)
    assert "ranking" in {c["name"] for c in inspect(upgraded).get_columns("suite_runs")}
    with upgraded.connect() as connection:
        row = connection.execute(text("SELECT suite, n_planned, n_ran FROM suite_runs")).one()
    assert tuple(row) == ("kept", 3, 2)


def test_postgresql_schema_matches_the_models(postgres_url: str) -> None:
    engine = open_database(postgres_url)
    tables = set(inspect(engine).get_table_names())
    assert {"suite_runs", "trials", "metric_series", "results", "layer_stats"} <= tables
    assert is_current(engine)
