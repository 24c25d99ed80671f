"""Tasks declare the metrics they emit on their catalog entries (issue 25); the store warns about
a stored metric nobody declares."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from harness.core import Status
from harness.records import PlannedTrial, TrialResult
from harness.registry import METRICS, TASKS, undeclared_metrics
from harness.store.db import warn_undeclared
from harness.store.models import Result, Trial

DATA = Path(__file__).resolve().parents[1] / "docs" / "results" / "data"


def test_every_declared_metric_has_a_direction() -> None:
    for entry in TASKS.entries():
        assert entry.metrics, entry.name
        for name in entry.metrics:
            assert name in METRICS.names(), (entry.name, name)


@pytest.mark.parametrize("db", sorted(DATA.glob("*.db")), ids=lambda path: path.stem)
def test_every_metric_of_the_committed_results_is_declared(db: Path) -> None:
    engine = create_engine(f"sqlite:///file:{db}?mode=ro&uri=true")
    query = select(Trial.config, Result.name).join(Result, Result.trial_id == Trial.id)
    with Session(engine) as session:
        stored = {(config["task"]["type"], name) for config, name in session.execute(query)}
    assert [(task, name) for task, name in stored if undeclared_metrics(task, [name])] == []


def test_an_undeclared_stored_metric_warns(caplog: pytest.LogCaptureFixture) -> None:
    recipe = SimpleNamespace(task_entry=TASKS.entry("lm"))  # all the warning reads
    trial = PlannedTrial("k", "s", "m", "gpt", "lm", 0, {}, recipe)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="layerbench"):
        warn_undeclared(trial, TrialResult(Status.DONE, final={"val_loss": 1.0, "mystery": 2.0}))
    assert "mystery" in caplog.text and "val_loss" not in caplog.text
    assert undeclared_metrics("lm", ["val_loss", "train_loss", "mystery"]) == ["mystery"]
