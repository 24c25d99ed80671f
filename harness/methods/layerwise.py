"""Layerwise optimizer treatments (SPEC 5.4), each registered in LAYERWISE.

An entry is called as `wrapper(optimizer, model, spec) -> torch.optim.Optimizer` with the base
optimizer, before the learning-rate scheduler is built. It may split the optimizer's param
groups per layer and change each group's settings (the scheduler then scales each group's own
rate), and it may hook the optimizer's step (`register_step_pre_hook`/`register_step_post_hook`),
so it composes with any optimizer, Muon's Composite included. "Layers" are the model's blocks
(`harness.methods.param_roles`); the embeddings, head and final norm around them are always on.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from harness.methods.catalog import (
    FreezeParams,
    LisaParams,
    LLRParams,
    LoraParams,
    LrDepthParams,
    WdScaleParams,
)
from harness.methods.layers import blocks, linears
from harness.methods.optimizers import Composite, method_params
from harness.methods.param_roles import model_layers
from harness.spec.sections import LayerwiseSpec


def split_groups(optimizer: torch.optim.Optimizer, key: Callable[[nn.Parameter], Hashable]) -> None:
    """Replace each param group, in place, by one group (same settings) per value of `key`."""
    if isinstance(optimizer, Composite):
        for part in optimizer.parts:
            split_groups(part, key)
        optimizer.param_groups = [group for part in optimizer.parts for group in part.param_groups]
        return
    groups = []
    for group in optimizer.param_groups:
        by_key: dict[Hashable, list[nn.Parameter]] = {}
        for p in group["params"]:
            by_key.setdefault(key(p), []).append(p)
        groups += [group | {"params": params} for params in by_key.values()]
    optimizer.param_groups = groups


def first_param(group: dict[str, Any]) -> int:
    """The id of a group's first parameter (after `split_groups`, all share its key)."""
    return id(group["params"][0])


def lr_depth(
    optimizer: torch.optim.Optimizer, model: nn.Module, spec: LayerwiseSpec
) -> torch.optim.Optimizer:
    """Layer-wise LR decay from the head down (Clark et al., 2020, ELECTRA; Bao et al., 2022).

    Depth k of L + 1 trains at lr * decay^(L+1-k): embeddings are depth 0, block i depth i + 1,
    head and final norm L + 1.
    """
    decay = method_params(spec, LrDepthParams).decay
    layers = model_layers(model)
    top = len(layers.blocks) + 1
    depth = {id(p): 0 for p in layers.embeddings}
    depth |= {id(p): i + 1 for i, block in enumerate(layers.blocks) for p in block}
    split_groups(optimizer, lambda p: depth.get(id(p), top))
    for group in optimizer.param_groups:
        group["lr"] *= decay ** (top - depth.get(first_param(group), top))
    return optimizer


def esd_alpha(weight: torch.Tensor) -> float:
    """Power-law exponent of the eigenvalue spectrum of W^T W: the Hill estimator over the upper
    half of the eigenvalues, 1 + n / sum_j log(lambda_j / lambda_min) (LLR's "median" fit)."""
    eigenvalues = torch.linalg.svdvals(weight.detach().float()).square().sort().values
    tail = eigenvalues[len(eigenvalues) // 2 :].log()
    return 1.0 + len(tail) / float((tail - tail[0]).sum())


def llr_ratios(alphas: Sequence[float], low: float, high: float) -> np.ndarray:
    """LR ratios linear in alpha, from `low` at the smallest alpha to `high` at the largest."""
    return np.interp(alphas, [min(alphas), max(alphas)], [low, high])


class LayerwiseLR:
    """LLR's per-matrix LR ratios, re-estimated every `interval` steps and applied around each
    optimizer step on top of the scheduled rate.

    `modules` get ratios from their alphas; the `outer` parameters (embeddings and head) get
    `lr_max_ratio`, ramped like the others.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        modules: list[nn.Linear],
        outer: list[nn.Parameter],
        params: LLRParams,
    ) -> None:
        owner = {id(p): i for i, module in enumerate(modules) for p in module.parameters()}
        owner |= {id(p): len(modules) for p in outer}
        split_groups(optimizer, lambda p: owner.get(id(p)))
        self.groups = [
            (group, owner[first_param(group)])
            for group in optimizer.param_groups
            if first_param(group) in owner
        ]
        self.modules, self.params, self.steps = modules, params, 0
        self.start = self.target = self.current = np.ones(len(modules) + 1)
        self.scheduled: list[float] = []
        optimizer.register_step_pre_hook(self.before_step)
        optimizer.register_step_post_hook(self.after_step)

    def targets(self) -> np.ndarray:
        alphas = [esd_alpha(module.weight) for module in self.modules]
        ratios = llr_ratios(alphas, self.params.lr_min_ratio, self.params.lr_max_ratio)
        return np.append(ratios, self.params.lr_max_ratio)

    def before_step(self, *_: Any) -> None:
        since = self.steps % self.params.interval
        if since == 0:
            self.start, self.target = self.current, self.targets()
        fraction = min(1.0, (since + 1) / self.params.ramp_steps)
        self.current = self.start + (self.target - self.start) * fraction
        self.scheduled = [group["lr"] for group, _ in self.groups]
        for group, index in self.groups:
            group["lr"] *= float(self.current[index])

    def after_step(self, *_: Any) -> None:
        for (group, _), lr in zip(self.groups, self.scheduled, strict=True):
            group["lr"] = lr
        self.steps += 1


def llr(
    optimizer: torch.optim.Optimizer, model: nn.Module, spec: LayerwiseSpec
) -> torch.optim.Optimizer:
    """LLR: per-matrix rates from the heavy-tailed spectra of the weights (LLR, 2025).

    "One LR Doesn't Fit All: Heavy-Tail Guided Layerwise Learning Rates for LLMs": each weight
    matrix in the blocks trains at lr times a ratio linear in the power-law alpha of its
    eigenvalue spectrum, larger alpha (a lighter tail) faster. As in the authors' code
    (github.com/hed-ucas/Layer-wise-Learning-Rate, olmo/LRUnbalance.py, `net_esd_estimator` and
    `build_optimizer_param_group`), the embeddings and the head (modules named "embed"/"head")
    are given the largest alpha, so they train at `lr_max_ratio` (a tied table counts as head).
    Norms and biases keep the base rate: the authors' LayerNorm option (`layernorm`, mapping a
    norm to the linear layer before it) is off by default and not set by `build_optimizer_LLR`
    (olmo/optim.py), so their runs left norms in the untuned group.
    """
    params = method_params(spec, LLRParams)
    modules = [
        module
        for block in blocks(model)
        for module in linears(block)
        if min(module.weight.shape) >= params.min_eigenvalues
    ]
    if not modules:
        raise ValueError(f"llr: no weight matrix has {params.min_eigenvalues} eigenvalues or more")
    layers = model_layers(model)
    LayerwiseLR(optimizer, modules, layers.embeddings + layers.head, params)
    return optimizer


class ActiveLayers:
    """Trains only a sampled subset of layers, resampled every `interval` steps: the others'
    parameters stop requiring gradients, so they get neither a gradient nor an update (their
    optimizer state is kept)."""

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        layers: list[list[nn.Parameter]],
        sample: Callable[[torch.Generator], Iterable[int]],
        interval: int,
    ) -> None:
        self.layers, self.sample, self.interval, self.steps = layers, sample, interval, 0
        self.generator = torch.Generator().manual_seed(torch.initial_seed())
        self.resample()
        optimizer.register_step_post_hook(self.after_step)

    def resample(self) -> None:
        active = set(self.sample(self.generator))
        for index, params in enumerate(self.layers):
            for p in params:
                p.requires_grad_(index in active)

    def after_step(self, *_: Any) -> None:
        self.steps += 1
        if self.steps % self.interval == 0:
            self.resample()


def lisa(
    optimizer: torch.optim.Optimizer, model: nn.Module, spec: LayerwiseSpec
) -> torch.optim.Optimizer:
    """LISA: layerwise importance sampling, a few random blocks trained at once (Pan et al., 2024,
    "LISA: Layerwise Importance Sampling for Memory-Efficient Large Language Model Fine-Tuning",
    arXiv 2403.17919).

    As the authors' code does (OptimalScale/LMFlow `src/lmflow/pipeline/finetuner.py` and
    `src/lmflow/pipeline/utils/lisa_trainer.py`, `DynamicLayerActivationCallback`, used with
    `lisa_activated_layers` = `active_layers` and `lisa_interval_steps` = `interval`): the
    embeddings, head and final norm are never frozen; before step 0 and every `interval` steps
    after it, every block is frozen (`requires_grad` off) and `active_layers` blocks drawn
    uniformly without replacement are unfrozen. The optimizer is built once over every
    parameter, as the transformers Trainer builds it before the callback's first switch, and
    never rebuilt: a frozen block gets no gradient, so the optimizer skips it, and its state
    (Adam's moments, step count) is kept and resumes when the block is drawn again.
    """
    params = method_params(spec, LisaParams)
    layers = model_layers(model).blocks

    def draw(generator: torch.Generator) -> list[int]:
        return torch.randperm(len(layers), generator=generator)[: params.active_layers].tolist()

    ActiveLayers(optimizer, layers, draw, params.interval)
    return optimizer


def lora(
    optimizer: torch.optim.Optimizer, model: nn.Module, spec: LayerwiseSpec
) -> torch.optim.Optimizer:
    """LoRA through the `peft` library (Hu et al., 2022), the baseline LISA is compared against.

    peft's `inject_adapter_in_model` adds low-rank adapters to the target Linear layers of the
    model in place and leaves only them trainable; the adapters join the optimizer in a group
    with its first group's settings, and the frozen pretrained weights get no gradient, so the
    optimizer never updates them (nor keeps state for them). peft matches targets by module
    name, so a model it has no architecture for (the built-in `gpt`, trained from scratch with
    frozen random weights under its adapters) takes LoRA too: see `lora_targets`.
    """
    from peft import LoraConfig, inject_adapter_in_model

    if isinstance(optimizer, Composite):
        raise ValueError("lora: use an optimizer of one part (adamw, sgd, ...), not a composite")
    params = method_params(spec, LoraParams)
    config = LoraConfig(
        r=params.r,
        lora_alpha=params.alpha,
        lora_dropout=params.dropout,
        target_modules=lora_targets(model, params.target_modules),
    )
    inject_adapter_in_model(config, model)
    adapters = [p for name, p in model.named_parameters() if "lora_" in name]
    settings = {key: value for key, value in optimizer.param_groups[0].items() if key != "params"}
    optimizer.add_param_group({**settings, "params": adapters})
    return optimizer


def merge_adapters(model: nn.Module) -> nn.Module:
    """`model` with each peft adapter merged into the weight it adapts and its layer replaced
    by the merged base layer (peft's `merge_and_unload`, for a model adapted in place by
    `inject_adapter_in_model`); a model without adapters as it is."""
    if "peft" not in sys.modules:  # no adapter was injected in this process
        return model
    from peft.tuners.tuners_utils import BaseTunerLayer

    for name, module in list(model.named_modules()):
        if isinstance(module, BaseTunerLayer):
            module.merge()
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, module.get_base_layer())
    return model


LORA_PAPER_TARGETS = ("q_proj", "v_proj")
"""The LoRA paper's adapted matrices, W_q and W_v (Hu et al., 2022, section 7.1), by the names
the built-in `gpt` and the Llama family give them."""


def lora_targets(model: nn.Module, targets: list[str] | str | None) -> list[str] | str:
    """The module names LoRA adapts in `model`: `targets` as the method names them; unset, peft's
    default for a transformers architecture (`config.model_type`), else the paper's W_q and W_v;
    `all-linear` on a model that is no transformers model, every Linear in its blocks (peft's
    own expansion would also adapt the head there). ValueError when unset and `model` has
    neither an architecture peft knows nor q_proj and v_proj modules."""
    if isinstance(targets, list):
        return targets
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if targets is None and model_type is not None:
        from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING

        defaults = TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING.get(model_type)
        if defaults is None:
            raise ValueError(
                f"lora: peft has no default target modules for '{model_type}'; set `target_modules`"
            )
        return sorted(defaults)
    if targets is None:
        names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
        if not set(LORA_PAPER_TARGETS) <= names:
            raise ValueError(
                f"lora: {type(model).__name__} has no q_proj and v_proj modules for LoRA's "
                "default targets; set `target_modules` to the names of its Linear layers"
            )
        return list(LORA_PAPER_TARGETS)
    if model_type is None:  # all-linear on a model of no transformers architecture
        owned = {id(module) for block in blocks(model) for module in linears(block)}
        return [name for name, module in model.named_modules() if id(module) in owned]
    return targets


def freeze(
    optimizer: torch.optim.Optimizer, model: nn.Module, spec: LayerwiseSpec
) -> torch.optim.Optimizer:
    """Freezing by role: the named roles (`harness.methods.param_roles`) and blocks never train.

    Their parameters stop requiring gradients, so the optimizer skips them (fine-tuning only the
    blocks, only the head, the last blocks, ...).
    """
    params = method_params(spec, FreezeParams)
    layers = model_layers(model)
    if missing := sorted(set(params.blocks) - set(range(len(layers.blocks)))):
        raise ValueError(f"freeze: blocks {missing} do not exist ({len(layers.blocks)} blocks)")
    roles = {
        "embeddings": layers.embeddings,
        "head": layers.head,
        "norms": layers.rest,
        "blocks": [p for block in layers.blocks for p in block],
    }
    frozen = [p for role in params.roles for p in roles[role]]
    frozen += [p for index in params.blocks for p in layers.blocks[index]]
    for p in frozen:
        p.requires_grad_(False)
    return optimizer


def drop(
    optimizer: torch.optim.Optimizer, model: nn.Module, spec: LayerwiseSpec
) -> torch.optim.Optimizer:
    """Drop-Muon: each step updates a random suffix of the layers (Gruntkowska et al., 2025).

    Randomized progressive training: a start layer s is drawn uniformly and only layers s..b of
    (embeddings, blocks..., head with final norm) update; the others keep weights and momentum.
    """
    layers = model_layers(model)
    ordered = [layers.embeddings, *layers.blocks, layers.head + layers.rest]
    units = [unit for unit in ordered if unit]

    def suffix(generator: torch.Generator) -> range:
        return range(int(torch.randint(len(units), (), generator=generator)), len(units))

    ActiveLayers(optimizer, units, suffix, interval=1)
    return optimizer


def wd_scale(
    optimizer: torch.optim.Optimizer, model: nn.Module, spec: LayerwiseSpec
) -> torch.optim.Optimizer:
    """AdamW weight-decay scaling rule for width transfer (Fan et al., 2025).

    The 2D hidden (matrix-like) weights train at lr * b/d with weight decay * sqrt(d/b); every
    other (vector-like) parameter at lr without weight decay; d the model width, b the base width.
    """
    width = model.get_input_embeddings().embedding_dim
    ratio = width / method_params(spec, WdScaleParams).base_width
    hidden = {id(p) for p in model_layers(model).hidden_matrices}
    split_groups(optimizer, lambda p: id(p) in hidden)
    for group in optimizer.param_groups:
        matrix = first_param(group) in hidden
        group["lr"] /= ratio if matrix else 1.0
        if "weight_decay" in group:
            group["weight_decay"] = group["weight_decay"] * math.sqrt(ratio) if matrix else 0.0
    return optimizer
