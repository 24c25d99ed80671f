"""`run_suite`: the one path from a suite to its stored results, used by `layerbench run` and by
`layerbench nightly` (issue 25).

A run plans the suite's trials, keeps those `--only` selects, asks the `RunRecord` under which
keys and suite run they are stored (`InvocationRecord`: content-addressed keys, one suite run
per invocation that runs something; the nightly's record: keys derived from its run's id),
leaves out the trials with a stored result (unless `force` or `retry_failed`), backfills and
attaches the MLflow tracker, and hands the rest to an `Executor` (local processes, Ray, Slurm:
`harness.runner.backend`), which claims and stores each trial through the ledger.

Rounds: which trials run is asked of a `RoundPolicy` (`harness.service.rounds`), round after
round, until it returns none. `FixedDesign` (the default for a list of seeds) returns every
planned trial once. `SequentialSeeds` (the default for `seeds: {initial, max, step}`: more seeds
only for the comparisons still undecided) ranks the stored outcomes in its `trials` and returns
the next seeds; `Round` gives it the planned trials, their stored outcomes (read here, with the
final metrics the policy `reads`) and what ran so far.

Layering: this module needs the store and the tracking, which sit above the runner, so it is not
in `harness.runner` but in `harness.service`, a layer between `harness.nightly` and
`harness.console` (pyproject.toml [tool.importlinter]); the backends stay in the runner and
know only the `Ledger` and `Progress` protocols.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Protocol

from sqlalchemy import Engine

from harness.cache import offline_unless_hub_reachable
from harness.core import Status, TrialOutcome
from harness.env import cpu_model
from harness.records import PlannedTrial, TrialResult
from harness.runner.backend import Executor, Prepares, Progress, SilentProgress
from harness.service.rounds import Round, RoundPolicy, default_policy
from harness.spec import Suite
from harness.spec.declaration import RankingDeclaration
from harness.spec.plan import plan_suite, select_trials
from harness.store.db import StoreLedger, suite_run
from harness.store.models import SuiteRun
from harness.store.queries import (
    cpu_kinds,
    recorded_plan,
    stored_outcomes,
    trial_statuses,
    unlogged_count,
)


class Tracker(Protocol):
    """Experiment tracking of stored trials (`harness.tracking.MLflowTracker`)."""

    def backfill(self, suite: str) -> int: ...

    def on_finish(self, trial: PlannedTrial, trial_id: int) -> None: ...


@dataclass(frozen=True)
class RunOptions:
    """Which trials run: `only` (method=a,b / model= / task= / seed=), `force` (rerun stored
    trials), `retry_failed` (rerun failed and timed-out ones)."""

    only: str | None = None
    force: bool = False
    retry_failed: bool = False

    def runnable(self, status: Status | None) -> bool:
        """Does a trial with this stored status (None: never stored) run?"""
        if status is None or status.active or self.force:
            return True
        return self.retry_failed and status.retried


class RunRecord(Protocol):
    """How one invocation on a suite is recorded in the store."""

    def trials(
        self, store: Engine, suite: Suite, planned: list[PlannedTrial]
    ) -> list[PlannedTrial]:
        """The trials as this run stores them (their keys)."""
        ...

    def open(
        self, store: Engine, suite: Suite, planned: list[PlannedTrial], todo: int
    ) -> AbstractContextManager[SuiteRun | None]:
        """The suite run the trials are claimed under (None: nothing runs); its `n_ran` is set
        to the number of trials run before it closes."""
        ...


class InvocationRecord:
    """`layerbench run`: content-addressed keys (a stored trial is reused by any run); a suite
    run is recorded when something runs, or when the planned trials changed (e.g. back to an
    older config), so `rank SUITE-NAME` ranks the current plan."""

    def trials(
        self, store: Engine, suite: Suite, planned: list[PlannedTrial]
    ) -> list[PlannedTrial]:
        return planned

    @contextmanager
    def open(
        self, store: Engine, suite: Suite, planned: list[PlannedTrial], todo: int
    ) -> Iterator[SuiteRun | None]:
        keys = [trial.key for trial in plan_suite(suite)]
        declared = RankingDeclaration.of_suite(suite)
        if not todo and not _plan_changed(store, suite.suite, keys):
            yield None
            return
        with suite_run(store, suite.suite, suite.cadence, len(planned), declared, keys) as run:
            yield run if todo else None


def _plan_changed(store: Engine, suite: str, keys: list[str]) -> bool:
    """Do the suite's planned trials differ from those its latest run recorded?"""
    found = recorded_plan(store, suite)
    return found is None or found[1] != keys


@dataclass(frozen=True)
class RunPlan:
    """What a run is about to do (announced before it starts)."""

    suite: str
    n_trials: int
    """The trials the first round asks for (every selected trial of a fixed design)."""
    n_todo: int
    n_most: int | None = None
    """With sequential seeds: the selected trials up to `max` seeds (later rounds may run)."""
    other_cpus: dict[str, int] = field(default_factory=dict)
    """Stored trials this run reuses that ran on another kind of CPU than this machine's, by
    CPU model (`mixed_cpus_note`)."""

    @property
    def n_stored(self) -> int:
        return self.n_trials - self.n_todo


@dataclass
class SuiteRunResult:
    """What a run did: its trials, the results it produced, and the trials' stored statuses."""

    trials: list[PlannedTrial]
    results: dict[str, TrialResult] = field(default_factory=dict)
    statuses: dict[str, Status] = field(default_factory=dict)
    suite_run_id: int | None = None

    @property
    def failed(self) -> bool:
        """A trial of the run has no valid result (`layerbench run` exits with code 1)."""
        return any(status.retried for status in self.statuses.values())


ProgressDisplay = Callable[[int], AbstractContextManager[Progress]]
"""A progress display over that many trials (the console's `RichProgress`)."""


def _silent(total: int) -> AbstractContextManager[Progress]:
    return nullcontext(SilentProgress())


@dataclass(frozen=True)
class Display:
    """What the run shows: its plan before it starts, and progress over the trials it runs."""

    announce: Callable[[RunPlan], None] = lambda plan: None
    progress: ProgressDisplay = _silent
    look: Callable[[str], None] = lambda text: None
    """Each look of a sequential suite (`harness.service.rounds.Look.lines`)."""


def run_suite(
    suite: Suite,
    *,
    executor: Executor,
    store: Engine,
    tracker: Callable[[], Tracker] | None = None,
    options: RunOptions = RunOptions(),
    record: RunRecord | None = None,
    policy: RoundPolicy | None = None,
    display: Display = Display(),
    stop: threading.Event | None = None,
) -> SuiteRunResult:
    """Run the suite's trials that have no stored result (see the module doc); `tracker` makes
    the tracker, called only when a trial runs or one stored is not logged yet. Raises
    `harness.spec.plan.SelectionError` for a bad `options.only`."""
    record = record or InvocationRecord()
    policy = policy or default_policy(suite, display.look)
    planned = plan_suite(suite)
    selected = select_trials(planned, options.only) if options.only else planned
    trials = record.trials(store, suite, selected)
    outcome = SuiteRunResult(trials)
    asked = policy.trials(Round(0, trials, _stored(store, suite, trials, policy), {}))
    batch = _todo(store, asked, options)
    if batch and isinstance(executor, Prepares):
        executor.prepare(batch)  # e.g. the fork server warms up meanwhile
    others = _other_cpus(store, trials, batch)
    display.announce(RunPlan(suite.suite, len(asked), len(batch), policy.most(trials), others))
    tracking = _tracking(store, suite, tracker, bool(batch))
    with record.open(store, suite, trials, len(batch)) as run:
        if run is not None:
            outcome.suite_run_id = run.id
            on_finish = tracking.on_finish if tracking else None
            ledger = StoreLedger(store, run.id, options.force, options.retry_failed, on_finish)
            _rounds(suite, executor, ledger, policy, batch, outcome, options, display, stop)
            run.n_ran = len(outcome.results)
    outcome.statuses = trial_statuses(store, [t.key for t in trials])
    return outcome


def _rounds(
    suite: Suite,
    executor: Executor,
    ledger: StoreLedger,
    policy: RoundPolicy,
    batch: list[PlannedTrial],
    outcome: SuiteRunResult,
    options: RunOptions,
    display: Display,
    stop: threading.Event | None,
) -> None:
    """Execute round after round until the policy returns no runnable trial (or `stop`)."""
    if any(trial.recipe.kind.pretrained for trial in batch):  # it may reach the hub
        offline_unless_hub_reachable()
    number = 0
    while batch and not (stop is not None and stop.is_set()):
        with display.progress(len(batch)) as progress:
            outcome.results |= executor(batch, ledger, progress, stop)
        number += 1
        stored = _stored(ledger.engine, suite, outcome.trials, policy)
        next_round = Round(number, outcome.trials, stored, outcome.results)
        batch = _todo(ledger.engine, policy.trials(next_round), options)


def _stored(
    store: Engine, suite: Suite, planned: Sequence[PlannedTrial], policy: RoundPolicy
) -> list[TrialOutcome]:
    """The stored outcomes of the planned trials with the final metrics the policy reads (none
    for a policy that reads none)."""
    if policy.reads is None:
        return []
    keys = [t.key for t in planned]
    return stored_outcomes(store, keys, suite=suite.suite, metrics=policy.reads)


def _other_cpus(
    store: Engine, trials: Sequence[PlannedTrial], batch: Sequence[PlannedTrial]
) -> dict[str, int]:
    """The stored CPU trials reused beside the `batch` about to run here that ran on another
    kind of CPU (their numbers can differ from this machine's in the last digits), by model;
    empty when nothing runs."""
    if not batch:
        return {}
    running = {t.key for t in batch}
    kinds = cpu_kinds(store, [t.key for t in trials if t.key not in running])
    return {cpu: n for cpu, n in kinds.items() if cpu != cpu_model()}


def mixed_cpus_note(others: dict[str, int]) -> str:
    """The warning `layerbench run` prints when it reuses trials of another CPU kind."""
    listed = ", ".join(f"{n} on {cpu}" for cpu, n in sorted(others.items()))
    return (
        f"{sum(others.values())} stored trials this run reuses ran on another kind of CPU than "
        f"this machine's ({cpu_model()}): {listed}. The trial key does not include the CPU "
        "kind, and the same trial can differ in the last digits across CPUs (about 1e-5 has "
        "been seen): they are mixed with the trials run here unless `--force` retrains them"
    )


def _todo(store: Engine, batch: Sequence[PlannedTrial], options: RunOptions) -> list[PlannedTrial]:
    statuses = trial_statuses(store, [t.key for t in batch])
    return [t for t in batch if options.runnable(statuses.get(t.key))]


def _tracking(
    store: Engine, suite: Suite, tracker: Callable[[], Tracker] | None, runs: bool
) -> Tracker | None:
    """The tracker, after logging what an earlier run stored but did not log; None without."""
    if tracker is None or not suite.tracking.mlflow:
        return None
    if not runs and not unlogged_count(store, suite.suite):
        return None
    made = tracker()
    made.backfill(suite.suite)
    return made
