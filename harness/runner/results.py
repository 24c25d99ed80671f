"""What one trial produces; sent from the trial process to the runner."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["pending", "running", "done", "diverged", "failed", "timeout"]
FINAL_STATUSES: tuple[Status, ...] = ("done", "diverged", "failed", "timeout")
RETRYABLE_STATUSES: tuple[Status, ...] = ("failed", "timeout")


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
    """Everything a finished trial reports."""

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
