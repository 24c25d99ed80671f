"""Tasks declare the metrics they emit on their catalog entries (issue 25); the store warns about
a stored metric nobody declares."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from harness.core import Direction, Status
from harness.records import PlannedTrial, TrialResult
from harness.registry import METRICS, TASKS
from harness.store.db import warn_undeclared
from harness.store.models import Result, Trial
from harness.trial_metrics import undeclared_metrics
from tests.factories import invoke

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
    recipe = SimpleNamespace(task_entry=TASKS.entry("lm"), evaluation=None)  # all it reads
    trial = PlannedTrial("k", "s", "m", "gpt", "lm", 0, {}, recipe)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="layerbench"):
        warn_undeclared(trial, TrialResult(Status.DONE, final={"val_loss": 1.0, "mystery": 2.0}))
    assert "mystery" in caplog.text and "val_loss" not in caplog.text
    assert undeclared_metrics("lm", ["val_loss", "train_loss", "mystery"]) == ["mystery"]
    # a fine-tuning trial's lm-eval task (`evaluate`) declares its metrics, before and after
    assert undeclared_metrics("lm", ["acc", "before_acc"]) == ["acc"]
    assert undeclared_metrics("lm", ["acc", "before_acc"], ["lm-eval"]) == []


def test_every_metric_has_a_direction_a_description_and_a_unit() -> None:
    for entry in METRICS.entries():
        metric = entry.obj
        assert metric.direction in set(Direction), entry.name
        assert metric.description and entry.doc == metric.description, entry.name
        assert isinstance(metric.unit, str), entry.name  # "": a pure number
    assert METRICS.get("val_loss").unit == "nats/token"
    assert METRICS.get("val_ppl").unit == ""
    assert METRICS.get("model_bytes").direction == Direction.MIN


def test_methods_lists_each_metric_with_its_direction_and_unit() -> None:
    listing = json.loads(invoke("methods", "--json").stdout)
    metrics = {entry["name"]: entry for entry in listing["metric"]}
    assert set(metrics) == set(METRICS.names())
    assert metrics["id_acc"]["direction"] == "max" and metrics["id_acc"]["unit"] == "fraction"
    text = invoke("methods").stdout
    assert "blocks left after pruning [blocks]" in text
