"""Trial outcomes, and the sweep-point selection that comes before any statistic.

Tuning (`rank.tuning`):

- `per_method` (default): per (method, model, task), ONE sweep point is chosen, the one with the
  best mean over seeds of the tuning metric (`rank.tune_metric`), and every seed of that point is
  reported. A diverged seed is infinitely bad, so a point with fewer diverged seeds always wins
  (a crash or a timeout is not the method's fault and does not count); among points with as
  many, the better mean over the finished seeds wins; ties keep the first point.
- `per_seed`: per (method, model, task, seed), the point with the best value of the tuning
  metric. Optimistic: with the reported metric as the tuning metric, a method with more sweep
  points gains from noise alone.

Time and steps to target follow AlgoPerf's study/trial rule (Dahl et al., 2023, "Benchmarking
Neural Network Training Algorithms"): per seed (study), the fastest sweep point (trial) that
reaches the target, whatever point the tuning picked.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, NamedTuple

from harness.records import FAILED_STATUSES

Direction = Literal["min", "max"]
Tuning = Literal["per_method", "per_seed"]

DONE = "done"
DIVERGED = "diverged"
"""A seed whose training diverged (or ended without a finite metric): it loses every comparison."""
EXCLUDED_LABELS: tuple[str, ...] = FAILED_STATUSES
"""Infrastructure failures (a crash, a time limit): never counted as a loss. `layerbench run
--retry-failed` runs them again; until then a comparison uses the seeds both methods finished and
shows how many it excluded."""


class EvalPoint(NamedTuple):
    """A trial's metric at one evaluation."""

    step: int
    train_time_s: float
    value: float | None


@dataclass(frozen=True)
class Target:
    """A value of a metric to reach (`rank.target`): one value, or one per task (AlgoPerf sets
    one target per workload)."""

    metric: str
    value: float | Mapping[str, float]

    def value_for(self, task: str) -> float | None:
        """The target of `task`; None when a per-task target names no value for it."""
        if isinstance(self.value, Mapping):
            return self.value.get(task)
        return self.value

    def describe(self) -> str:
        if isinstance(self.value, Mapping):
            values = ", ".join(f"{task} {value:g}" for task, value in self.value.items())
            return f"{self.metric} = {values}"
        return f"{self.metric} = {self.value:g}"


@dataclass(frozen=True)
class TrialOutcome:
    """The final result of one trial."""

    method: str
    model: str
    task: str
    seed: int
    status: str
    metrics: Mapping[str, float]
    sweep: Mapping[str, Any] = field(default_factory=dict)
    key: str = ""
    series: Sequence[EvalPoint] = ()
    """The target metric at each evaluation (empty when there is no target)."""


Cell = tuple[str, str, str]
"""(method, model, task)."""


def cell_of(outcome: TrialOutcome) -> Cell:
    return (outcome.method, outcome.model, outcome.task)


def metric_value(outcome: TrialOutcome, metric: str) -> float | None:
    """The finite value of `metric` of a done trial, else None (the seed counts as failed)."""
    value = outcome.metrics.get(metric) if outcome.status == DONE else None
    if value is None or not math.isfinite(value):
        return None
    return float(value)


def failure_label(outcome: TrialOutcome, metric: str) -> str | None:
    """Why the seed has no value: its status ("diverged", "failed", "timeout"); for a done
    trial, "diverged" when the metric is not finite, "failed" when it is missing."""
    if metric_value(outcome, metric) is not None:
        return None
    if outcome.status == DONE:
        return "failed" if outcome.metrics.get(metric) is None else DIVERGED
    return outcome.status if outcome.status in EXCLUDED_LABELS else DIVERGED


def is_excluded(outcome: TrialOutcome, metric: str) -> bool:
    """Whether the seed failed for a reason outside the method (`EXCLUDED_LABELS`)."""
    return failure_label(outcome, metric) in EXCLUDED_LABELS


def better(a: float, b: float, direction: Direction) -> bool:
    return a < b if direction == "min" else a > b


def point_label(method: str, sweep: Mapping[str, Any]) -> str:
    """A sweep point's name: `method[field=value,...]`, the method alone without a sweep."""
    point = ",".join(f"{name}={value}" for name, value in sweep.items())
    return f"{method}[{point}]" if point else method


def each_point(outcomes: Iterable[TrialOutcome]) -> list[TrialOutcome]:
    """The outcomes with every sweep point named as a method of its own."""
    return [replace(o, method=point_label(o.method, o.sweep)) for o in outcomes]


def select_tuned(
    outcomes: Iterable[TrialOutcome],
    metric: str,
    direction: Direction,
    tuning: Tuning = "per_method",
) -> list[TrialOutcome]:
    """The outcomes of the tuned sweep points (see the module doc), in input order."""
    outcomes = list(outcomes)
    if tuning == "per_seed":
        return _best_per_seed(outcomes, metric, direction)
    points: dict[Cell, dict[str, list[TrialOutcome]]] = {}
    for outcome in outcomes:
        label = point_label(outcome.method, outcome.sweep)
        points.setdefault(cell_of(outcome), {}).setdefault(label, []).append(outcome)
    chosen = {
        cell: min(by_point.items(), key=lambda item: _point_key(item[1], metric, direction))[0]
        for cell, by_point in points.items()
    }
    return [o for o in outcomes if point_label(o.method, o.sweep) == chosen[cell_of(o)]]


def _point_key(seeds: list[TrialOutcome], metric: str, direction: Direction) -> tuple[int, float]:
    """Sort key of a sweep point: fewer diverged seeds (an excluded one does not count), then
    the better mean (min() keeps the first of equal keys)."""
    values = [v for o in seeds if (v := metric_value(o, metric)) is not None]
    diverged = sum(failure_label(o, metric) == DIVERGED for o in seeds)
    if not values:
        return (diverged, math.inf)
    mean = sum(values) / len(values)
    return (diverged, mean if direction == "min" else -mean)


def _best_per_seed(
    outcomes: list[TrialOutcome], metric: str, direction: Direction
) -> list[TrialOutcome]:
    best: dict[tuple[str, str, str, int], tuple[TrialOutcome, float | None]] = {}
    for outcome in outcomes:
        key = (*cell_of(outcome), outcome.seed)
        value = metric_value(outcome, metric)
        kept = best.get(key)
        if kept is None or (
            value is not None and (kept[1] is None or better(value, kept[1], direction))
        ):
            best[key] = (outcome, value)
    return [outcome for outcome, _ in best.values()]


def sweep_sizes(outcomes: Iterable[TrialOutcome]) -> dict[Cell, int]:
    """How many sweep points each (method, model, task) has."""
    points: dict[Cell, set[str]] = {}
    for outcome in outcomes:
        points.setdefault(cell_of(outcome), set()).add(point_label("", outcome.sweep))
    return {cell: len(labels) for cell, labels in points.items()}


def target_hit(outcome: TrialOutcome, value: float, direction: Direction) -> EvalPoint | None:
    """The first evaluation at which the outcome's series reaches `value`, if any."""
    for step, train_time_s, observed in outcome.series:
        if observed is None or not math.isfinite(observed):
            continue
        if not better(value, observed, direction):
            return EvalPoint(step, train_time_s, observed)
    return None


def fastest_hits(
    outcomes: Iterable[TrialOutcome], target: Target, direction: Direction
) -> dict[tuple[str, str, str, int], tuple[float, float]]:
    """Per (method, model, task, seed): the fewest steps and the least train time to the target
    over all its sweep points (inf when no point reaches it)."""
    fastest: dict[tuple[str, str, str, int], tuple[float, float]] = {}
    for outcome in outcomes:
        key = (*cell_of(outcome), outcome.seed)
        steps, time = fastest.get(key, (math.inf, math.inf))
        value = target.value_for(outcome.task)
        hit = target_hit(outcome, value, direction) if value is not None else None
        if hit is not None:
            steps, time = min(steps, hit.step), min(time, hit.train_time_s)
        fastest[key] = (steps, time)
    return fastest
