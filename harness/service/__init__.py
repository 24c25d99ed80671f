"""The application layer: what a command does with a suite, between the libraries below it
(spec, runner, store, tracking, ranking) and the interfaces above it (nightly, CLI).

- `run`: `run_suite`, the one path that plans, claims, executes and stores a suite's trials.
"""

from harness.service.run import (
    FixedDesign,
    InvocationRecord,
    Round,
    RoundPolicy,
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
    "SuiteRunResult",
    "Tracker",
    "run_suite",
]
