"""The application layer: what a command does with a suite, between the libraries below it
(spec, runner, store, tracking, ranking) and the interfaces above it (nightly, CLI).

- `run`: `run_suite`, the one path that plans, claims, executes and stores a suite's trials;
- `rounds`: the round policies (which trials each round runs; sequential seeds' looks), pure.
"""

from harness.service.rounds import FixedDesign, Round, RoundPolicy, SequentialSeeds
from harness.service.run import (
    InvocationRecord,
    RunOptions,
    RunPlan,
    RunRecord,
    SuiteRunResult,
    Tracker,
    run_suite,
)

__all__ = [
    "FixedDesign",
    "InvocationRecord",
    "Round",
    "RoundPolicy",
    "RunOptions",
    "RunPlan",
    "RunRecord",
    "SequentialSeeds",
    "SuiteRunResult",
    "Tracker",
    "run_suite",
]
