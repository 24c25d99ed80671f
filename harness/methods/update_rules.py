"""The optimizer classes written here: RMNP and SinkGD, which neither torch.optim nor
`pytorch-optimizer` has, and torch's Muon with a choice of Newton-Schulz precision
(`harness.methods.optimizers` builds each from a suite's `OptimizerSpec`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

Closure = Callable[[], float] | None


def closure_loss(closure: Closure) -> float | None:
    """The loss of an optional step closure, evaluated with gradients enabled (torch's way)."""
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


class PerParameter(torch.optim.Optimizer):
    """An optimizer whose step updates each parameter with a gradient on its own."""

    def update(self, p: nn.Parameter, group: dict[str, Any]) -> None:
        raise NotImplementedError

    @torch.no_grad()
    def step(self, closure: Closure = None) -> float | None:
        loss = closure_loss(closure)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self.update(p, group)
        return loss


class RMNP(PerParameter):
    """RMNP: Muon with row-wise l2 normalization of the momentum in place of Newton-Schulz.

    Row Momentum Normalized Preconditioning (Deng et al., 2026, arXiv:2603.20527; the authors' code:
    github.com/Dominator-Index/RMNP, rmnp/rmnp.py, which this matches). For a
    weight W (out x in) with gradient G: B <- mu B + G; U = G + mu B (Nesterov) or B; each row of U
    is scaled to unit l2 norm; W <- (1 - lr wd) W - lr sqrt(max(1, out/in)) U.
    """

    def __init__(
        self,
        params: Iterable[nn.Parameter],
        lr: float,
        momentum: float,
        nesterov: bool,
        weight_decay: float,
    ) -> None:
        defaults = {
            "lr": lr,
            "momentum": momentum,
            "nesterov": nesterov,
            "weight_decay": weight_decay,
        }
        super().__init__(params, defaults)

    def update(self, p: nn.Parameter, group: dict[str, Any]) -> None:
        momentum, grad, state = group["momentum"], p.grad, self.state[p]
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = torch.zeros_like(grad)
        buffer = state["momentum_buffer"].mul_(momentum).add_(grad)
        direction = grad.add(buffer, alpha=momentum) if group["nesterov"] else buffer
        rows, cols = p.shape
        scale = math.sqrt(max(1.0, rows / cols))
        p.mul_(1 - group["lr"] * group["weight_decay"])
        p.add_(F.normalize(direction, dim=1), alpha=-group["lr"] * scale)


def sr_sinkhorn(grad: torch.Tensor, iterations: int) -> torch.Tensor:
    """SR-Sinkhorn (Scetbon et al., 2025, Alg. 3): rows to l2 norm sqrt(n), then columns to
    l2 norm sqrt(m), `iterations` times, for an m x n matrix."""
    rows, cols = grad.shape
    x = grad
    for _ in range(iterations):
        x = F.normalize(x, dim=1) * math.sqrt(cols)
        x = F.normalize(x, dim=0) * math.sqrt(rows)
    return x


class SinkGD(PerParameter):
    """SinkGD: stateless descent along the SR-Sinkhorn normalized gradient (Scetbon et al., 2025,
    "Gradient Multi-Normalization for Stateless and Scalable LLM Training", Alg. 4)."""

    def __init__(self, params: Iterable[nn.Parameter], lr: float, iterations: int) -> None:
        super().__init__(params, {"lr": lr, "iterations": iterations})

    def update(self, p: nn.Parameter, group: dict[str, Any]) -> None:
        p.add_(sr_sinkhorn(p.grad, group["iterations"]), alpha=-group["lr"])


NS_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def newton_schulz(
    grad: torch.Tensor,
    coefficients: tuple[float, float, float],
    steps: int,
    eps: float,
    dtype: torch.dtype,
) -> torch.Tensor:
    """torch.optim.Muon's quintic Newton-Schulz orthogonalization (torch/optim/_muon.py,
    `_zeropower_via_newtonschulz`, from Jordan's reference) carried out in `dtype`."""
    a, b, c = coefficients
    x = grad.to(dtype)
    tall = grad.size(0) > grad.size(1)
    if tall:
        x = x.T
    x = x / x.norm().clamp(min=eps)
    for _ in range(steps):
        gram = x @ x.T
        x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.T if tall else x


class Muon(torch.optim.Muon):
    """torch.optim.Muon with a choice of Newton-Schulz precision.

    bfloat16 is torch's own step, unchanged; float32 repeats torch's single-tensor step
    (`_single_tensor_muon`: momentum lerp, Nesterov, Newton-Schulz, decoupled decay, `_adjust_lr`)
    with the iteration in float32. torch's Muon takes no orthogonalization function, hence the
    override of `step`.
    """

    def __init__(
        self, params: Iterable[nn.Parameter], ns_dtype: torch.dtype, **kwargs: Any
    ) -> None:
        super().__init__(params, **kwargs)
        self.ns_dtype = ns_dtype

    @torch.no_grad()
    def step(self, closure: Closure = None) -> float | None:
        if self.ns_dtype == torch.bfloat16:
            return super().step(closure)  # type: ignore[no-untyped-call]
        from torch.optim._muon import _adjust_lr

        loss = closure_loss(closure)
        for group in self.param_groups:
            params: list[torch.Tensor] = []
            grads: list[torch.Tensor] = []
            buffers: list[torch.Tensor] = []
            self._init_group(group, params, grads, buffers)
            lr, momentum = group["lr"], group["momentum"]
            for param, grad, buffer in zip(params, grads, buffers, strict=True):
                buffer.lerp_(grad, 1 - momentum)
                update = grad.lerp(buffer, momentum) if group["nesterov"] else buffer
                update = newton_schulz(
                    update, group["ns_coefficients"], group["ns_steps"], group["eps"], self.ns_dtype
                )
                param.mul_(1 - lr * group["weight_decay"])
                param.add_(update, alpha=-_adjust_lr(lr, group["adjust_lr_fn"], param.shape))
        return loss
