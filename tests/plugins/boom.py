"""A suite plugin for tests: an optimizer whose step raises, to check `failed` trials."""

import torch
from torch import nn

from harness.registry import OPTIMIZERS
from harness.spec.sections import OptimizerSpec


class ExplodingSGD(torch.optim.SGD):
    def step(self, closure=None):
        raise RuntimeError("boom: this optimizer always fails")


@OPTIMIZERS.register("boom")
def boom(model: nn.Module, spec: OptimizerSpec) -> torch.optim.Optimizer:
    """An optimizer that raises on its first step (test plugin)."""
    return ExplodingSGD(model.parameters(), lr=spec.lr)
