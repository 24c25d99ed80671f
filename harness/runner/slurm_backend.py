"""The Slurm backend: each trial a Slurm job (an array task), submitted with submitit.

Trials are claimed through the same ledger as the local and Ray backends and stored by the same
code (`claim_next`, `record`) the moment their job ends, so SQL and MLflow see no difference.
The driver claims at most `array_parallelism` trials at a time and submits each batch as one job
array; each task asks for the suite's `resources:` (CPUs, GPUs, memory) and a time limit of
`time_limit_s` plus a grace, or `slurm.job_time_s` if shorter: the trial then spans several jobs
(`SlurmTrial`). The job pickles its `TrialResult` into the job folder (which the nodes and the
driver share); a job that ends without one (cancelled, out of time or memory, node lost) is read
from Slurm's record of it: `TIMEOUT` is stored as `timeout`, a node failure or a preemption is
resubmitted up to `max_retries` times (each an attempt in SQL), and anything else is `failed`
with Slurm's state as the reason. submitit: https://github.com/facebookincubator/submitit
"""

from __future__ import annotations

import math
import shutil
import subprocess
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.core import Status
from harness.records import PlannedTrial, TrialResult
from harness.runner.backend import (
    BackendOptionError,
    BackendOptions,
    BackendUnavailableError,
    Executor,
    Lease,
    Ledger,
    Progress,
    RetryLedger,
    SilentProgress,
    claim_next,
    record,
    renew_leases,
    worker_config,
)
from harness.runner.slurm_job import MAX_JOBS_PER_TRIAL, SlurmTrial, job_seconds, warning_s
from harness.spec.schema import ResourcesSpec, SlurmSpec, Suite

POLL_S = 2.0
# Job states after which no result will come (squeue's long names).
TIMEOUT_STATES = frozenset({"TIMEOUT", "DEADLINE"})
RETRY_STATES = frozenset({"NODE_FAIL", "PREEMPTED", "BOOT_FAIL"})
ENDED_STATES = frozenset(
    {"CANCELLED", "COMPLETED", "FAILED", "OUT_OF_MEMORY", "REVOKED", "SPECIAL_EXIT"}
    | TIMEOUT_STATES
    | RETRY_STATES
    | {"VANISHED"}
)
# How long a job may show no result after it COMPLETED (a shared filesystem's caches), or be
# neither in squeue nor in sacct, before its trial is given up.
VANISHED_AFTER_S = 60.0


class SlurmUnavailableError(BackendUnavailableError):
    """submitit is not installed or no Slurm controller answers."""


@dataclass(kw_only=True)
class Submitted(Lease):
    """A trial submitted as a Slurm job. Its lease has no deadline: Slurm enforces the limit."""

    job: Any  # submitit.Job[TrialResult]
    executor: Any  # submitit.SlurmExecutor that submitted it (a resubmission reuses it)
    job_s: int
    retries_left: int
    missing_since: float | None = None


def import_submitit() -> Any:
    try:
        import submitit
    except ImportError:
        raise SlurmUnavailableError(
            "--backend slurm needs submitit: pip install 'layerbench[slurm]'"
        ) from None
    if shutil.which("sbatch") is None:
        raise SlurmUnavailableError("--backend slurm needs Slurm's sbatch on this machine's PATH")
    return submitit


def slurm_time(seconds: float) -> str:
    """Slurm's `--time` for a limit of `seconds`, rounded up to whole minutes (its resolution)."""
    minutes = max(1, math.ceil(seconds / 60))
    return f"{minutes // 60}:{minutes % 60:02d}:00"


def job_resources(device: str, resources: ResourcesSpec) -> dict[str, Any]:
    """sbatch options for one trial: whole CPUs per rank and GPUs per node (one per rank on
    the node when its device is CUDA); a trial of several ranks is one job of `nodes` nodes
    and `tasks` tasks on each (`harness.runner.distributed`)."""
    cpus = math.ceil(resources.cpus) if resources.cpus is not None else 1
    cuda = device.startswith("cuda")
    gpus = (
        math.ceil(resources.gpus) if resources.gpus is not None else cuda * resources.tasks_per_node
    )
    options: dict[str, Any] = {"cpus_per_task": cpus}
    if resources.ranks > 1:
        options |= {"nodes": resources.nodes, "ntasks_per_node": resources.tasks_per_node}
    if gpus:
        options["gpus_per_node"] = gpus
    if resources.memory_gb is not None:
        options["mem"] = f"{math.ceil(resources.memory_gb * 1024)}M"
    return options


def executor_parameters(
    trial: PlannedTrial, resources: ResourcesSpec, slurm: SlurmSpec
) -> dict[str, Any]:
    """submitit's SlurmExecutor parameters for a batch of trials like `trial`."""
    seconds = job_seconds(trial, slurm)
    extra: dict[str, Any] = {"time": slurm_time(seconds), **slurm.sbatch}
    parameters: dict[str, Any] = {
        "job_name": f"layerbench-{trial.suite}",
        "array_parallelism": slurm.array_parallelism,
        "signal_delay_s": warning_s(seconds),
        "stderr_to_stdout": True,
        "additional_parameters": extra,
        **job_resources(trial.recipe.device, resources),
    }
    named = {"partition": slurm.partition, "account": slurm.account, "qos": slurm.qos}
    parameters.update({name: value for name, value in named.items() if value})
    if slurm.setup:
        parameters["setup"] = list(slurm.setup)
    return parameters


def slurm_backend(suite: Suite, options: BackendOptions) -> Executor:
    """The `slurm` entry of `harness.registry.BACKENDS`: the suite's trials as Slurm jobs, with
    its `slurm:` section under the command line's options."""
    return slurm_executor(
        suite.resources, slurm_settings(suite.slurm, options.slurm, options.sbatch)
    )


def slurm_settings(spec: SlurmSpec, flags: dict[str, Any], sbatch: Sequence[str] = ()) -> SlurmSpec:
    """The suite's `slurm:` section with the command line's `--slurm-*` flags (those not None)
    and `--sbatch` KEY=VALUE flags over it; a `--sbatch` without `=` is a BackendOptionError."""
    extra = dict(spec.sbatch)
    for flag in sbatch:
        key, equals, value = flag.partition("=")
        if not equals or not key:
            raise BackendOptionError(
                f"--sbatch takes KEY=VALUE, e.g. --sbatch constraint=a100 (got '{flag}')"
            )
        extra[key.lstrip("-")] = value
    chosen = {name: value for name, value in flags.items() if value is not None}
    return spec.model_copy(update={**chosen, "sbatch": extra})


def slurm_executor(
    resources: ResourcesSpec | None = None, slurm: SlurmSpec | None = None
) -> Executor:
    """The Slurm backend as an `Executor` (raises `SlurmUnavailableError` when it runs)."""

    def execute(
        trials: Sequence[PlannedTrial],
        ledger: RetryLedger,
        progress: Progress,
        stop: threading.Event | None,
    ) -> dict[str, TrialResult]:
        return run_slurm(trials, ledger, resources, slurm, progress, stop)

    return execute


def run_slurm(
    trials: Iterable[PlannedTrial],
    ledger: RetryLedger,
    resources: ResourcesSpec | None = None,
    slurm: SlurmSpec | None = None,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
) -> dict[str, TrialResult]:
    """Run every trial the ledger lets this driver claim as Slurm jobs; returns results by key.
    When `stop` is set (or the driver is interrupted), its jobs are cancelled and their claims
    released."""
    submitit = import_submitit()
    resources = resources or ResourcesSpec()
    slurm = slurm or SlurmSpec()
    progress = progress or SilentProgress()
    folder = Path(slurm.folder).absolute() / "%j"
    pending = deque(trials)
    active: dict[str, Submitted] = {}
    results: dict[str, TrialResult] = {}
    try:
        while pending or active:
            if stop is not None and stop.is_set():
                cancel(active, ledger)
                break
            batch = claim_batch(pending, ledger, progress, slurm.array_parallelism - len(active))
            if batch:
                executor = submitit.SlurmExecutor(folder=folder, max_num_timeout=MAX_JOBS_PER_TRIAL)
                executor.update_parameters(**executor_parameters(batch[0], resources, slurm))
                job_s = job_seconds(batch[0], slurm)
                for trial, job in zip(batch, submit(executor, batch, job_s), strict=True):
                    active[job.job_id] = Submitted(
                        trial=trial,
                        job=job,
                        executor=executor,
                        job_s=job_s,
                        retries_left=slurm.max_retries,
                    )
                    progress.started(trial)
            collect(active, ledger, progress, results)
            renew_leases(active.values(), ledger)
            if active:
                time.sleep(POLL_S)
    except BaseException:
        cancel(active, ledger)
        raise
    return results


def claim_batch(
    pending: deque[PlannedTrial], ledger: Ledger, progress: Progress, room: int
) -> list[PlannedTrial]:
    """Up to `room` trials claimed now, all with the same time limit and device (one array)."""
    batch: list[PlannedTrial] = []
    while len(batch) < room and pending and (not batch or alike(batch[0], pending[0])):
        if trial := claim_next(deque([pending.popleft()]), ledger, progress):
            batch.append(trial)
    return batch


def alike(first: PlannedTrial, other: PlannedTrial) -> bool:
    """Trials that may share a job array: the same time limit and device."""
    one, two = first.recipe, other.recipe
    return (one.time_limit_s, one.device) == (two.time_limit_s, two.device)


def submit(executor: Any, batch: list[PlannedTrial], job_s: int) -> list[Any]:
    """One job array for the batch (a single job when it has one trial), of jobs of `job_s`."""
    with executor.batch():
        jobs = [
            executor.submit(
                SlurmTrial(trial.key, trial.recipe.time_limit_s, job_s, warning_s(job_s)),
                worker_config(trial),
            )
            for trial in batch
        ]
    return jobs


def collect(
    active: dict[str, Submitted],
    ledger: RetryLedger,
    progress: Progress,
    results: dict[str, TrialResult],
) -> None:
    """Store every trial whose job has ended; resubmit those a lost node or preemption ended."""
    waiting = [s for s in active.values() if not s.job.paths.result_pickle.exists()]
    states = job_states([s.job.job_id for s in waiting]) if waiting else {}
    for job_id, submitted in list(active.items()):
        if submitted.job.paths.result_pickle.exists():
            outcome = job_result(submitted.job)
        else:
            state = states.get(job_id) or final_state(submitted)
            if state == "COMPLETED" and not waited_out(submitted):
                continue  # its result file may not be visible here yet
            if state is None or state not in ENDED_STATES:
                continue
            if state in RETRY_STATES and submitted.retries_left > 0:
                del active[job_id]
                ledger.add_attempt(submitted.trial)
                (job,) = submit(submitted.executor, [submitted.trial], submitted.job_s)
                active[job.job_id] = replace(
                    submitted, job=job, retries_left=submitted.retries_left - 1
                )
                continue
            outcome = lost_job(job_id, state, submitted.trial)
        del active[job_id]
        record(submitted.trial, outcome, ledger, progress, results)


def job_result(job: Any) -> TrialResult:
    """The trial's result (its rank 0's, the job's first task, when it has several), or
    `failed` with submitit's error when the job itself failed."""
    try:
        result: TrialResult = job.results()[0]
        return result
    except Exception as error:  # submitit's FailedJobError carries the job's traceback
        return TrialResult(Status.FAILED, error=f"slurm job {job.job_id}: {error}")


def lost_job(job_id: str, state: str, trial: PlannedTrial) -> TrialResult:
    """What a job that ended without a result means for its trial."""
    if state in TIMEOUT_STATES:
        limit = trial.recipe.time_limit_s
        return TrialResult(
            Status.TIMEOUT,
            error=f"slurm job {job_id} ran past its Slurm time limit and was killed: the trial's "
            f"time_limit_s ({limit:g} s, over all its jobs) was spent",
        )
    hint = " (see `scancel`)" if state == "CANCELLED" else ""
    return TrialResult(
        Status.FAILED, error=f"slurm job {job_id} ended {state}{hint} without a result"
    )


def job_states(job_ids: list[str]) -> dict[str, str]:
    """Current states by job id (array tasks as `JOB_TASK`) from one `squeue` call; jobs that
    Slurm has already forgotten are absent."""
    bases = sorted({job_id.split("_")[0] for job_id in job_ids})
    ran = subprocess.run(
        [
            "squeue",
            "--noheader",
            "--array",
            "--states=all",
            "--format=%i|%T",
            "--jobs=" + ",".join(bases),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    states: dict[str, str] = {}
    for line in ran.stdout.splitlines():
        job_id, _, state = line.strip().partition("|")
        states[job_id] = state
    return states


def final_state(submitted: Submitted) -> str | None:
    """The state of a job squeue no longer shows: from accounting (sacct) where the cluster has
    it; a job neither knows about for VANISHED_AFTER_S is taken as lost."""
    state = str(submitted.job.state).split()[0] if submitted.job.state else "UNKNOWN"
    if state != "UNKNOWN":
        return state
    return "VANISHED" if waited_out(submitted) else None


def waited_out(submitted: Submitted) -> bool:
    """Has this job been without a result for VANISHED_AFTER_S since first seen so?"""
    now = time.monotonic()
    submitted.missing_since = submitted.missing_since or now
    return now - submitted.missing_since > VANISHED_AFTER_S


def cancel(active: dict[str, Submitted], ledger: Ledger) -> None:
    """The driver is stopping (Ctrl-C, SIGTERM): cancel its jobs and give their claims back."""
    for submitted in active.values():
        submitted.job.cancel(check=False)
        ledger.release(submitted.trial)
    active.clear()
