"""A suite plugin for tests: AdamW that first writes its process id into $LAYERBENCH_TEST_PIDS,
so a test can find (and kill) the worker process running a given trial."""

import os
from pathlib import Path

import torch
from torch import nn

from harness.methods.optimizers import adamw
from harness.registry import OPTIMIZERS
from harness.spec.schema import OptimizerSpec


@OPTIMIZERS.register("adamw-pidfile")
def adamw_pidfile(model: nn.Module, spec: OptimizerSpec) -> torch.optim.Optimizer:
    """AdamW, after writing this process's id to a file (test plugin)."""
    (Path(os.environ["LAYERBENCH_TEST_PIDS"]) / str(os.getpid())).touch()
    return adamw(model, spec)
