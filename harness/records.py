"""Records shared by every layer: trial statuses, a planned trial, and what a trial reports.

They sit below the runner, the store, the tracking and the ranking so that each of those can
use them without importing another (imports flow one way; see tests/test_layers.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["pending", "running", "done", "diverged", "failed", "timeout"]
DONE: Status = "done"
ACTIVE_STATUSES: tuple[Status, ...] = ("pending", "running")
"""Claimed or not yet run: a runner may (re)start these."""
FINAL_STATUSES: tuple[Status, ...] = ("done", "diverged", "failed", "timeout")
"""A trial with one of these has a stored result and is never recomputed unless asked."""
FAILED_STATUSES: tuple[Status, ...] = ("failed", "timeout")
"""No valid result: `--retry-failed` reruns these and the command exits with code 1."""


@dataclass(frozen=True)
class PlannedTrial:
    """One trial of a suite: (method after sweep expansion, model, task, seed) and its config."""

    key: str
    suite: str
    method: str
    model: str
    task: str
    seed: int
    sweep: dict[str, Any]
    config: dict[str, Any]

    @property
    def label(self) -> str:
        point = ",".join(f"{k}={v}" for k, v in self.sweep.items())
        return f"{self.method}{f'[{point}]' if point else ''}/{self.model}/{self.task}/s{self.seed}"


@dataclass(frozen=True)
class SeriesPoint:
    """One evaluation: AlgoPerf accounting, train time excludes evaluation."""

    step: int
    tokens: int
    train_time_s: float
    wall_time_s: float
    metrics: dict[str, float]


@dataclass(frozen=True)
class LayerStat:
    step: int
    layer: int
    name: str
    value: float


@dataclass
class TrialResult:
    """Everything a finished trial reports; sent from the trial process to the runner."""

    status: Status
    final: dict[str, float] = field(default_factory=dict)
    series: list[SeriesPoint] = field(default_factory=list)
    layer_stats: list[LayerStat] = field(default_factory=list)
    error: str | None = None
    failed_step: int | None = None
    steps_done: int = 0
    tokens: int = 0
    train_time_s: float = 0.0
    eval_time_s: float = 0.0
    wall_time_s: float = 0.0
    environment: dict[str, Any] = field(default_factory=dict)
    examples: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per-example outcomes of an evaluation-only trial: metric -> example id -> value."""
