"""A suite plugin for tests: AdamW whose every step also sleeps $LAYERBENCH_TEST_STEP_S seconds
(unset: none), so a tiny trial lasts as long as a test needs (a Slurm job's time limit to pass)
without using the CPU, and stores the same numbers as it would without the sleep."""

import os
import time

import torch
from torch import nn

from harness.methods.optimizers import adamw
from harness.registry import OPTIMIZERS
from harness.spec.sections import OptimizerSpec


def sleep_a_step(*_: object) -> None:
    time.sleep(float(os.environ.get("LAYERBENCH_TEST_STEP_S") or 0))


@OPTIMIZERS.register("adamw-slow")
def adamw_slow(model: nn.Module, spec: OptimizerSpec) -> torch.optim.Optimizer:
    """AdamW, each step followed by a sleep (test plugin)."""
    optimizer = adamw(model, spec)
    optimizer.register_step_post_hook(sleep_a_step)
    return optimizer
