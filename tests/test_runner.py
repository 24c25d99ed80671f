"""The runner: statuses, resume after kill -9, claims, determinism, databases, MLflow."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from harness.runner.trial import run_trial
from harness.spec import load_suite
from harness.spec.plan import plan_suite
from harness.store.models import MetricPoint, Result, Trial
from tests.factories import count, invoke, trials_by_key

pytestmark = pytest.mark.slow  # real trials, subprocesses or the app


def test_same_trial_twice_gives_identical_metrics_and_another_seed_differs(
    tiny_suite: Path,
) -> None:
    trials = [t for t in plan_suite(load_suite(tiny_suite)) if t.method == "pre-ln"]
    seed0, seed1 = sorted(trials, key=lambda t: t.seed)
    first, again, other = run_trial(seed0.config), run_trial(seed0.config), run_trial(seed1.config)
    assert first.status == again.status == other.status == "done"
    assert first.final["val_loss"] == again.final["val_loss"]
    assert [p.metrics for p in first.series] == [p.metrics for p in again.series]
    assert first.final["val_loss"] != other.final["val_loss"]


def test_statuses_diverged_timeout_failed_and_retry(write_suite: Any, tmp_path: Path) -> None:
    methods = """
pre-ln: {}
absurd-lr: {optimizer: {lr: 1000.0}, train: {grad_clip: null}}
too-slow: {time_limit_s: 1, train: {steps: 100000, eval_every: 100000}}
explodes: {optimizer: {name: boom}}
"""
    suite = write_suite(tmp_path, methods, extra="plugins: [tests.plugins.boom]\n")
    # one seed: each status and its retry are a trial's own
    suite.write_text(suite.read_text().replace("seeds: [0, 1]", "seeds: [0]"))
    db = f"sqlite:///{tmp_path / 'statuses.db'}"
    done = invoke("run", str(suite), "--db", db, "--no-mlflow", "--workers", "2")
    assert done.exit_code == 1, done.output
    stored = trials_by_key(db)
    by_method = {}
    for trial in stored.values():
        by_method.setdefault(trial.method, set()).add(trial.status)
    assert by_method == {
        "pre-ln": {"done"},
        "absurd-lr": {"diverged"},
        "too-slow": {"timeout"},
        "explodes": {"failed"},
    }
    for trial in stored.values():
        if trial.method == "absurd-lr":
            assert trial.failed_step is not None and 1 <= trial.failed_step <= 20
        if trial.method == "explodes":
            assert "Traceback" in trial.error and "boom: this optimizer always fails" in trial.error
        if trial.method == "too-slow":
            assert "time limit" in trial.error
    ranked = invoke("rank", str(suite), "--db", db, "--format", "json")
    assert ranked.exit_code == 0 and '"method": "explodes"' in ranked.stdout

    retried = invoke("run", str(suite), "--db", db, "--no-mlflow", "--retry-failed")
    assert retried.exit_code == 1, retried.output
    attempts = {(t.method, t.seed): t.attempts for t in trials_by_key(db).values()}
    for (method, _seed), n in attempts.items():
        assert n == (2 if method in ("too-slow", "explodes") else 1), (method, n)


def wait_for_one_done_and_one_running(url: str, timeout_s: float = 240) -> None:
    """Wait until a trial has finished and the next is claimed, so a kill lands inside a trial."""
    engine = create_engine(url)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with Session(engine) as session:
                statuses = list(session.scalars(select(Trial.status)))
            if "done" in statuses and "running" in statuses:
                return
        except Exception:  # the table may not exist yet
            pass
        time.sleep(0.2)
    raise AssertionError("the runner finished no trial and started the next in time")


def test_kill_9_then_rerun_loses_nothing_and_duplicates_nothing(
    write_suite: Any, tmp_path: Path
) -> None:
    suite = write_suite(
        tmp_path, "pre-ln: {}\npost-ln: {norm: {placement: post}}", steps=150, eval_every=50
    )
    db = f"sqlite:///{tmp_path / 'kill.db'}"
    command = [sys.executable, "-m", "harness", "run", str(suite), "--db", db, "--no-mlflow"]
    runner = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_one_done_and_one_running(db)
    runner.send_signal(signal.SIGKILL)
    runner.wait()
    before = trials_by_key(db)
    assert any(t.status == "running" for t in before.values())

    rerun = invoke("run", str(suite), "--db", db, "--no-mlflow")
    assert rerun.exit_code == 0, rerun.output
    planned = {t.key for t in plan_suite(load_suite(suite))}
    after = trials_by_key(db)
    assert set(after) == planned
    assert all(t.status == "done" for t in after.values())
    for key, trial in after.items():
        finished_before = before.get(key) is not None and before[key].status == "done"
        assert trial.attempts == (1 if finished_before else 1 + (key in before))
        assert count(db, MetricPoint, trial.id) == 3 * len(
            {"val_loss", "val_ppl", "bits_per_byte", "train_loss"}
        )
        assert result_names(db, trial.id) == {
            "val_loss",
            "val_ppl",
            "bits_per_byte",
            "test_loss",
            "test_ppl",
            "test_bits_per_byte",
            "train_loss",
            "tokens_per_s",
            "params",
            "peak_memory_bytes",
            "flops_per_token",
            "mfu",
            "devices",
        }


def result_names(url: str, trial_id: int) -> set[str]:
    with Session(create_engine(url)) as session:
        return set(session.scalars(select(Result.name).where(Result.trial_id == trial_id)))


def test_two_runners_on_one_database_never_run_a_trial_twice(
    write_suite: Any, tmp_path: Path
) -> None:
    suite = write_suite(
        tmp_path, "pre-ln: {}\npost-ln: {norm: {placement: post}}\nrms: {norm: {type: rmsnorm}}"
    )
    db = f"sqlite:///{tmp_path / 'two.db'}"
    assert invoke("db", "upgrade", "--db", db).exit_code == 0  # before the drivers race
    command = [sys.executable, "-m", "harness", "run", str(suite), "--db", db, "--no-mlflow"]
    runners = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [runner.communicate(timeout=600)[0] for runner in runners]
    assert [runner.returncode for runner in runners] == [0, 0]
    stored = trials_by_key(db)
    assert len(stored) == 6
    assert all(t.status == "done" and t.attempts == 1 for t in stored.values())
    ran = sum(output.count("    done ") for output in outputs)
    assert ran == 6, outputs


def test_results_land_in_postgresql_and_mlflow_and_a_finished_suite_starts_no_trial(
    tiny_suite: Path, postgres_url: str, tmp_path: Path
) -> None:
    from mlflow.tracking import MlflowClient

    done = invoke("run", str(tiny_suite), "--db", postgres_url)
    assert done.exit_code == 0, done.output
    stored = trials_by_key(postgres_url)
    assert len(stored) == 4 and all(t.status == "done" for t in stored.values())
    trial = next(iter(stored.values()))
    assert count(postgres_url, MetricPoint, trial.id) == 2 * 4
    assert trial.environment["torch_version"].startswith("2.13")

    client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
    experiment = client.get_experiment_by_name("tiny")
    runs = client.search_runs([experiment.experiment_id])
    assert sorted(r.data.tags["trial_key"] for r in runs) == sorted(stored)
    assert {r.info.run_id for r in runs} == {t.mlflow_run_id for t in stored.values()}
    history = client.get_metric_history(trial.mlflow_run_id, "val_loss")
    assert [m.step for m in history] == [10, 20]
    assert [m.value for m in history] == [
        p.value for p in sorted(series(postgres_url, trial.id, "val_loss"), key=lambda p: p.step)
    ]
    assert runs[0].data.params["optimizer.name"] == "adamw"

    first = {k: (t.attempts, t.ended_at) for k, t in stored.items()}
    again = invoke("run", str(tiny_suite), "--db", postgres_url, "--no-mlflow")
    assert again.exit_code == 0, again.output
    assert "4 trials, 4 stored, 0 to run" in again.stdout
    assert {k: (t.attempts, t.ended_at) for k, t in trials_by_key(postgres_url).items()} == first


def series(url: str, trial_id: int, name: str) -> list[MetricPoint]:
    with Session(create_engine(url)) as session:
        return list(
            session.scalars(
                select(MetricPoint).where(
                    MetricPoint.trial_id == trial_id, MetricPoint.name == name
                )
            )
        )
