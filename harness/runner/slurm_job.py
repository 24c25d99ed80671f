"""What runs inside a Slurm job: a trial's run, warned before its job's time limit and requeued
while the trial's time budget lasts (submitit's checkpointing protocol; `harness.runner.
slurm_backend` submits the jobs)."""

from __future__ import annotations

import functools
import logging
import math
import signal
import time
from dataclasses import dataclass, field, replace
from typing import Any

from harness.records import PlannedTrial, TrialResult
from harness.runner.backend import run_in_worker
from harness.spec.schema import SlurmSpec

WARNING_S = 90  # how long before a job's time limit it is warned (submitit's `--signal=USR2@90`)
EARLY_S = 60  # Slurm may send that warning up to a minute before its time (sbatch(1), `--signal`)
MIN_JOB_S = 120  # a one-minute job could be warned before its process handles the signal
log = logging.getLogger(__name__)


def job_seconds(trial: PlannedTrial, slurm: SlurmSpec) -> int:
    """Each job's time limit in seconds, whole minutes, at least MIN_JOB_S: the trial's
    `time_limit_s` plus the grace, or `slurm.job_time_s` where that is shorter (the trial spans
    several jobs)."""
    limit = trial.recipe.time_limit_s + slurm.time_grace_s
    if slurm.job_time_s is not None:
        limit = min(limit, slurm.job_time_s)
    return max(MIN_JOB_S, 60 * math.ceil(limit / 60))


def warning_s(seconds: int) -> int:
    """How long before the end of a job of `seconds` Slurm signals it: WARNING_S, less in a
    short job, so that even a signal EARLY_S early comes 30 s or more after the job started."""
    return min(WARNING_S, seconds - EARLY_S - 30)


MAX_JOBS_PER_TRIAL = 100
"""How many jobs one trial may span (submitit's `max_num_timeout`: requeues at a time limit)."""


@dataclass
class SlurmTrial:
    """A Slurm task: run the trial in this (fresh) process and return its result to the driver.

    It follows submitit's checkpointing protocol: warned before its job's time limit, submitit
    calls `checkpoint`, which asks for the same task again, and requeues the job, which resumes
    the trial from its newest checkpoint (`harness.runner.checkpoint`): a trial longer than the
    partition's `--time` completes over several jobs, recomputing at most a checkpoint interval
    each time.

    The warning is Slurm's (`--signal=USR2@warning_s`) or this process's own timer's, whichever
    comes first: Slurm may warn up to a minute early, and warns a requeued job as it starts, so a
    warning before `job_s - warning_s - EARLY_S` is ignored (the timer's comes).

    The trial's `time_limit_s` is its budget over all its jobs: their running time counts from
    the trial's first start (time queued between jobs does not, as on the other backends). A
    warned job requeues only if the budget outlasts the job; otherwise the trial runs on to the
    job's limit and Slurm ends it `TIMEOUT`, stored as `timeout`. Inside a job the trial stops
    itself at `time_limit_s` of its own clock, which its checkpoints carry over."""

    key: str
    budget_s: float
    """The trial's `time_limit_s`."""
    job_s: float
    """Its job's time limit."""
    warning_s: float
    """How long before its job's time limit it is warned."""
    spent_s: float = 0.0
    """The running time of the trial's earlier jobs."""
    started: float = field(default_factory=time.monotonic, compare=False)
    warned: bool = field(default=False, compare=False)  # once per job

    def __call__(self, config: dict[str, Any]) -> TrialResult:
        """One task's run: a rank of the trial when the job has several (rank 0's result is
        the job's: submitit's `job.results()[0]`), requeued at its job's warning while the
        trial's budget lasts."""
        from harness.runner.distributed import export_slurm_ranks  # torch: in the job only

        export_slurm_ranks()
        self.started, self.warned = time.monotonic(), False
        requeue = signal.getsignal(signal.SIGUSR2)  # submitit's handler, in a Slurm job
        if callable(requeue):
            on_warning = functools.partial(self.on_warning, requeue)
            signal.signal(signal.SIGUSR2, on_warning)
            signal.signal(signal.SIGALRM, on_warning)
            signal.setitimer(signal.ITIMER_REAL, self.job_s - self.warning_s)
        try:
            return run_in_worker(config, self.key)
        finally:
            self.warned = True  # a warning as its result is saved must not requeue it
            signal.setitimer(signal.ITIMER_REAL, 0)

    def elapsed(self) -> float:
        """This job's running time."""
        return time.monotonic() - self.started

    def spent(self) -> float:
        """The trial's running time over its jobs, this one included."""
        return self.spent_s + self.elapsed()

    def on_warning(self, requeue: Any, signum: int, frame: Any) -> None:
        """The warning: requeue (submitit's handler) while the budget outlasts this job."""
        if self.warned or self.elapsed() < self.job_s - self.warning_s - EARLY_S:
            return
        self.warned = True
        if self.spent() + self.warning_s < self.budget_s:
            requeue(signum, frame)
            return
        log.warning(
            "trial %s: its time_limit_s (%g s) ends with this job (%.0f s spent): not requeued",
            self.key[:12],
            self.budget_s,
            self.spent(),
        )

    def checkpoint(self, config: dict[str, Any]) -> Any:
        from submitit.helpers import DelayedSubmission  # in the job, where submitit runs it

        return DelayedSubmission(replace(self, spent_s=self.spent()), config)
