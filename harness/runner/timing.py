"""A trial's clock: its train time (optimizer steps only), evaluation time and wall time, and the
throughput they give."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from harness.records import TrialResult


@dataclass
class Clock:
    """Train time (optimizer steps only) and wall time since the trial started."""

    start: float = field(default_factory=time.perf_counter)
    train_s: float = 0.0
    eval_s: float = 0.0

    @property
    def wall_s(self) -> float:
        return time.perf_counter() - self.start


def tokens_per_s(result: TrialResult, clock: Clock) -> float:
    """Training throughput: the tokens trained on per second of train time."""
    return result.tokens / clock.train_s if clock.train_s else 0.0
