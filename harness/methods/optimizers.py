"""Optimizers (SPEC 5.3), each registered by name (the schedules: `harness.methods.schedules`).

An optimizer entry builds a `torch.optim.Optimizer` from a model and the suite's
`OptimizerSpec`. torch.optim and `pytorch-optimizer` implement every method they have; RMNP and
SinkGD, which neither has, are written in `harness.methods.update_rules`. `momentum` and
`nesterov` left unset in the suite take each optimizer's own default (the paper's).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import torch
from pydantic import BaseModel
from torch import nn

from harness.methods.catalog import (
    HybridParams,
    LarsParams,
    MuonParams,
    ScionParams,
    SinkGDParams,
    ns_dtype_on,
)
from harness.methods.param_roles import model_layers, trainable
from harness.methods.update_rules import NS_DTYPES, RMNP, Closure, Muon, SinkGD, closure_loss
from harness.registry import LAYERWISE, OPTIMIZERS
from harness.spec.sections import OptimizerSpec

P = TypeVar("P", bound=BaseModel)


def make_optimizer(model: nn.Module, spec: OptimizerSpec) -> torch.optim.Optimizer:
    """The suite's optimizer for `model`, wrapped by its layerwise treatment if it has one."""
    optimizer = OPTIMIZERS.get(spec.name)(model, spec)
    if spec.layerwise is None:
        return optimizer
    return LAYERWISE.get(spec.layerwise.name)(optimizer, model, spec.layerwise)


def method_params(spec: BaseModel, schema: type[P]) -> P:
    """The method-specific fields of a suite section (its extra keys), validated."""
    return schema.model_validate(spec.model_extra or {})


def momentum_of(spec: OptimizerSpec, momentum: float, nesterov: bool) -> tuple[float, bool]:
    """The suite's momentum and Nesterov flag, or the optimizer's defaults where unset."""
    return (
        momentum if spec.momentum is None else spec.momentum,
        nesterov if spec.nesterov is None else spec.nesterov,
    )


def decay_groups(params: Iterable[nn.Parameter], weight_decay: float) -> list[dict[str, Any]]:
    """Weight decay on matrices and embeddings only, never on norms or biases (as in nanoGPT)."""
    params = list(params)
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return [group for group in groups if group["params"]]


def model_groups(model: nn.Module, spec: OptimizerSpec) -> list[dict[str, Any]]:
    """All trainable parameters of `model`, weight decay on matrices only."""
    return decay_groups(trainable(model), spec.weight_decay)


class Composite(torch.optim.Optimizer):
    """Optimizers of disjoint parameter sets stepping as one (e.g. Muon with AdamW).

    The parts' param groups are this optimizer's groups (the same dicts), so a scheduler or
    GradScaler driving it drives every part; each part keeps its own state.
    """

    def __init__(self, parts: list[torch.optim.Optimizer]) -> None:
        self.parts = parts
        super().__init__([group for part in parts for group in part.param_groups], {})

    def step(self, closure: Closure = None) -> float | None:
        loss = closure_loss(closure)
        for part in self.parts:
            part.step()
        return loss


def with_adamw(
    model: nn.Module,
    spec: OptimizerSpec,
    hidden_optimizer: Callable[[list[nn.Parameter]], torch.optim.Optimizer],
    adamw_lr: float,
) -> Composite:
    """`hidden_optimizer` for the 2D weights inside the blocks, AdamW for every other parameter
    (embeddings, head, norms, biases), weight decay on its matrices only."""
    hidden = model_layers(model).hidden_matrices
    hidden_ids = {id(p) for p in hidden}
    others = [p for p in trainable(model) if id(p) not in hidden_ids]
    adamw = torch.optim.AdamW(
        decay_groups(others, spec.weight_decay), lr=adamw_lr, betas=spec.betas, eps=spec.eps
    )
    return Composite([hidden_optimizer(hidden), adamw])


def adamw(model: nn.Module, spec: OptimizerSpec) -> torch.optim.Optimizer:
    """AdamW: Adam with decoupled weight decay (Loshchilov & Hutter, 2019)."""
    return torch.optim.AdamW(model_groups(model, spec), lr=spec.lr, betas=spec.betas, eps=spec.eps)


def adam(model: nn.Module, spec: OptimizerSpec) -> torch.optim.Optimizer:
    """Adam (Kingma & Ba, 2015); weight_decay is an L2 penalty added to the gradient."""
    return torch.optim.Adam(model_groups(model, spec), lr=spec.lr, betas=spec.betas, eps=spec.eps)


def sgd(model: nn.Module, spec: OptimizerSpec) -> torch.optim.Optimizer:
    """SGD with heavy-ball or Nesterov momentum (Sutskever et al., 2013).

    No momentum by default.
    """
    momentum, nesterov = momentum_of(spec, 0.0, False)
    return torch.optim.SGD(
        model_groups(model, spec), lr=spec.lr, momentum=momentum, nesterov=nesterov
    )


def lion(model: nn.Module, spec: OptimizerSpec) -> torch.optim.Optimizer:
    """Lion: sign of interpolated momentum, decoupled weight decay (Chen et al., 2023)."""
    from pytorch_optimizer import Lion

    return Lion(model_groups(model, spec), lr=spec.lr, betas=spec.betas)


def lamb(model: nn.Module, spec: OptimizerSpec) -> torch.optim.Optimizer:
    """LAMB: Adam ratio plus weight decay, scaled per tensor by a trust ratio (You et al., 2020).

    Without bias correction (pytorch-optimizer's default LAMB); the trust ratio normalizes the
    step, so only the weight of the decay term relative to the Adam ratio differs from Alg. 2.
    """
    from pytorch_optimizer import Lamb

    return Lamb(
        model_groups(model, spec),
        lr=spec.lr,
        betas=spec.betas,
        eps=spec.eps,
        weight_decouple=False,
        adam_debias=True,
    )


def lars(model: nn.Module, spec: OptimizerSpec) -> torch.optim.Optimizer:
    """LARS: momentum SGD with a layer-wise trust ratio (You et al., 2017).

    Momentum 0.9 by default; vectors (norms, biases) get plain momentum SGD.
    """
    from pytorch_optimizer import LARS

    momentum, nesterov = momentum_of(spec, 0.9, False)
    return LARS(
        model_groups(model, spec),
        lr=spec.lr,
        momentum=momentum,
        nesterov=nesterov,
        trust_coefficient=method_params(spec, LarsParams).trust_coefficient,
    )


def novograd(model: nn.Module, spec: OptimizerSpec) -> torch.optim.Optimizer:
    """NovoGrad: layer-wise normalized gradients and moments (Ginsburg et al., 2019).

    Weight decay is added to the normalized gradient, inside the moment, as in the paper.
    """
    from pytorch_optimizer import NovoGrad

    return NovoGrad(model_groups(model, spec), lr=spec.lr, betas=spec.betas, eps=spec.eps)


def adafactor(model: nn.Module, spec: OptimizerSpec) -> torch.optim.Optimizer:
    """Adafactor: factored second moments, relative step size (Shazeer & Stern, 2018)."""
    return torch.optim.Adafactor(model_groups(model, spec), lr=spec.lr)


def muon(model: nn.Module, spec: OptimizerSpec) -> torch.optim.Optimizer:
    """Muon: orthogonalized momentum for hidden matrices, AdamW elsewhere (Jordan et al., 2024).

    torch.optim.Muon (Newton-Schulz) for the 2D weights in the blocks; AdamW for embeddings, head,
    norms and biases. Nesterov momentum 0.95 by default. `ns_dtype: auto` left unresolved (the
    runner resolves it in the trial config) follows the model's device.
    """
    params = method_params(spec, MuonParams)
    momentum, nesterov = momentum_of(spec, 0.95, True)
    device = next(model.parameters()).device.type
    ns_dtype = NS_DTYPES[ns_dtype_on(params.ns_dtype, on_gpu=device == "cuda")]
    return with_adamw(
        model,
        spec,
        lambda hidden: Muon(
            hidden,
            ns_dtype,
            lr=spec.lr,
            weight_decay=spec.weight_decay,
            momentum=momentum,
            nesterov=nesterov,
            ns_steps=params.ns_steps,
            adjust_lr_fn=params.adjust_lr_fn,
        ),
        params.adamw_lr or spec.lr,
    )


def rmnp(model: nn.Module, spec: OptimizerSpec) -> torch.optim.Optimizer:
    """RMNP: row-normalized momentum for hidden matrices, AdamW elsewhere (Deng et al., 2026).

    Nesterov momentum 0.95 by default.
    """
    adamw_lr = method_params(spec, HybridParams).adamw_lr or spec.lr
    momentum, nesterov = momentum_of(spec, 0.95, True)
    return with_adamw(
        model,
        spec,
        lambda hidden: RMNP(hidden, spec.lr, momentum, nesterov, spec.weight_decay),
        adamw_lr,
    )


def sinkgd(model: nn.Module, spec: OptimizerSpec) -> torch.optim.Optimizer:
    """SinkGD: Sinkhorn-normalized hidden-matrix gradients, AdamW elsewhere (Scetbon et al., 2025).

    SinkGD steps at `alpha * lr` on the 2D weights in the blocks, AdamW at `lr` on the rest.
    """
    params = method_params(spec, SinkGDParams)
    return with_adamw(
        model,
        spec,
        lambda hidden: SinkGD(hidden, params.alpha * spec.lr, params.iterations),
        spec.lr,
    )


def scion(model: nn.Module, spec: OptimizerSpec) -> torch.optim.Optimizer:
    """Scion: momentum, then each layer type's norm-constrained LMO (Pethick et al., 2025).

    The authors' shallow nanoGPT example, "Mixed" mode (github.com/LIONS-EPFL/scion,
    examples/shallow-nanogpt/model.py, `configure_optimizers`): ColNorm for the input
    embeddings, Sign for the head, Spectral (`norm_kwargs` {}: normalized, max=False) for the
    matrices in the blocks, and `optimizer.init()` so every such weight starts on its norm ball
    (`scion_init`). Vectors (norms, biases) get the RMS LMO and keep the model's init: the
    authors' model has parameter-free norms, and Scion's BiasRMS init would zero the gains.
    Momentum 0.9 by default. Constrained by default (its own decay); weight_decay acts only
    when unconstrained.
    """
    from pytorch_optimizer import SCION
    from pytorch_optimizer.optimizer.scion import LMONorm

    params, layers = method_params(spec, ScionParams), model_layers(model)
    outer = {id(p) for p in layers.embeddings + layers.head}
    inner = [p for p in trainable(model) if id(p) not in outer]
    groups = [
        {
            "params": layers.embeddings,
            "norm_type": LMONorm.COL,
            "norm_kwargs": {"normalized": False, "transpose": True},
            "scale": params.embedding_scale,
        },
        {"params": layers.head, "norm_type": LMONorm.SIGN, "scale": params.head_scale},
        {
            "params": [p for p in inner if p.ndim >= 2],
            "norm_type": LMONorm.SPECTRAL,
            "scale": params.hidden_scale,
        },
        {
            "params": [p for p in inner if p.ndim < 2],
            "norm_type": LMONorm.BIAS,
            "scale": params.hidden_scale,
        },
    ]
    optimizer = SCION(
        [group for group in groups if group["params"]],
        lr=spec.lr,
        momentum=1 - momentum_of(spec, 0.9, False)[0],
        constraint=not params.unconstrained,
        weight_decay=spec.weight_decay,
    )
    scion_init(optimizer)
    return optimizer


@torch.no_grad()
def scion_init(optimizer: torch.optim.Optimizer) -> None:
    """`SCION.init()` (each weight set to its LMO norm's init times the group's radius) for the
    matrix groups only; the vector (BIAS) group keeps the model's init."""
    from pytorch_optimizer.optimizer.scion import LMONorm, build_lmo_norm

    for group in optimizer.param_groups:
        if group["norm_type"] == LMONorm.BIAS:
            continue
        norm = build_lmo_norm(group["norm_type"], **group["norm_kwargs"])
        for p in group["params"]:
            p.copy_(norm.init(p)).mul_(group["scale"])
