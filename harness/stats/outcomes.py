"""Trial outcomes as numbers: a metric's value of a trial, which seeds take part in comparisons,
the sweep-point selection that comes before any statistic, and the method x seed matrix.

Tuning (`rank.tuning`):

- `per_method` (default): per (method, model, task), ONE sweep point is chosen, the one with the
  best mean over seeds of the tuning metric (`rank.tune_metric`), and every seed of that point is
  reported. A diverged seed is infinitely bad, so a point with fewer diverged seeds always wins
  (a crash or a timeout is not the method's fault and does not count, `Status.loses`); among
  points with as many, the better mean over the finished seeds wins; ties keep the first point.
  In a suite with sequential seeds the point is chosen on the initial seeds only (`tuned_on`),
  once, at the first look: later seeds run the chosen point alone (`harness.service.rounds`),
  so a point's later seeds never change which point is reported.
- `per_seed`: per (method, model, task, seed), the point with the best value of the tuning
  metric. Optimistic: with the reported metric as the tuning metric, a method with more sweep
  points gains from noise alone.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from harness.core import (
    CellKey,
    Direction,
    SeedKey,
    Status,
    TrialOutcome,
    cell_of,
    point_label,
    seed_key,
)
from harness.core.status import FAILURE_ORDER


def metric_value(outcome: TrialOutcome, metric: str) -> float | None:
    """The finite value of `metric` of a done trial, else None (the seed counts as failed)."""
    value = outcome.metrics.get(metric) if outcome.status == Status.DONE else None
    if value is None or not math.isfinite(value):
        return None
    return float(value)


def failure_label(outcome: TrialOutcome) -> Status:
    """Why a seed without a value of the metric (`metric_value` None) has none: its status, or
    `diverged` for a done trial (it loses, as a diverged seed does)."""
    status = Status(outcome.status)
    return status if status in FAILURE_ORDER and status is not Status.DONE else Status.DIVERGED


COMPARED = frozenset(status for status in Status if status is Status.DONE or status.loses)
"""Statuses whose seeds take part in comparisons with or without a value."""


def counts_in_comparisons(outcome: TrialOutcome, value: float | None) -> bool:
    """The seed takes part in comparisons: it has a value (`value`, its `metric_value`), or its
    status loses (`Status.loses`; a done trial without the metric loses too). A seed that does
    not is left out, as if absent."""
    return value is not None or outcome.status in COMPARED


def select_tuned(
    outcomes: Iterable[TrialOutcome],
    metric: str,
    direction: Direction,
    tuning: str = "per_method",
    tuned_on: int | None = None,
) -> list[TrialOutcome]:
    """The outcomes of the tuned sweep points (see the module doc), in input order; with
    `tuned_on`, `per_method` points are chosen on seeds 0 .. tuned_on - 1 alone."""
    outcomes = list(outcomes)
    if tuning == "per_seed":
        return _best_per_seed(outcomes, metric, direction)
    if not swept(outcomes):
        return outcomes  # one point per method: every point is chosen
    points: dict[CellKey, dict[str, list[TrialOutcome]]] = {}
    labels = [point_label(o.method, o.sweep) for o in outcomes]
    for outcome, label in zip(outcomes, labels, strict=True):
        points.setdefault(cell_of(outcome), {}).setdefault(label, []).append(outcome)
    if all(len(by_point) == 1 for by_point in points.values()):
        return outcomes  # no sweep: every point is chosen
    chosen = {
        cell: min(
            by_point.items(),
            key=lambda item: _point_key(
                [o for o in item[1] if tuned_on is None or o.seed < tuned_on], metric, direction
            ),
        )[0]
        for cell, by_point in points.items()
    }
    return [o for o, label in zip(outcomes, labels, strict=True) if label == chosen[cell_of(o)]]


def _point_key(seeds: list[TrialOutcome], metric: str, direction: Direction) -> tuple[int, float]:
    """Sort key of a sweep point: fewer seeds that lose (diverged; not a crash or a timeout),
    then the better mean (min() keeps the first of equal keys)."""
    each = [(o, metric_value(o, metric)) for o in seeds]
    values = [v for _, v in each if v is not None]
    losing = sum(counts_in_comparisons(o, v) for o, v in each) - len(values)
    if not values:
        return (losing, math.inf)
    mean = sum(values) / len(values)
    return (losing, direction.sort_key(mean))


def _best_per_seed(
    outcomes: list[TrialOutcome], metric: str, direction: Direction
) -> list[TrialOutcome]:
    best: dict[SeedKey, tuple[TrialOutcome, float | None]] = {}
    for outcome in outcomes:
        key = seed_key(outcome)
        value = metric_value(outcome, metric)
        kept = best.get(key)
        if kept is None or (
            value is not None and (kept[1] is None or direction.better(value, kept[1]))
        ):
            best[key] = (outcome, value)
    return [outcome for outcome, _ in best.values()]


def swept(outcomes: Iterable[TrialOutcome]) -> bool:
    """Any outcome is a sweep point (without, each method is a single point)."""
    return any(outcome.sweep for outcome in outcomes)


@dataclass(frozen=True)
class SeedMatrix:
    """The outcomes of one (task, model) as method x seed matrices of a metric."""

    methods: list[str]
    """Sorted; the rows."""
    seeds: list[int]
    """Sorted; the columns."""
    values: np.ndarray
    """Finite values; NaN where absent or failed."""
    present: np.ndarray
    """bool: the seed takes part in comparisons (`counts_in_comparisons`)."""
    excluded: np.ndarray
    """bool: the seed crashed or timed out (left out, not present)."""
    at: tuple[np.ndarray, np.ndarray]
    """The row and column of each outcome, in input order."""

    @property
    def failed(self) -> np.ndarray:
        """bool: the seed takes part in comparisons without a value (it lost)."""
        return np.asarray(self.present & np.isnan(self.values), dtype=bool)


def seed_matrix(outcomes: list[TrialOutcome], metric: str) -> SeedMatrix:
    """The outcomes (one per method and seed) as method x seed matrices of `metric`."""
    methods = sorted({o.method for o in outcomes})
    seeds = sorted({o.seed for o in outcomes})
    row, col = {m: i for i, m in enumerate(methods)}, {s: j for j, s in enumerate(seeds)}
    found = [metric_value(outcome, metric) for outcome in outcomes]
    counted = [counts_in_comparisons(o, v) for o, v in zip(outcomes, found, strict=True)]
    at = (
        np.array([row[o.method] for o in outcomes], dtype=int),
        np.array([col[o.seed] for o in outcomes], dtype=int),
    )
    shape = (len(methods), len(seeds))
    values = np.full(shape, np.nan)
    present, excluded = np.zeros(shape, dtype=bool), np.zeros(shape, dtype=bool)
    values[at] = [np.nan if value is None else value for value in found]
    present[at], excluded[at] = counted, np.logical_not(counted)
    return SeedMatrix(methods, seeds, values, present, excluded, at)
