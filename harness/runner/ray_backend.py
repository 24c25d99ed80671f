"""The Ray backend: each trial a Ray task on a cluster; this driver alone writes the results.

Trials are claimed through the same ledger as the local backend and stored by the same code
(`claim_next`, `record`), so SQL and MLflow see no difference. A worker runs each of its tasks'
trials in a process of its own, forked from a warm fork server that the worker starts for its
first trial (the local backend's, `run_forked`): later trials in that worker skip the imports.
Ray retries a task whose trial process died (`TrialProcessDied`) or whose worker or node died
(`max_retries`), each start counted as an attempt in SQL; any other exception in the task is not
retried and ends the trial `failed` with Ray's error, as does a death after the last retry.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.core import Status
from harness.records import PlannedTrial, TrialResult
from harness.runner.backend import (
    TIMEOUT_ERROR,
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
)
from harness.runner.local import TrialProcessDied, run_forked
from harness.spec.schema import ResourcesSpec, Suite
from harness.utils import kept_signal_handlers

if TYPE_CHECKING:
    from ray import ObjectRef
    from ray.util.queue import Queue

MAX_RETRIES = 1
POLL_S = 1.0
# Ray starts its workers at nice 15; at that priority a trial beside any other busy process
# barely runs (a worker took minutes to import transformers beside a 2-worker suite), and
# its time per step is not comparable with the local backend's. Workers of a Ray this driver
# starts, and of the compose nodes, run at normal priority.
WORKER_NICENESS = "0"
NICENESS_VARIABLE = "RAY_worker_niceness"  # Ray's config names are case-sensitive
GPU_VARIABLE = "CUDA_VISIBLE_DEVICES"  # set by Ray for each task in its worker


class RayUnavailableError(BackendUnavailableError):
    """Ray is not installed or its cluster cannot be reached."""


@dataclass
class Submitted(Lease):
    """A trial submitted as a Ray task; its deadline is set when a worker starts it."""

    started: int = 0


def import_ray() -> Any:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault(NICENESS_VARIABLE, WORKER_NICENESS)
    try:
        import ray
    except ImportError:
        raise RayUnavailableError(
            "--backend ray needs Ray: pip install 'layerbench[ray]'"
        ) from None
    return ray


def connect(ray: Any, address: str | None) -> None:
    """Join the cluster at `address` (else $RAY_ADDRESS, else a Ray already started on this
    machine), or start a local Ray with this machine's cores."""
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as error:
        where = address or os.environ.get("RAY_ADDRESS") or "on this machine"
        raise RayUnavailableError(f"cannot reach the Ray cluster {where}: {error}") from None


def trial_resources(
    device: str, resources: ResourcesSpec, cluster_gpus: float
) -> tuple[float, float]:
    """(CPUs, GPUs) for one trial: the suite's `resources:` if set, else from its device; a
    trial of several ranks (one node's: `ray_backend`) asks for `cpus` for each, and for one GPU
    each unless `gpus` says how many."""
    wants_gpu = device.startswith("cuda") or (device == "auto" and cluster_gpus > 0)
    cpus = resources.cpus if resources.cpus is not None else 1.0
    ranks = resources.tasks_per_node
    gpus = resources.gpus if resources.gpus is not None else float(wants_gpu) * ranks
    return cpus * ranks, gpus


def ray_trial(trial: PlannedTrial, starts: Queue) -> TrialResult:
    """A Ray task: announce this attempt, then run the trial forked from this worker's warm fork
    server, with the GPUs Ray gave this task (a reused worker's server started with its first
    task's)."""
    import socket

    starts.put((trial.key, os.getpid(), socket.gethostname()))
    return run_forked(trial, {GPU_VARIABLE: os.environ.get(GPU_VARIABLE)})


def ray_backend(suite: Suite, options: BackendOptions) -> Executor:
    """The `ray` entry of `harness.registry.BACKENDS`: the suite's trials on the Ray cluster at
    `--ray-address`, with the suite's resources per trial. A trial of several ranks runs them
    on one node, under torch's elastic launcher in its Ray task (`harness.runner.distributed`);
    one over several nodes (`resources.nodes`) is refused: that is Slurm's (docs/deploy.md)."""
    if suite.resources.nodes > 1:
        raise BackendOptionError(
            f"`resources.nodes: {suite.resources.nodes}` needs `--backend slurm`: the Ray "
            "backend runs a trial's ranks on one node (set `nodes: 1`)"
        )
    return ray_executor(options.ray_address, suite.resources, options.ray_retries)


def ray_executor(
    address: str | None = None,
    resources: ResourcesSpec | None = None,
    max_retries: int = MAX_RETRIES,
) -> Executor:
    """The Ray backend as an `Executor` (raises `RayUnavailableError` when it runs)."""

    def execute(
        trials: Sequence[PlannedTrial],
        ledger: RetryLedger,
        progress: Progress,
        stop: threading.Event | None,
    ) -> dict[str, TrialResult]:
        return run_ray(trials, ledger, address, resources, max_retries, progress, stop)

    return execute


def run_ray(
    trials: Iterable[PlannedTrial],
    ledger: RetryLedger,
    address: str | None = None,
    resources: ResourcesSpec | None = None,
    max_retries: int = MAX_RETRIES,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
) -> dict[str, TrialResult]:
    """Run every trial the ledger lets this driver claim on Ray; returns results by trial key.
    When `stop` is set, the tasks in flight are cancelled and their claims released."""
    ray = import_ray()
    joined = not ray.is_initialized()
    with kept_signal_handlers(signal.SIGTERM, signal.SIGINT):
        if joined:
            connect(ray, address)
        try:
            return drive(ray, trials, ledger, resources, max_retries, progress, stop)
        finally:
            if joined:
                ray.shutdown()


def drive(
    ray: Any,
    trials: Iterable[PlannedTrial],
    ledger: RetryLedger,
    resources: ResourcesSpec | None,
    max_retries: int,
    progress: Progress | None,
    stop: threading.Event | None = None,
) -> dict[str, TrialResult]:
    """Claim, submit, collect: at most as many trials in flight as the cluster has CPUs."""
    from ray.util.queue import Queue

    progress = progress or SilentProgress()
    resources = resources or ResourcesSpec()
    cluster = ray.cluster_resources()
    slots = max(1, int(cluster.get("CPU", 1)))  # claim no more than the cluster can start
    task = ray.remote(retry_exceptions=[TrialProcessDied])(ray_trial)
    starts = Queue(actor_options={"num_cpus": 0})
    pending = deque(trials)
    active: dict[ObjectRef[TrialResult], Submitted] = {}
    results: dict[str, TrialResult] = {}
    try:
        while pending or active:
            if stop is not None and stop.is_set():
                abandon(ray, active, ledger)
                break
            while len(active) < slots and (trial := claim_next(pending, ledger, progress)):
                cpus, gpus = trial_resources(trial.recipe.device, resources, cluster.get("GPU", 0))
                options = {"num_cpus": cpus, "num_gpus": gpus, "max_retries": max_retries}
                ref = task.options(**options).remote(trial, starts)
                active[ref] = Submitted(trial)
                progress.started(trial)
            done, _ = ray.wait(list(active), num_returns=1, timeout=POLL_S)
            note_starts(starts, active, ledger)  # first: a retried trial may also be done
            for ref in done:
                record(active[ref].trial, outcome(ray, ref), ledger, progress, results)
                del active[ref]
            keep_alive(ray, active, ledger, progress, results)
    finally:
        ray.kill(starts.actor)
    return results


def outcome(ray: Any, ref: ObjectRef[TrialResult]) -> TrialResult:
    """The task's result, or `failed` with Ray's error (a death after the last retry, a code
    exception, a cancelled task)."""
    try:
        result: TrialResult = ray.get(ref)
        return result
    except ray.exceptions.RayError as error:
        cause = getattr(error, "cause", None)  # a task's own exception (RayTaskError)
        if isinstance(cause, TrialProcessDied):  # the local backend's words, no traceback
            return TrialResult(Status.FAILED, error=f"ray: {cause}")
        return TrialResult(Status.FAILED, error=f"ray: {type(error).__name__}: {error}")


def abandon(ray: Any, active: dict[ObjectRef[TrialResult], Submitted], ledger: Ledger) -> None:
    """Cancel the tasks in flight and give their claims back."""
    for ref, submitted in active.items():
        ray.cancel(ref, force=True)
        ledger.release(submitted.trial)
    active.clear()


def note_starts(
    starts: Queue, active: dict[ObjectRef[TrialResult], Submitted], ledger: RetryLedger
) -> None:
    """Each start of a task after its first is Ray retrying a crash: one more attempt in SQL."""
    size = starts.qsize()
    if not size:
        return
    by_key = {submitted.trial.key: submitted for submitted in active.values()}
    for key, _pid, _host in starts.get_nowait_batch(size):
        submitted = by_key.get(key)
        if submitted is None:
            continue
        submitted.started += 1
        submitted.start()
        if submitted.started > 1:
            ledger.add_attempt(submitted.trial)


def keep_alive(
    ray: Any,
    active: dict[ObjectRef[TrialResult], Submitted],
    ledger: RetryLedger,
    progress: Progress,
    results: dict[str, TrialResult],
) -> None:
    """Heartbeat the claims in flight; end a trial that outlived its time limit plus grace."""
    now = time.monotonic()
    for ref, submitted in list(active.items()):
        if submitted.overdue(now):
            ray.cancel(ref, force=True)
            result = TrialResult(Status.TIMEOUT, error=TIMEOUT_ERROR)
            record(submitted.trial, result, ledger, progress, results)
            del active[ref]
    renew_leases(active.values(), ledger)
