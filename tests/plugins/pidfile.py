"""A suite plugin for tests: AdamW that first writes its process id into $LAYERBENCH_TEST_PIDS,
so a test can find (and kill) the worker process running a given trial.

While a file named `hold` exists in that directory the trial waits there (at most HOLD_S
seconds), so a test's kill lands inside the trial however fast the trial itself would be."""

import os
import time
from pathlib import Path

import torch
from torch import nn

from harness.methods.optimizers import adamw
from harness.registry import OPTIMIZERS
from harness.spec.sections import OptimizerSpec

HOLD_S = 300.0  # past the overdue trial's two-minute Slurm limit


@OPTIMIZERS.register("adamw-pidfile")
def adamw_pidfile(model: nn.Module, spec: OptimizerSpec) -> torch.optim.Optimizer:
    """AdamW, after writing this process's id to a file and waiting out a hold (test plugin)."""
    pids = Path(os.environ["LAYERBENCH_TEST_PIDS"])
    (pids / str(os.getpid())).touch()
    deadline = time.monotonic() + HOLD_S
    while (pids / "hold").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return adamw(model, spec)
