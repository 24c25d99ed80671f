"""SQLAlchemy 2 models of the results database (SPEC section 7)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import JSON, Boolean, DateTime, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        dict[str, Any]: JSON,
        datetime: DateTime(timezone=True),
    }


class SuiteRun(Base):
    """One invocation of `layerbench run` (or of a nightly) on one suite."""

    __tablename__ = "suite_runs"

    id: Mapped[int] = mapped_column(primary_key=True)
    suite: Mapped[str] = mapped_column(String(200), index=True)
    cadence: Mapped[str] = mapped_column(String(20))
    started_at: Mapped[datetime]
    ended_at: Mapped[datetime | None]
    host: Mapped[str] = mapped_column(String(200))
    git_commit: Mapped[str | None] = mapped_column(String(64))
    n_planned: Mapped[int] = mapped_column(Integer, default=0)
    n_ran: Mapped[int] = mapped_column(Integer, default=0)
    ranking: Mapped[dict[str, Any] | None]  # the suite's baseline and `rank` section
    kind: Mapped[str] = mapped_column(String(20), default="run", server_default="run")
    status: Mapped[str | None] = mapped_column(String(20))  # nightly: running|done|interrupted
    host_class: Mapped[str | None] = mapped_column(String(200), index=True)
    environment: Mapped[dict[str, Any] | None]  # packages, python, CPU, GPU
    trial_keys: Mapped[list[str] | None] = mapped_column(JSON)  # keys of its planned trials


class Trial(Base):
    """A trial, unique by key; claimed, run and finished in place."""

    __tablename__ = "trials"

    id: Mapped[int] = mapped_column(primary_key=True)
    key: Mapped[str] = mapped_column(String(64), unique=True)
    suite: Mapped[str] = mapped_column(String(200), index=True)
    method: Mapped[str] = mapped_column(String(200))
    model: Mapped[str] = mapped_column(String(200))
    task: Mapped[str] = mapped_column(String(200))
    seed: Mapped[int]
    """Also in `config`, which is hashed into `key` and must stay as every stored trial has it;
    this column lets the ranking and the leaderboard read seeds without loading any config JSON
    (`stored_outcomes`: a large board loads quickly; reading it out of the JSON would need each
    dialect's JSON operator)."""
    sweep: Mapped[dict[str, Any]]
    config: Mapped[dict[str, Any]]
    status: Mapped[str] = mapped_column(String(20), index=True)
    error: Mapped[str | None] = mapped_column(Text)
    failed_step: Mapped[int | None]
    steps_done: Mapped[int] = mapped_column(Integer, default=0)
    tokens: Mapped[int] = mapped_column(Integer, default=0)
    train_time_s: Mapped[float | None] = mapped_column(Float)
    eval_time_s: Mapped[float | None] = mapped_column(Float)
    wall_time_s: Mapped[float | None] = mapped_column(Float)
    environment: Mapped[dict[str, Any] | None]
    claimed_by: Mapped[str | None] = mapped_column(String(200))
    heartbeat_at: Mapped[datetime | None]
    started_at: Mapped[datetime | None]
    ended_at: Mapped[datetime | None]
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    resumes: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """Times the trial resumed from a checkpoint (`harness.runner.checkpoint`)."""
    recomputed_steps: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """Steps run again after its interruptions."""
    suite_run_id: Mapped[int | None] = mapped_column(ForeignKey("suite_runs.id"))
    mlflow_run_id: Mapped[str | None] = mapped_column(String(64))


class MetricPoint(Base):
    """A metric at one evaluation: (step, tokens, train time, wall time, value)."""

    __tablename__ = "metric_series"
    __table_args__ = (Index("ix_metric_series_trial_name", "trial_id", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(100))
    step: Mapped[int]
    tokens: Mapped[int]
    train_time_s: Mapped[float] = mapped_column(Float)
    wall_time_s: Mapped[float] = mapped_column(Float)
    value: Mapped[float | None] = mapped_column(Float)


class Result(Base):
    """A final metric of a trial."""

    __tablename__ = "results"

    trial_id: Mapped[int] = mapped_column(
        ForeignKey("trials.id", ondelete="CASCADE"), primary_key=True
    )
    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    value: Mapped[float | None] = mapped_column(Float)


class LayerStatistic(Base):
    """A per-layer diagnostic at one step (SPEC 5.7)."""

    __tablename__ = "layer_stats"
    __table_args__ = (Index("ix_layer_stats_trial", "trial_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id", ondelete="CASCADE"))
    step: Mapped[int]
    layer: Mapped[int]
    name: Mapped[str] = mapped_column(String(100))
    value: Mapped[float | None] = mapped_column(Float)


class ExampleOutcome(Base):
    """A per-example outcome of an evaluation-only trial: 0/1 for an accuracy, bits per byte
    of a window (its bytes under `<metric>:weight`), lm-eval's per-sample values."""

    __tablename__ = "example_outcomes"

    trial_id: Mapped[int] = mapped_column(
        ForeignKey("trials.id", ondelete="CASCADE"), primary_key=True
    )
    metric: Mapped[str] = mapped_column(String(100), primary_key=True)
    example_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    value: Mapped[float | None] = mapped_column(Float)


class Alert(Base):
    """A change `layerbench nightly` found in one (method, model, task, metric) (SPEC 11)."""

    __tablename__ = "alerts"

    id: Mapped[int] = mapped_column(primary_key=True)
    suite_run_id: Mapped[int] = mapped_column(ForeignKey("suite_runs.id", ondelete="CASCADE"))
    suite: Mapped[str] = mapped_column(String(200), index=True)
    method: Mapped[str] = mapped_column(String(200))
    model: Mapped[str] = mapped_column(String(200))
    task: Mapped[str] = mapped_column(String(200))
    metric: Mapped[str] = mapped_column(String(100))
    kind: Mapped[str] = mapped_column(String(20))  # regression|suspected|improvement|status|verdict
    direction: Mapped[str] = mapped_column(String(10))  # worse|better|changed (a verdict)
    old_mean: Mapped[float | None] = mapped_column(Float)
    old_ci_low: Mapped[float | None] = mapped_column(Float)
    old_ci_high: Mapped[float | None] = mapped_column(Float)
    new_mean: Mapped[float | None] = mapped_column(Float)
    new_ci_low: Mapped[float | None] = mapped_column(Float)
    new_ci_high: Mapped[float | None] = mapped_column(Float)
    delta: Mapped[float | None] = mapped_column(Float)
    percent: Mapped[float | None] = mapped_column(Float)
    p_value: Mapped[float | None] = mapped_column(Float)
    z: Mapped[float | None] = mapped_column(Float)
    tolerance: Mapped[float | None] = mapped_column(Float)
    commit_before: Mapped[str | None] = mapped_column(String(64))
    commit_after: Mapped[str | None] = mapped_column(String(64))
    detail: Mapped[dict[str, Any]]  # statuses, streak start, packages changed, window runs
    acknowledged: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime]
