"""What every execution backend shares: the `Executor` protocol the application's `run_suite`
calls, the ledger and progress it is given, claiming and recording through the ledger, and the
lease and deadline of each trial in flight.

A backend (local processes, Ray, Slurm...) is a callable `Executor`: it claims each trial
through the ledger before starting it (`claim_next`), renews the claims of the trials in flight
(`Lease`, `renew_leases`), ends a trial that outlives its time limit plus `KILL_GRACE_S` as
`timeout`, stores each result the moment it arrives (`record`) and, when `stop` is set, kills
what runs and releases those claims.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from harness.records import PlannedTrial, TrialResult
from harness.runner.checkpoint_paths import discard_checkpoints
from harness.utils import startup

HEARTBEAT_EVERY_S = 10.0
KILL_GRACE_S = 60.0
TIMEOUT_ERROR = "killed: no result within the time limit plus grace"  # at the deadline


class BackendUnavailableError(RuntimeError):
    """A backend cannot run here (its library is missing, its cluster does not answer)."""


class BackendOptionError(ValueError):
    """A backend option of the command line is malformed."""


@dataclass(frozen=True)
class BackendOptions:
    """The command line's backend options (`layerbench run`, `nightly`, `schedule`): each
    backend's factory (`harness.registry.BACKENDS`) reads its own and ignores the rest."""

    workers: int = 1
    """Trial processes at once on this machine (local)."""
    ray_address: str | None = None
    ray_retries: int = 1
    slurm: dict[str, Any] = field(default_factory=dict)
    """`slurm:` suite fields (partition, account, qos, array_parallelism, folder) set on the
    command line; they override the suite's."""
    sbatch: tuple[str, ...] = ()
    """Other sbatch flags as KEY=VALUE, over the suite's `slurm.sbatch`."""


class Ledger(Protocol):
    """Where trials are claimed and results recorded (the store's `StoreLedger` implements it)."""

    def claim(self, trial: PlannedTrial) -> bool: ...

    def heartbeat(self, trial: PlannedTrial) -> None: ...

    def finish(self, trial: PlannedTrial, result: TrialResult) -> None: ...

    def release(self, trial: PlannedTrial) -> None: ...


class RetryLedger(Ledger, Protocol):
    """A ledger that also counts a backend's own retry of a trial (Ray restarting a task)."""

    def add_attempt(self, trial: PlannedTrial) -> None: ...


class Progress(Protocol):
    def started(self, trial: PlannedTrial) -> None: ...

    def step(self, trial: PlannedTrial, step: int, total: int, loss: float) -> None: ...

    def finished(self, trial: PlannedTrial, result: TrialResult | None) -> None: ...


class SilentProgress:
    def started(self, trial: PlannedTrial) -> None:
        pass

    def step(self, trial: PlannedTrial, step: int, total: int, loss: float) -> None:
        pass

    def finished(self, trial: PlannedTrial, result: TrialResult | None) -> None:
        pass


@runtime_checkable
class Prepares(Protocol):
    """An executor with something to start before the run's bookkeeping (the local backend's
    warm fork server): `run_suite` calls `prepare` with the first round's trials."""

    def prepare(self, trials: Sequence[PlannedTrial]) -> None: ...


class Executor(Protocol):
    """A backend: runs the trials the ledger lets it claim, returns the results by trial key."""

    def __call__(
        self,
        trials: Sequence[PlannedTrial],
        ledger: RetryLedger,
        progress: Progress,
        stop: threading.Event | None,
    ) -> dict[str, TrialResult]: ...


def claim_next(
    pending: deque[PlannedTrial],
    ledger: Ledger,
    progress: Progress,
    ready: Callable[[PlannedTrial], bool] | None = None,
) -> PlannedTrial | None:
    """The next pending trial this runner claims (every backend claims through the ledger);
    None too while `ready` says the next one cannot start yet (the local runner's GPUs)."""
    while pending and (ready is None or ready(pending[0])):
        trial = pending.popleft()
        if ledger.claim(trial):
            return trial
        progress.finished(trial, None)
    return None


def record(
    trial: PlannedTrial,
    result: TrialResult,
    ledger: Ledger,
    progress: Progress,
    results: dict[str, TrialResult],
) -> None:
    """Store a finished trial (SQL, then MLflow through the ledger) the way every backend does."""
    ledger.finish(trial, result)
    discard_checkpoints(trial, result)
    results[trial.key] = result
    progress.finished(trial, result)


def deadline_of(trial: PlannedTrial) -> float:
    """When (time.monotonic) a trial starting now has outlived its time limit plus grace."""
    return time.monotonic() + trial.recipe.time_limit_s + KILL_GRACE_S


@dataclass
class Lease:
    """A claimed trial in flight: when it must end, and when its claim was last renewed."""

    trial: PlannedTrial
    deadline: float | None = None
    """None until a worker starts it: time spent queued does not count."""
    last_heartbeat: float = field(default_factory=time.monotonic)

    def start(self) -> None:
        self.deadline = deadline_of(self.trial)

    def overdue(self, now: float) -> bool:
        return self.deadline is not None and now > self.deadline


def renew_leases(leases: Iterable[Lease], ledger: Ledger) -> None:
    """Heartbeat every trial in flight, reporting or silent, so its claim's lease never lapses
    while this runner is alive."""
    for lease in leases:
        if time.monotonic() - lease.last_heartbeat > HEARTBEAT_EVERY_S:
            ledger.heartbeat(lease.trial)
            lease.last_heartbeat = time.monotonic()


def run_in_worker(config: dict[str, Any], key: str | None = None) -> TrialResult:
    """A trial of a config from `worker_config` in a cluster worker's fresh process (a Slurm
    job): its imports without the cyclic garbage collector (`harness.utils.startup`),
    third-party output quieted (`run_trial` sets the trial's threads, as on every backend)."""
    os.environ.setdefault("TQDM_DISABLE", "1")
    with startup():
        from harness.runner.process import quiet_libraries
        from harness.runner.trial import run_trial

        quiet_libraries()
    return run_trial(config, key=key)


def worker_config(trial: PlannedTrial) -> dict[str, Any]:
    """The config a cluster worker is sent for a trial (`TrialRecipe.on_worker`)."""
    return trial.recipe.on_worker().config
