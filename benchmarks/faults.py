"""A suite plugin that injects the faults of the reliability campaign (docs/reliability.md).

List it in a suite's `plugins:`; it changes nothing unless told to by environment variables:

- `LB_KILL_AT=eval|db_write|mlflow_write` (and `LB_KILL_NTH=n`, default 1): SIGKILL the runner
  at the n-th evaluation of a trial, inside the database transaction that stores a result (its
  rows added, not yet committed), or inside the MLflow logging of a trial (its run created and
  filled, not yet terminated or recorded in the store).
- `LB_RLIMIT_AS_EXTRA=bytes`: a trial process may grow its address space by this much only.

It also registers the optimizers `hang` (each step sleeps `LB_HANG_S` seconds, default 3600),
`sleepy` (each step sleeps 0.5 s) and `explode` (its step raises), to hang a trial, keep it
running for a while, or make it fail.
"""

from __future__ import annotations

import multiprocessing
import os
import resource
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from harness.registry import OPTIMIZERS
from harness.spec.sections import OptimizerSpec

RUNNER_PID = "LB_RUNNER_PID"
in_trial = multiprocessing.parent_process() is not None
if not in_trial:  # the runner (or a CLI command) imports plugins first; its trials inherit this
    os.environ.setdefault(RUNNER_PID, str(os.getpid()))


def kill_runner() -> None:
    os.kill(int(os.environ[RUNNER_PID]), signal.SIGKILL)
    time.sleep(60)  # the runner is gone; a trial process waits for its own end


def nth_call(wrapped: Callable[..., Any]) -> Callable[..., Any]:
    """`wrapped`, killing the runner before its LB_KILL_NTH-th call in this process."""
    calls, nth = [0], int(os.environ.get("LB_KILL_NTH", "1"))

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == nth:
            kill_runner()
        return wrapped(*args, **kwargs)

    return wrapper


def install_kill_point(where: str) -> None:
    if where == "eval" and in_trial:
        from harness.runner import trial

        trial.evaluate = nth_call(trial.evaluate)
    elif where == "db_write" and not in_trial:
        from harness.store import db

        rows = db.result_rows

        def rows_then_die(trial_id: int, result: Any) -> Iterator[Any]:
            yield from rows(trial_id, result)
            kill_runner_inside()

        kill_runner_inside = nth_call(lambda: None)
        db.result_rows = rows_then_die
    elif where == "mlflow_write" and not in_trial:
        from mlflow.tracking import MlflowClient

        MlflowClient.set_terminated = nth_call(MlflowClient.set_terminated)


def limit_address_space(extra: int) -> None:
    """RLIMIT_AS at this process's current size plus `extra` bytes."""
    with open("/proc/self/statm") as statm:
        size = int(statm.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (size + extra, resource.RLIM_INFINITY))


if os.environ.get("LB_KILL_AT"):
    install_kill_point(os.environ["LB_KILL_AT"])
if in_trial and os.environ.get("LB_RLIMIT_AS_EXTRA"):
    limit_address_space(int(os.environ["LB_RLIMIT_AS_EXTRA"]))


class SleepingSGD(torch.optim.SGD):
    def __init__(self, params: Any, lr: float, seconds: float) -> None:
        super().__init__(params, lr=lr)
        self.seconds = seconds

    def step(self, closure: Any = None) -> Any:
        time.sleep(self.seconds)
        return super().step(closure)


@OPTIMIZERS.register("hang")
def hang(model: nn.Module, spec: OptimizerSpec) -> torch.optim.Optimizer:
    """SGD whose every step sleeps LB_HANG_S seconds (a hung trial; fault campaign)."""
    return SleepingSGD(model.parameters(), spec.lr, float(os.environ.get("LB_HANG_S", "3600")))


@OPTIMIZERS.register("sleepy")
def sleepy(model: nn.Module, spec: OptimizerSpec) -> torch.optim.Optimizer:
    """SGD whose every step sleeps 0.5 s (a trial that holds its claim a while; campaign)."""
    return SleepingSGD(model.parameters(), spec.lr, 0.5)


class ExplodingSGD(torch.optim.SGD):
    def step(self, closure: Any = None) -> Any:
        raise RuntimeError("explode: an injected exception inside the trial")


@OPTIMIZERS.register("explode")
def explode(model: nn.Module, spec: OptimizerSpec) -> torch.optim.Optimizer:
    """SGD whose step raises (a trial that fails with an exception; fault campaign)."""
    return ExplodingSGD(model.parameters(), lr=spec.lr)
