"""Optimizers (SPEC 5.3) and learning-rate schedules, each registered by name.

An optimizer entry builds a `torch.optim.Optimizer` from a model and the suite's
`OptimizerSpec`; a schedule entry maps (step, total steps, warmup steps) to an LR multiplier.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from harness.registry import OPTIMIZERS, SCHEDULES
from harness.spec.schema import OptimizerSpec


def decay_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on matrices and embeddings only, never on norms or biases (as in nanoGPT)."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]


@OPTIMIZERS.register("adamw")
def adamw(model: nn.Module, spec: OptimizerSpec) -> torch.optim.Optimizer:
    """AdamW: Adam with decoupled weight decay (Loshchilov & Hutter, 2019)."""
    return torch.optim.AdamW(
        decay_groups(model, spec.weight_decay), lr=spec.lr, betas=spec.betas, eps=spec.eps
    )


@OPTIMIZERS.register("sgd")
def sgd(model: nn.Module, spec: OptimizerSpec) -> torch.optim.Optimizer:
    """SGD with optional heavy-ball or Nesterov momentum (Sutskever et al., 2013)."""
    return torch.optim.SGD(
        decay_groups(model, spec.weight_decay),
        lr=spec.lr,
        momentum=spec.momentum,
        nesterov=spec.nesterov,
    )


def warmup(step: int, warmup_steps: int) -> float:
    """Linear warmup from 1/warmup_steps to 1."""
    return min(1.0, (step + 1) / warmup_steps) if warmup_steps else 1.0


def decay_progress(step: int, total: int, warmup_steps: int) -> float:
    """Fraction of the post-warmup steps done, in [0, 1]."""
    return min(1.0, max(0.0, (step - warmup_steps) / max(1, total - warmup_steps)))


@SCHEDULES.register("constant")
def constant(step: int, total: int, warmup_steps: int, min_ratio: float) -> float:
    """Constant learning rate after linear warmup."""
    return warmup(step, warmup_steps)


@SCHEDULES.register("cosine")
def cosine(step: int, total: int, warmup_steps: int, min_ratio: float) -> float:
    """Linear warmup, then cosine decay to min_ratio (Loshchilov & Hutter, 2017, SGDR)."""
    if step < warmup_steps:
        return warmup(step, warmup_steps)
    progress = decay_progress(step, total, warmup_steps)
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


@SCHEDULES.register("linear")
def linear(step: int, total: int, warmup_steps: int, min_ratio: float) -> float:
    """Linear warmup, then linear decay to min_ratio."""
    if step < warmup_steps:
        return warmup(step, warmup_steps)
    return 1 - (1 - min_ratio) * decay_progress(step, total, warmup_steps)
