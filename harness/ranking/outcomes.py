"""What the ranking adds to trial outcomes: each sweep point as a method, sweep sizes, and the
time and steps to a target. The metric values and the tuning of sweep points are
`harness.stats.outcomes`'.

Time and steps to target follow AlgoPerf's study/trial rule (Dahl et al., 2023, "Benchmarking
Neural Network Training Algorithms"): per seed (study), the fastest sweep point (trial) that
reaches the target, whatever point the tuning picked.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace

from harness.core import (
    CellKey,
    Direction,
    EvalPoint,
    SeedKey,
    TrialOutcome,
    cell_of,
    point_label,
    seed_key,
)
from harness.spec.rank import TargetSpec

Target = TargetSpec
"""A value of a metric to reach (`rank.target`), as the suite declares it."""


def each_point(outcomes: Iterable[TrialOutcome]) -> list[TrialOutcome]:
    """The outcomes with every sweep point named as a method of its own."""
    return [replace(o, method=point_label(o.method, o.sweep)) for o in outcomes]


def sweep_sizes(outcomes: Iterable[TrialOutcome]) -> dict[CellKey, int]:
    """How many sweep points each (method, model, task) has."""
    points: dict[CellKey, set[str]] = {}
    for outcome in outcomes:
        points.setdefault(cell_of(outcome), set()).add(point_label("", outcome.sweep))
    return {cell: len(labels) for cell, labels in points.items()}


def target_hit(outcome: TrialOutcome, value: float, direction: Direction) -> EvalPoint | None:
    """The first evaluation at which the outcome's series reaches `value`, if any."""
    for step, train_time_s, observed in outcome.series:
        if observed is None or not math.isfinite(observed):
            continue
        if not direction.better(value, observed):
            return EvalPoint(step, train_time_s, observed)
    return None


def fastest_hits(
    outcomes: Iterable[TrialOutcome], target: Target, direction: Direction
) -> dict[SeedKey, tuple[float, float]]:
    """Per (method, model, task, seed): the fewest steps and the least train time to the target
    over all its sweep points (inf when no point reaches it)."""
    fastest: dict[SeedKey, tuple[float, float]] = {}
    for outcome in outcomes:
        key = seed_key(outcome)
        steps, time = fastest.get(key, (math.inf, math.inf))
        value = target.value_for(outcome.task)
        hit = target_hit(outcome, value, direction) if value is not None else None
        if hit is not None:
            steps, time = min(steps, hit.step), min(time, hit.train_time_s)
        fastest[key] = (steps, time)
    return fastest
