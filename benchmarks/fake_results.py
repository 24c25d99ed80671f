"""Stored trials that look like real ones, for the leaderboard benchmark and tests.

Results are written with the runner's own row builders (`finished`, `result_rows`), so the
database holds exactly what a real run would store: trials with their statuses, metric series,
final metrics and layer statistics, under one suite run.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np
from sqlalchemy import Connection, Engine, func, insert, select
from sqlalchemy.orm import Session

from harness.records import LayerStat, PlannedTrial, SeriesPoint, Status, TrialResult
from harness.spec.declaration import RankingDeclaration
from harness.store.db import finished, finite, result_rows, suite_run
from harness.store.models import LayerStatistic, MetricPoint, Result, Trial

EVALS = 4
EVAL_EVERY = 50
LAYERS = 4
START_LOSS = 5.5
TRACEBACK = 'Traceback (most recent call last):\n  File "trial.py"\nRuntimeError: {}'


def planned(
    suite: str,
    methods: Mapping[str, Mapping[str, Any]],
    models: Iterable[str],
    tasks: Iterable[str],
    seeds: Iterable[int],
    version: str = "",
) -> list[PlannedTrial]:
    """Trials of every (method, model, task, seed); `methods` maps a name to its settings.

    Keys hash the trial and `version`, as real keys hash the versions that change results.
    """
    trials = []
    for method, settings in methods.items():
        for model in models:
            for task in tasks:
                for seed in seeds:
                    config = {**settings, "model": {"name": model}, "task": {"name": task}}
                    label = f"{suite}/{method}/{model}/{task}/{seed}/{version}"
                    key = hashlib.sha256(label.encode()).hexdigest()
                    trials.append(
                        PlannedTrial(
                            key, suite, method, model, task, seed, {}, {**config, "seed": seed}
                        )
                    )
    return trials


def fake_result(
    status: Status,
    final_loss: float,
    rng: np.random.Generator,
    extra: Mapping[str, float] | None = None,
) -> TrialResult:
    """A trial result: a decaying loss curve ending near `final_loss`, and layer statistics."""
    if status in ("failed", "timeout"):
        return TrialResult(status, error=TRACEBACK.format(f"fake {status}"), wall_time_s=1.0)
    steps = [EVAL_EVERY * (i + 1) for i in range(EVALS)]
    series = [_point(step, final_loss, rng) for step in steps]
    if status == "diverged":
        series[-1] = _point(steps[-1], math.nan, rng)
        return TrialResult(status, series=series, failed_step=steps[-1], steps_done=steps[-1])
    final = {"val_loss": final_loss, "train_loss": final_loss - 0.05, **(extra or {})}
    stats = [
        LayerStat(step, layer, name, float(rng.lognormal(mean=-layer / 4, sigma=0.2)))
        for step in steps
        for layer in range(LAYERS)
        for name in ("grad_norm", "hidden_rms")
    ]
    return TrialResult(
        status,
        final=final,
        series=series,
        layer_stats=stats,
        steps_done=steps[-1],
        train_time_s=series[-1].train_time_s,
        wall_time_s=series[-1].wall_time_s,
        environment={"torch_version": "2.13.0", "device": "cpu"},
    )


def _point(step: int, final_loss: float, rng: np.random.Generator) -> SeriesPoint:
    decay = math.exp(-step / EVAL_EVERY)
    loss = final_loss + (START_LOSS - final_loss) * decay + float(rng.normal(0, 0.01))
    train_time = step * float(rng.uniform(0.04, 0.06))
    return SeriesPoint(
        step, step * 1024, train_time, train_time * 1.2, {"val_loss": loss, "train_loss": loss}
    )


def store(
    engine: Engine, results: Iterable[tuple[PlannedTrial, TrialResult]], cadence: str = "manual"
) -> int:
    """Store the trials and their results under a new suite run; returns the run's id."""
    results = list(results)
    suite = results[0][0].suite
    keys = [trial.key for trial, _ in results]
    with suite_run(engine, suite, cadence, len(results), None, keys) as run:
        with Session(engine) as session, session.begin():
            rows = [_trial_row(trial, result, run.id) for trial, result in results]
            session.add_all(rows)
            session.flush()
            for row, (_, result) in zip(rows, results, strict=True):
                session.add_all(result_rows(row.id, result))
        run.n_ran = len(results)
    return run.id


def _trial_row(trial: PlannedTrial, result: TrialResult, suite_run_id: int) -> Trial:
    return Trial(
        key=trial.key,
        suite=trial.suite,
        method=trial.method,
        model=trial.model,
        task=trial.task,
        seed=trial.seed,
        sweep=trial.sweep,
        config=trial.config,
        attempts=1,
        suite_run_id=suite_run_id,
        **finished(result),
    )


BULK_ROWS = 50_000


def store_bulk(
    engine: Engine,
    results: Iterable[tuple[PlannedTrial, TrialResult]],
    ranking: RankingDeclaration | None = None,
    cadence: str = "manual",
) -> int:
    """`store` for hundreds of thousands of trials: the same columns and values, written with
    SQLAlchemy core `executemany` inserts in batches instead of ORM objects (about 10x faster).
    Trial ids are assigned here, so the child rows need no round trip. `ranking` is what the
    suite run records as the suite's baseline and `rank` section."""
    results = list(results)
    suite = results[0][0].suite
    keys = [trial.key for trial, _ in results]
    with suite_run(engine, suite, cadence, len(results), ranking, keys) as run:
        with engine.begin() as connection:
            first = (connection.scalar(select(func.max(Trial.id))) or 0) + 1
            trials = [
                {"id": first + i, **_trial_columns(trial, result, run.id)}
                for i, (trial, result) in enumerate(results)
            ]
            _insert(connection, Trial, trials)
            children: dict[type, list[dict[str, Any]]] = {}
            for trial_id, (_, result) in enumerate(results, start=first):
                for model, columns in _child_rows(trial_id, result):
                    children.setdefault(model, []).append(columns)
            for model, rows in children.items():
                _insert(connection, model, rows)
        run.n_ran = len(results)
    return run.id


def _insert(connection: Connection, model: type, rows: list[dict[str, Any]]) -> None:
    for start in range(0, len(rows), BULK_ROWS):
        connection.execute(insert(model), rows[start : start + BULK_ROWS])


def _child_rows(trial_id: int, result: TrialResult) -> Iterator[tuple[type, dict[str, Any]]]:
    """The columns of `harness.store.db.result_rows` as dicts (no ORM objects)."""
    for point in result.series:
        for name, value in point.metrics.items():
            yield (
                MetricPoint,
                {
                    "trial_id": trial_id,
                    "name": name,
                    "step": point.step,
                    "tokens": point.tokens,
                    "train_time_s": point.train_time_s,
                    "wall_time_s": point.wall_time_s,
                    "value": finite(value),
                },
            )
    for name, value in result.final.items():
        yield Result, {"trial_id": trial_id, "name": name, "value": finite(value)}
    for stat in result.layer_stats:
        yield (
            LayerStatistic,
            {
                "trial_id": trial_id,
                "step": stat.step,
                "layer": stat.layer,
                "name": stat.name,
                "value": finite(stat.value),
            },
        )


def _trial_columns(trial: PlannedTrial, result: TrialResult, suite_run_id: int) -> dict[str, Any]:
    return {
        "key": trial.key,
        "suite": trial.suite,
        "method": trial.method,
        "model": trial.model,
        "task": trial.task,
        "seed": trial.seed,
        "sweep": trial.sweep,
        "config": trial.config,
        "attempts": 1,
        "suite_run_id": suite_run_id,
        "tokens": 0,
        "heartbeat_at": None,
        "started_at": None,
        "mlflow_run_id": None,
        **finished(result),
    }
