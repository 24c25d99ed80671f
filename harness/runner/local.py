"""The local backend: each trial in its own process, up to `workers` at once.

The runner claims a trial through the ledger before starting it and hands the result
back to the ledger the moment the trial ends, so a crash loses at most the trials in flight.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
import threading
import time
import types
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any

from harness.core import Status
from harness.records import PlannedTrial, TrialResult
from harness.registry import all_modules
from harness.runner.backend import (
    TIMEOUT_ERROR,
    BackendOptions,
    Executor,
    Lease,
    Ledger,
    Progress,
    SilentProgress,
    claim_next,
    record,
    renew_leases,
    worker_config,
)
from harness.runner.placement import Placement
from harness.runner.warm import start_server

if TYPE_CHECKING:
    from harness.spec import Suite


class TrialProcessDied(RuntimeError):
    """A trial's process ended without sending a result (killed, out of memory, crashed)."""


@dataclass(kw_only=True)
class Running(Lease):
    """A trial in flight in its own process."""

    process: mp.process.BaseProcess
    gpus: tuple[str, ...] = ()
    """The GPUs it was given (`harness.runner.placement`)."""


def context() -> mp.context.BaseContext:
    """A fork server that has imported torch and every registry once, and is warmed for the
    suite (`harness.runner.warm`); trials fork from it."""
    os.environ.setdefault("TQDM_DISABLE", "1")  # read at import by the server's libraries
    ctx = mp.get_context("forkserver")
    first, last = "harness.runner.warm_start", "harness.runner.warm_server"
    ctx.set_forkserver_preload([first, "harness.runner.trial", *all_modules(), last])
    return ctx


@dataclass(frozen=True)
class LocalExecutor:
    """The local backend as an `Executor`: `workers` trial processes at once, each on its own
    GPUs (`gpus`: the suite's `resources.gpus`). `prepare` starts the warm fork server early, so
    it warms up while the run opens its store and tracking."""

    workers: int = 1
    gpus: float | None = None

    def prepare(self, trials: Sequence[PlannedTrial]) -> None:
        context()
        start_server(trials)

    def __call__(
        self,
        trials: Sequence[PlannedTrial],
        ledger: Ledger,
        progress: Progress,
        stop: threading.Event | None,
    ) -> dict[str, TrialResult]:
        placement = Placement.here(self.gpus)
        return run_local(trials, ledger, self.workers, progress, stop, placement)


def local_executor(workers: int = 1, gpus: float | None = None) -> Executor:
    """The local backend as an `Executor`: `workers` trial processes at once."""
    return LocalExecutor(workers, gpus)


def local_backend(suite: Suite, options: BackendOptions) -> Executor:
    """The `local` entry of `harness.registry.BACKENDS`: `--workers` trial processes here, each
    on its own GPUs."""
    return local_executor(options.workers, suite.resources.gpus)


def run_local(
    trials: Iterable[PlannedTrial],
    ledger: Ledger,
    workers: int = 1,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
    placement: Placement | None = None,
) -> dict[str, TrialResult]:
    """Run every trial the ledger lets this runner claim; returns results by trial key.

    Each trial runs on the GPUs `placement` gives it (default: this machine's, one per CUDA
    trial) and waits until they are free; a trial that needs more GPUs than there are raises
    `PlacementError` before anything starts. When `stop` is set (a SIGTERM), the running trials
    are killed and their claims released, so no trial stays claimed; the trials not started
    stay unclaimed."""
    progress = progress or SilentProgress()
    placement = placement or Placement.here()
    ctx = context()
    pending = deque(trials)
    for device in {trial.recipe.device for trial in pending}:
        placement.check(device)
    start_server(pending)
    active: dict[Connection, Running] = {}
    results: dict[str, TrialResult] = {}
    ready = lambda trial: placement.ready(trial.recipe.device)  # noqa: E731
    while pending or active:
        if stop is not None and stop.is_set():
            abandon(active, ledger)
            break
        while len(active) < workers and (trial := claim_next(pending, ledger, progress, ready)):
            gpus = placement.take(trial.recipe.device) or ()
            receiver, sender = ctx.Pipe(duplex=False)
            args = (sender, worker_config(trial), placement.environment(gpus), trial.key)
            process = ctx.Process(target=forked_trial, args=args)
            process.start()
            sender.close()
            active[receiver] = Running(trial=trial, process=process, gpus=gpus)
            active[receiver].start()
            progress.started(trial)
        for conn in wait(list(active), timeout=1.0):
            try:
                result = receive(conn, active[conn], progress)
            except TrialProcessDied as died:
                result = TrialResult(Status.FAILED, error=str(died))
            if result is not None:
                placement.give_back(active[conn].trial.recipe.device, active[conn].gpus)
                end(conn, active.pop(conn), result, ledger, progress, results)
        renew_leases(active.values(), ledger)
        for conn, running in list(active.items()):
            if running.overdue(time.monotonic()):
                running.process.kill()
                placement.give_back(running.trial.recipe.device, running.gpus)
                result = TrialResult(Status.TIMEOUT, error=TIMEOUT_ERROR)
                end(conn, active.pop(conn), result, ledger, progress, results)
    return results


def forked_trial(
    conn: Connection,
    config: dict[str, Any],
    environment: Mapping[str, str | None] | None = None,
    key: str | None = None,
) -> None:
    """A trial process's target: `trial_process`, imported in the child (the fork server has
    it loaded), so that the runner itself never imports torch: that would take seconds of CPU
    just as the first trials start. `environment` sets (None: removes) variables the fork
    server's own environment may hold otherwise, before anything reads them. With the trial's
    `key`, it resumes from its checkpoints."""
    for name, value in (environment or {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    from harness.runner.trial import trial_process

    trial_process(conn, config, key)


def run_forked(trial: PlannedTrial, environment: Mapping[str, str | None]) -> TrialResult:
    """One trial in its own process, forked from this process's warm fork server (started for
    it if there is none yet), waited for here: what a Ray worker runs for each of its tasks, so
    that only its first trial pays for the imports. Raises `TrialProcessDied` when the trial's
    process ends without a result; the trial dies with the server, and the server with this
    process."""
    ctx = context()
    start_server([trial])
    receiver, sender = ctx.Pipe(duplex=False)
    args = (sender, worker_config(trial), environment, trial.key)
    process = ctx.Process(target=forked_trial, args=args)
    with main_module_hidden():
        process.start()
    sender.close()
    running = Running(trial=trial, process=process)
    try:
        while (result := receive(receiver, running, SilentProgress())) is None:
            pass  # a step's progress: Ray tasks report when they end
        return result
    finally:
        receiver.close()
        process.join(timeout=10)


@contextmanager
def main_module_hidden() -> Iterator[None]:
    """multiprocessing's children import the parent's `__main__` again when it was run as a
    file; a Ray worker's is Ray's `default_worker.py`, which a trial must not import (Ray itself,
    in every trial). Its children see a `__main__` with no file."""
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


def receive(conn: Connection, running: Running, progress: Progress) -> TrialResult | None:
    """Handle one message; returns the result when the trial is over. Raises
    `TrialProcessDied` when its process ended without one."""
    try:
        message = conn.recv()
    except (EOFError, OSError):
        running.process.join(timeout=5)
        raise TrialProcessDied(death_message(running.process.exitcode)) from None
    if message[0] == "result":
        return message[1]
    _, step, total, loss = message
    progress.step(running.trial, step, total, loss)
    return None


def abandon(active: dict[Connection, Running], ledger: Ledger) -> None:
    """Kill the running trials and give their claims back."""
    for conn, running in active.items():
        running.process.kill()
        running.process.join(timeout=10)
        conn.close()
        ledger.release(running.trial)
    active.clear()


def end(
    conn: Connection,
    running: Running,
    result: TrialResult,
    ledger: Ledger,
    progress: Progress,
    results: dict[str, TrialResult],
) -> None:
    conn.close()
    running.process.join(timeout=10)
    record(running.trial, result, ledger, progress, results)


def death_message(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name
        hint = " (out of memory?)" if name == "SIGKILL" else ""
        return f"the trial process died from {name}{hint} before reporting a result"
    return f"the trial process exited with code {exitcode} before reporting a result"
