"""A suite plugin for tests: AdamW that first writes its process id into $LAYERBENCH_TEST_PIDS,
so a test can find (and kill) the worker process running a given trial.

While a file named `hold` exists in that directory the trial waits there (at most HOLD_S
seconds), so a test's kill lands inside the trial however fast the trial itself would be:
`adamw-pidfile` waits before training, `adamw-held-step` at its HELD_STEP-th step."""

import itertools
import os
import time
import types
from pathlib import Path
from typing import Any

import torch
from torch import nn

from harness.methods.optimizers import adamw
from harness.registry import OPTIMIZERS
from harness.spec.sections import OptimizerSpec

HOLD_S = 300.0  # past the overdue trial's two-minute Slurm limit


@OPTIMIZERS.register("adamw-pidfile")
def adamw_pidfile(model: nn.Module, spec: OptimizerSpec) -> torch.optim.Optimizer:
    """AdamW, after writing this process's id to a file and waiting out a hold (test plugin)."""
    hold(Path(os.environ["LAYERBENCH_TEST_PIDS"]))
    return adamw(model, spec)


def hold(pids: Path) -> None:
    """Write this process's id into `pids`, then wait while `pids/hold` exists (HOLD_S at most)."""
    (pids / str(os.getpid())).touch()
    deadline = time.monotonic() + HOLD_S
    while (pids / "hold").exists() and time.monotonic() < deadline:
        time.sleep(0.05)


HELD_STEP = 5
"""The optimizer step at which `adamw-held-step` waits out a hold."""


@OPTIMIZERS.register("adamw-held-step")
def adamw_held_step(model: nn.Module, spec: OptimizerSpec) -> torch.optim.Optimizer:
    """AdamW that, at its HELD_STEP-th step, writes this process's id and waits out a hold
    (test plugin): a test's kill or requeue lands mid-training, after the checkpoints of the
    earlier steps, however fast the trial's steps are."""
    optimizer = adamw(model, spec)
    step, calls = optimizer.step, itertools.count(1)

    def held_step(self: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
        if next(calls) == HELD_STEP:
            hold(Path(os.environ["LAYERBENCH_TEST_PIDS"]))
        return step(*args, **kwargs)

    # a bound method, as the learning-rate schedule's own wrapper of `step` expects
    optimizer.step = types.MethodType(held_step, optimizer)  # type: ignore[method-assign]
    return optimizer
