"""Normalization types (SPEC 5.2), each registered by name in NORM_TYPES.

An entry is a factory `(dim, eps, **params) -> nn.Module` that normalizes the last dimension.
Types with their own fields (e.g. an initial alpha) register a `ParamsModel` as `params=`;
the model passes the validated fields of the suite's `norm` section as `**params`.
"""

from __future__ import annotations

from torch import nn

from harness.registry import NORM_TYPES


@NORM_TYPES.register("layernorm")
def layernorm(dim: int, eps: float) -> nn.Module:
    """LayerNorm: (x - mean) / sqrt(var + eps) * g + b (Ba et al., 2016, "Layer Normalization")."""
    return nn.LayerNorm(dim, eps=eps)


@NORM_TYPES.register("rmsnorm")
def rmsnorm(dim: int, eps: float) -> nn.Module:
    """RMSNorm: x / sqrt(mean(x^2) + eps) * g (Zhang & Sennrich, 2019, "Root Mean Square LN")."""
    return nn.RMSNorm(dim, eps=eps)
