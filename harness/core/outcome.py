"""A trial's outcome as the store returns it and the ranking reads it, and the keys naming the
cells, groups and seeds of a suite."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from harness.core.status import Status


class CellKey(NamedTuple):
    """One method on one model and task (all its seeds and sweep points)."""

    method: str
    model: str
    task: str


class SeedKey(NamedTuple):
    """One seed of a cell (one trial after sweep tuning)."""

    method: str
    model: str
    task: str
    seed: int


class GroupKey(NamedTuple):
    """A ranking group: the methods compared on one task and model."""

    task: str
    model: str


def point_label(method: str, sweep: Mapping[str, Any], separator: str = "") -> str:
    """A sweep point's name, `method[field=value,...]` (the method alone without a sweep);
    `separator` goes between the method and the bracket (" " in the ranking's tables)."""
    if not sweep:
        return method
    point = ",".join(f"{name}={value}" for name, value in sweep.items())
    return f"{method}{separator}[{point}]" if point else method


class EvalPoint(NamedTuple):
    """A trial's metric at one evaluation."""

    step: int
    train_time_s: float
    value: float | None


@dataclass(slots=True)
class TrialOutcome:
    """The final result of one trial, as read from the store: treat it as read-only (change a
    copy, `dataclasses.replace`). Not a frozen dataclass: a frozen one's `__init__` sets each
    field through `object.__setattr__`, which doubled the time to build the 100,000 outcomes of
    `benchmarks/leaderboard.py` (0.15-0.3 s of its read + rank)."""

    method: str
    model: str
    task: str
    seed: int
    status: Status
    metrics: Mapping[str, float]
    sweep: Mapping[str, Any] = field(default_factory=dict)
    key: str = ""
    series: Sequence[EvalPoint] = ()
    """The target metric at each evaluation (empty when there is no target)."""
    wall_time_s: float | None = None
    """The trial's wall-clock seconds (one worker process), where stored."""


def cell_of(outcome: TrialOutcome) -> CellKey:
    return CellKey(outcome.method, outcome.model, outcome.task)


def seed_key(outcome: TrialOutcome) -> SeedKey:
    return SeedKey(outcome.method, outcome.model, outcome.task, outcome.seed)
