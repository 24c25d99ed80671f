"""Whether lower or higher values of a metric are better: the one place that knows."""

from __future__ import annotations

import math
from enum import StrEnum
from typing import TypeVar

N = TypeVar("N")


class Direction(StrEnum):
    """`min`: lower is better; `max`: higher is better (the strings stored and printed)."""

    MIN = "min"
    MAX = "max"

    def better(self, a: float, b: float) -> bool:
        """`a` is strictly better than `b`."""
        return a < b if self is Direction.MIN else a > b

    def gain(self, delta: N) -> N:
        """A difference (a - b), a float or an array, oriented so that positive favours a."""
        return -delta if self is Direction.MIN else delta  # type: ignore[operator]

    def sign(self, delta: float | None) -> int:
        """+1 where the difference (a - b) favours a, -1 where it favours b, 0 if equal/None."""
        if delta is None or delta == 0 or math.isnan(delta):
            return 0
        return 1 if self.gain(delta) > 0 else -1

    def sort_key(self, value: float | None) -> float:
        """Sorting by it puts better values first and undefined ones (None, NaN) last."""
        if value is None or math.isnan(value):
            return math.inf
        return -self.gain(value)

    @property
    def word(self) -> str:
        """'lower' or 'higher' (is better)."""
        return "lower" if self is Direction.MIN else "higher"
