"""MLflow logging: one experiment per suite, one run per trial (SPEC section 7).

The tracker reads what the store holds, so a trial stored before a crash is logged later.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

from sqlalchemy import Engine, create_engine, make_url, select, update
from sqlalchemy.orm import Session

from harness.cache import cache_dir
from harness.core import Status
from harness.env import tracking_uri
from harness.records import FINAL_STATUSES, PlannedTrial
from harness.store.models import LayerStatistic, MetricPoint, Result, Trial
from harness.utils import chunks, flatten

BATCH = 900


def layer_stats_csv(rows: Sequence[LayerStatistic]) -> str:
    """step,layer,name,value lines (an empty value for NaN or inf)."""
    lines = ["step,layer,name,value"]
    lines += [f"{r.step},{r.layer},{r.name},{'' if r.value is None else r.value!r}" for r in rows]
    return "\n".join(lines) + "\n"


class MLflowTracker:
    """Logs stored trials to MLflow and records each run's id on the trial."""

    def __init__(self, engine: Engine, uri: str | None = None) -> None:
        from mlflow.tracking import MlflowClient

        self.engine = engine
        uri = tracking_uri(uri)
        start_from_template(uri)
        self.client = MlflowClient(uri)

    def experiment_id(self, suite: str) -> str:
        experiment = self.client.get_experiment_by_name(suite)
        return experiment.experiment_id if experiment else self.client.create_experiment(suite)

    def on_finish(self, trial: PlannedTrial, trial_id: int) -> None:
        """The runner's callback once a trial is stored: log it."""
        self.log_trial(trial_id)

    def log_trial(self, trial_id: int) -> str:
        """Create the trial's run: params, metric series with steps, final metrics, tags, and the
        layer statistics as `layer/<name>/<layer>` series plus a `layer_stats.csv` artifact."""
        from mlflow.entities import Metric, Param

        with Session(self.engine) as session:
            trial = session.get_one(Trial, trial_id)
            points = session.scalars(
                select(MetricPoint).where(MetricPoint.trial_id == trial_id)
            ).all()
            finals = session.scalars(select(Result).where(Result.trial_id == trial_id)).all()
            layer_stats = session.scalars(
                select(LayerStatistic)
                .where(LayerStatistic.trial_id == trial_id)
                .order_by(LayerStatistic.step, LayerStatistic.layer, LayerStatistic.name)
            ).all()
        tags = {
            "trial_key": trial.key,
            "status": trial.status,
            "method": trial.method,
            "model": trial.model,
            "task": trial.task,
            "seed": str(trial.seed),
        }
        if trial.resumes:  # resumed from checkpoints: still one run with the whole series
            tags |= {"resumes": str(trial.resumes), "recomputed_steps": str(trial.recomputed_steps)}
        experiment_id = self.experiment_id(trial.suite)
        if trial.mlflow_run_id is None:  # no finished logging of this trial reached the store
            self.delete_partial_runs(experiment_id, trial.key)
        run = self.client.create_run(
            experiment_id, run_name=f"{trial.method}-s{trial.seed}", tags=tags
        )
        run_id: str = run.info.run_id
        stamp = int(time.time() * 1000)
        params = [Param(k, v) for k, v in flatten(trial.config).items()]
        metrics = (
            [Metric(p.name, p.value, stamp, p.step) for p in points if p.value is not None]
            + [
                Metric(f"final_{r.name}", r.value, stamp, trial.steps_done)
                for r in finals
                if r.value is not None
            ]
            + [
                Metric(f"layer/{s.name}/{s.layer}", s.value, stamp, s.step)
                for s in layer_stats
                if s.value is not None
            ]
        )
        for param_batch in chunks(params, 100):
            self.client.log_batch(run_id, params=param_batch)
        for metric_batch in chunks(metrics, BATCH):
            self.client.log_batch(run_id, metrics=metric_batch)
        self.client.log_dict(run_id, trial.config, "config.json")
        if layer_stats:
            self.client.log_text(run_id, layer_stats_csv(layer_stats), "layer_stats.csv")
        if trial.error:
            self.client.log_text(run_id, trial.error, "error.txt")
        self.client.set_terminated(run_id, status=Status(trial.status).mlflow)
        with self.engine.begin() as connection:
            connection.execute(
                update(Trial).where(Trial.id == trial_id).values(mlflow_run_id=run_id)
            )
        return run_id

    def delete_partial_runs(self, experiment_id: str, key: str) -> None:
        """Delete runs of this trial left by a runner killed while logging it (its run id never
        reached the store), so a trial has one MLflow run however often its logging restarts."""
        for run in self.client.search_runs(
            [experiment_id], filter_string=f"tags.trial_key = '{key}'", max_results=100
        ):
            self.client.delete_run(run.info.run_id)

    def backfill(self, suite: str) -> int:
        """Log the suite's finished trials that have no MLflow run yet (after a crash)."""
        with Session(self.engine) as session:
            missing = session.scalars(
                select(Trial.id).where(
                    Trial.suite == suite,
                    Trial.mlflow_run_id.is_(None),
                    Trial.status.in_(FINAL_STATUSES),
                )
            ).all()
        for trial_id in missing:
            self.log_trial(trial_id)
        return len(missing)


def start_from_template(uri: str) -> None:
    """A new SQLite MLflow store starts as a copy of an empty store that MLflow migrated.

    MLflow makes a new SQLite store by running each of its schema migrations: a second of CPU,
    as much as the rest of a run's start-up (docs/performance.md). For one MLflow version the
    migrated empty store is always the same file, so it is made once (`empty_store`) and copied;
    MLflow then finds its tables at the current revision and adds its default experiment, with
    this store's artifact root, as it does on a store it migrated itself. Another kind of
    store, a file that exists, or a folder that does not: MLflow's own path."""
    url = make_url(uri) if uri.startswith("sqlite:///") else None
    database = url.database if url is not None and not url.query else None
    path = Path(database) if database and database != ":memory:" else None
    if path is None or path.exists() or not path.parent.is_dir():
        return
    template = empty_store()
    if template is None:
        return
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        shutil.copyfile(template, partial)
        os.link(partial, path)  # atomic, and never over a store another runner just made
    except FileExistsError:
        pass
    finally:
        partial.unlink(missing_ok=True)


def empty_store() -> Path | None:
    """The empty SQLite store of this MLflow version, migrated by MLflow's own
    `_initialize_tables` (its tables at the current revision, no experiment), kept in the
    cache; None if this MLflow has no such function."""
    import mlflow
    from mlflow.store.db import utils

    initialize = getattr(utils, "_initialize_tables", None)
    if initialize is None:
        return None
    template = cache_dir() / "mlflow" / f"empty-store-{mlflow.__version__}.db"
    if not template.exists():
        template.parent.mkdir(parents=True, exist_ok=True)
        partial = template.with_name(f".{template.name}.{os.getpid()}.partial")
        engine = create_engine(f"sqlite:///{partial}")
        try:
            initialize(engine)
        finally:
            engine.dispose()
        os.replace(partial, template)
    return template
