"""Records shared by every layer: a planned trial, and what a trial reports (statuses and
their rules: `harness.core.Status`).

They sit below the runner, the store, the tracking and the ranking so that each of those can
use them without importing another (imports flow one way; see tests/test_layers.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.core import Status, point_label

if TYPE_CHECKING:
    from harness.spec.recipe import TrialRecipe

DONE = Status.DONE
ACTIVE_STATUSES = tuple(status for status in Status if status.active)
"""Claimed or not yet run: a runner may (re)start these (`Status.active`)."""
FINAL_STATUSES = tuple(status for status in Status if status.final)
"""A trial with one of these has a stored result (`Status.final`), for SQL `IN` clauses."""
FAILED_STATUSES = tuple(status for status in Status if status.retried)
"""No valid result: `--retry-failed` reruns these (`Status.retried`)."""


@dataclass(frozen=True)
class PlannedTrial:
    """One trial of a suite: (method after sweep expansion, model, task, seed) and its recipe."""

    key: str
    suite: str
    method: str
    model: str
    task: str
    seed: int
    sweep: dict[str, Any]
    recipe: TrialRecipe

    @property
    def config(self) -> dict[str, Any]:
        """The trial's config, as it is stored and logged (`TrialRecipe.config`): written whole,
        never read key by key (read `recipe`)."""
        return self.recipe.config

    @property
    def label(self) -> str:
        return f"{point_label(self.method, self.sweep)}/{self.model}/{self.task}/s{self.seed}"


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
    resumes: int = 0
    """How many times the trial resumed from a checkpoint (`harness.runner.checkpoint`)."""
    recomputed_steps: int = 0
    """Steps run again after its interruptions (those past the checkpoint it resumed from)."""
