"""A suite plugin for tests: a norm type added in one file (see docs/extending.md).

Mean-only normalization (Salimans & Kingma, 2016, "Weight Normalization", mean-only batch
normalization): subtract the feature mean without rescaling, then a learnable gain and bias.
"""

from __future__ import annotations

import torch
from pydantic import Field, PositiveFloat
from torch import Tensor, nn

from harness.methods.norms import NormRole
from harness.registry import NORM_TYPES
from harness.spec.sections import ParamsModel


class MeanNormParams(ParamsModel):
    gain_init: PositiveFloat = Field(1.0, description="The initial value of the gain g.")


class MeanNorm(nn.Module):
    def __init__(self, dim: int, gain_init: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.full((dim,), gain_init))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: Tensor) -> Tensor:
        return (x - x.mean(dim=-1, keepdim=True)) * self.weight + self.bias


@NORM_TYPES.register("meannorm", params=MeanNormParams)
def meannorm(dim: int, role: NormRole, eps: float, gain_init: float) -> nn.Module:
    """Mean-only normalization: x - mean(x), times a gain, plus a bias (test plugin)."""
    return MeanNorm(dim, gain_init)
