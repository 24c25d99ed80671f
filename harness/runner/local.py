"""The local backend: each trial in its own process, up to `workers` at once.

The runner claims a trial through the ledger before starting it and hands the result
back to the ledger the moment the trial ends, so a crash loses at most the trials in flight.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from harness.core import Status
from harness.records import PlannedTrial, TrialResult
from harness.registry import all_modules
from harness.runner.backend import (
    Executor,
    Lease,
    Ledger,
    Progress,
    SilentProgress,
    claim_next,
    record,
    renew_leases,
)
from harness.runner.warm import start_server


@dataclass(kw_only=True)
class Running(Lease):
    """A trial in flight in its own process."""

    process: mp.process.BaseProcess


def context() -> mp.context.BaseContext:
    """A fork server that has imported torch and every registry once, and is warmed for the
    suite (`harness.runner.warm`); trials fork from it."""
    os.environ.setdefault("TQDM_DISABLE", "1")  # read at import by the server's libraries
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(
        ["harness.runner.trial", *all_modules(), "harness.runner.warm_server"]
    )
    return ctx


@dataclass(frozen=True)
class LocalExecutor:
    """The local backend as an `Executor`: `workers` trial processes at once. `prepare` starts
    the warm fork server early, so it warms up while the run opens its store and tracking."""

    workers: int = 1

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
        return run_local(trials, ledger, self.workers, progress, stop)


def local_executor(workers: int = 1) -> Executor:
    """The local backend as an `Executor`: `workers` trial processes at once."""
    return LocalExecutor(workers)


def run_local(
    trials: Iterable[PlannedTrial],
    ledger: Ledger,
    workers: int = 1,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
) -> dict[str, TrialResult]:
    """Run every trial the ledger lets this runner claim; returns results by trial key.

    When `stop` is set (a SIGTERM), the running trials are killed and their claims released, so
    no trial stays claimed; the trials not started stay unclaimed."""
    progress = progress or SilentProgress()
    ctx = context()
    pending = deque(trials)
    start_server(pending)
    active: dict[Connection, Running] = {}
    results: dict[str, TrialResult] = {}
    while pending or active:
        if stop is not None and stop.is_set():
            abandon(active, ledger)
            break
        while len(active) < workers and (trial := claim_next(pending, ledger, progress)):
            receiver, sender = ctx.Pipe(duplex=False)
            process = ctx.Process(target=forked_trial, args=(sender, trial.config))
            process.start()
            sender.close()
            active[receiver] = Running(trial=trial, process=process)
            active[receiver].start()
            progress.started(trial)
        for conn in wait(list(active), timeout=1.0):
            result = receive(conn, active[conn], progress)
            if result is not None:
                end(conn, active.pop(conn), result, ledger, progress, results)
        renew_leases(active.values(), ledger)
        for conn, running in list(active.items()):
            if running.overdue(time.monotonic()):
                running.process.kill()
                result = TrialResult(
                    Status.TIMEOUT, error="killed: no result within the time limit plus grace"
                )
                end(conn, active.pop(conn), result, ledger, progress, results)
    return results


def forked_trial(conn: Connection, config: dict[str, Any]) -> None:
    """A trial process's target: `trial_process`, imported in the child (the fork server has
    it loaded), so that the runner itself never imports torch: that would take seconds of CPU
    just as the first trials start."""
    from harness.runner.trial import trial_process

    trial_process(conn, config)


def receive(conn: Connection, running: Running, progress: Progress) -> TrialResult | None:
    """Handle one message; returns the result when the trial is over."""
    try:
        message = conn.recv()
    except (EOFError, OSError):
        running.process.join(timeout=5)
        return TrialResult(Status.FAILED, error=death_message(running.process.exitcode))
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
