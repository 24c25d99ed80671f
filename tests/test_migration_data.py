"""A database filled at Alembic revision 0001, upgraded to head, keeps every row and its ranking."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from alembic import command
from sqlalchemy import Engine, MetaData, create_engine, insert, select

from harness.cli import build_ranking
from harness.ranking import format_ranking
from harness.spec import load_suite
from harness.spec.plan import plan_suite
from harness.store.db import alembic_config, make_engine, open_database, upgrade
from tests.factories import fake_result, store, write_suite

METHODS = "pre-ln: {}\npost-ln: {norm: {placement: post}}\nrms: {norm: {type: rmsnorm}}"


def rows(engine: Engine, columns_of: MetaData) -> dict[str, list[tuple]]:
    """Every row of each table of `columns_of`, only its columns, in primary-key order."""
    present = MetaData()
    present.reflect(engine)
    found = {}
    with engine.connect() as connection:
        for name, table in columns_of.tables.items():
            if name == "alembic_version":
                continue
            here = present.tables[name]
            query = select(*(here.c[c.name] for c in table.columns)).order_by(*here.primary_key)
            found[name] = [tuple(row) for row in connection.execute(query)]
    return found


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_rows_and_ranking_survive_the_upgrade_from_0001(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    suite = load_suite(write_suite(tmp_path, METHODS))
    trials = plan_suite(suite)
    rng = np.random.default_rng(0)
    source = make_engine(f"sqlite:///{tmp_path / 'head.db'}")
    upgrade(source)
    loss = {"pre-ln": 1.5, "post-ln": 1.6, "rms": 1.4}
    store(
        source,
        [(t, fake_result("done", loss[t.method] + rng.normal(0, 0.01), rng)) for t in trials],
    )

    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'old.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    old = create_engine(url)
    with old.begin() as connection:
        command.upgrade(alembic_config(connection), "0001")
    at_0001 = MetaData()
    at_0001.reflect(old)
    filled = rows(source, at_0001)
    with old.begin() as connection:
        for name in ("suite_runs", "trials", "metric_series", "results", "layer_stats"):
            table = at_0001.tables[name]
            values = [
                dict(zip([c.name for c in table.columns], row, strict=True)) for row in filled[name]
            ]
            if values:
                connection.execute(insert(table), values)
    kept = rows(old, at_0001)
    old.dispose()

    upgraded = open_database(url)
    assert rows(upgraded, at_0001) == kept
    assert [len(kept[name]) for name in kept] == [len(filled[name]) for name in kept]
    assert sum(map(len, kept.values())) > 100
    before = format_ranking(build_ranking(suite, source), "json")
    assert format_ranking(build_ranking(suite, upgraded), "json") == before
