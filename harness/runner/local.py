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
from collections.abc import Iterable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Protocol

from harness.core import Status
from harness.records import PlannedTrial, TrialResult
from harness.registry import all_modules

HEARTBEAT_EVERY_S = 10.0
KILL_GRACE_S = 60.0


class Ledger(Protocol):
    """Where trials are claimed and results recorded (the store implements it)."""

    def claim(self, trial: PlannedTrial) -> bool: ...

    def heartbeat(self, trial: PlannedTrial) -> None: ...

    def finish(self, trial: PlannedTrial, result: TrialResult) -> None: ...

    def release(self, trial: PlannedTrial) -> None: ...


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


@dataclass
class Running:
    trial: PlannedTrial
    process: mp.process.BaseProcess
    deadline: float
    last_heartbeat: float = field(default_factory=time.monotonic)


def context() -> mp.context.BaseContext:
    """A fork server that has imported torch and every registry once; trials fork from it."""
    os.environ.setdefault("TQDM_DISABLE", "1")  # read at import by the server's libraries
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["harness.runner.trial", *all_modules()])
    return ctx


def threads_per_trial(workers: int) -> int:
    return max(1, (os.cpu_count() or 1) // workers)


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
    from harness.runner.trial import trial_process

    progress = progress or SilentProgress()
    ctx = context()
    pending = deque(trials)
    active: dict[Connection, Running] = {}
    results: dict[str, TrialResult] = {}
    while pending or active:
        if stop is not None and stop.is_set():
            abandon(active, ledger)
            break
        while len(active) < workers and (trial := claim_next(pending, ledger, progress)):
            receiver, sender = ctx.Pipe(duplex=False)
            process = ctx.Process(
                target=trial_process, args=(sender, trial.config, threads_per_trial(workers))
            )
            process.start()
            sender.close()
            limit = float(trial.config["time_limit_s"]) + KILL_GRACE_S
            active[receiver] = Running(trial, process, time.monotonic() + limit)
            progress.started(trial)
        for conn in wait(list(active), timeout=1.0):
            result = receive(conn, active[conn], progress)
            if result is not None:
                end(conn, active.pop(conn), result, ledger, progress, results)
        renew_leases(active.values(), ledger)
        for conn, running in list(active.items()):
            if time.monotonic() > running.deadline:
                running.process.kill()
                result = TrialResult(
                    Status.TIMEOUT, error="killed: no result within the time limit plus grace"
                )
                end(conn, active.pop(conn), result, ledger, progress, results)
    return results


def claim_next(
    pending: deque[PlannedTrial], ledger: Ledger, progress: Progress
) -> PlannedTrial | None:
    """The next pending trial this runner claims (every backend claims through the ledger)."""
    while pending:
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
    results[trial.key] = result
    progress.finished(trial, result)


def renew_leases(running: Iterable[Running], ledger: Ledger) -> None:
    """Heartbeat every trial in flight, reporting or silent, so its claim's lease never lapses
    while this runner is alive."""
    for trial in running:
        if time.monotonic() - trial.last_heartbeat > HEARTBEAT_EVERY_S:
            ledger.heartbeat(trial.trial)
            trial.last_heartbeat = time.monotonic()


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
