"""The shared vocabulary of every layer (issue 25): trial statuses and their rules, metric
directions, the keys that name cells, groups and seeds, a sweep point's label, and the outcome
of a trial as the store returns it and the ranking reads it.

Torch-free and dependency-free, at the bottom layer (pyproject.toml [tool.importlinter]), so the
runner, the store, the tracking, the ranking, the console and the leaderboard spell each of these
once. A rule about statuses (which are final, which `--retry-failed` reruns, which lose a
comparison...) is a property of `Status`: change it there.
"""

from harness.core.direction import Direction
from harness.core.outcome import (
    CellKey,
    EvalPoint,
    GroupKey,
    SeedKey,
    TrialOutcome,
    cell_of,
    point_label,
    seed_key,
)
from harness.core.status import RunStatus, Status

__all__ = [
    "CellKey",
    "Direction",
    "EvalPoint",
    "GroupKey",
    "RunStatus",
    "SeedKey",
    "Status",
    "TrialOutcome",
    "cell_of",
    "point_label",
    "seed_key",
]
