"""Layerwise statistics recorded during a trial, at every evaluation step (SPEC 5.7).

Per layer l (the l-th block of the model, from 0):
- `grad_norm`: ||g_l||_2 over the block's parameters, after unscaling and before clipping;
- `update_ratio`: ||W_l(after) - W_l(before)||_2 / ||W_l(before)||_2 across the optimizer step;
- `hidden_rms`: sqrt(mean(h_l^2)) of the block's output h_l on a fixed batch;
- `max_abs_activation`: max |h_l| ("massive activations", Sun et al., 2024);
- `block_influence`: 1 - mean over tokens of cos(h_(l-1), h_l), the block's input and output
  (ShortGPT, Men et al., 2024; h_(-1) is the embedding output).
Per model, in the row of the layer where it occurs: `peak_activation`, the largest |h_l| over all
block outputs, with its token position (`peak_position`) and channel (`peak_channel`).
With them, the seed's geometric diagnostics of `harness.diagnostics_geometry` (effective rank,
tokenwise share of the update, feature norm and negative-aware norm of the MLP features; layer
rotation and spectral norms by its `WeightTracker`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from itertools import pairwise

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from harness.diagnostics_geometry import feature_norm_stats, mlp_features, representation_stats
from harness.records import LayerStat
from harness.tasks.base import Task

BATCH_SEED = 0
"""The fixed batch for hidden-state statistics: the same for every trial on a task."""


def diagnostic_inputs(task: Task, batch_size: int) -> Tensor:
    """Input ids of one training batch drawn with a fixed seed (never the trial's generator)."""
    generator = torch.Generator().manual_seed(BATCH_SEED)
    return next(task.train_batches(batch_size, generator))[0]


def global_norm(tensors: Sequence[Tensor]) -> float:
    """||concat(tensors)||_2."""
    if not tensors:
        return 0.0
    return float(torch.linalg.vector_norm(torch.stack([t.float().norm() for t in tensors])))


class StepProbe:
    """Per-layer gradient norms and update/weight ratios around one optimizer step.

    `seconds` is its own running time, which the runner counts as evaluation, not training.
    """

    def __init__(self, layers: Sequence[nn.Module]) -> None:
        self.layers = layers
        self.grad_norms: list[float] = []
        self.update_ratios: list[float] = []
        self.weights: list[list[Tensor]] = []
        self.seconds = 0.0

    @contextmanager
    def timed(self) -> Iterator[None]:
        started = time.perf_counter()
        yield
        self.seconds += time.perf_counter() - started

    @torch.no_grad()
    def before_step(self) -> None:
        """Record the gradient norms and a copy of the weights."""
        with self.timed():
            self.grad_norms = [
                global_norm([p.grad for p in layer.parameters() if p.grad is not None])
                for layer in self.layers
            ]
            self.weights = [[p.clone() for p in layer.parameters()] for layer in self.layers]

    @torch.no_grad()
    def after_step(self) -> None:
        """Record how far the step moved each layer's weights, relative to their norm."""
        with self.timed():
            self.update_ratios = [
                global_norm([p - w for p, w in zip(layer.parameters(), weights, strict=True)])
                / global_norm(weights)
                for layer, weights in zip(self.layers, self.weights, strict=True)
            ]
            self.weights = []

    def stats(self, step: int) -> list[LayerStat]:
        named = {"grad_norm": self.grad_norms, "update_ratio": self.update_ratios}
        return [
            LayerStat(step, layer, name, value)
            for name, values in named.items()
            for layer, value in enumerate(values)
        ]


@torch.no_grad()
def hidden_states(model: nn.Module, input_ids: Tensor) -> tuple[Tensor, ...]:
    """The embedding output and every block's output, in eval mode, as float32."""
    was_training = model.training
    model.eval()
    try:
        output = model(input_ids=input_ids, output_hidden_states=True)
    finally:
        model.train(was_training)
    return tuple(h.float() for h in output.hidden_states)


def hidden_state_stats(model: nn.Module, input_ids: Tensor, step: int) -> list[LayerStat]:
    """`hidden_profile` and `representation_stats` of the model's hidden states, and the
    feature norms of its MLP hidden features (`feature_norm_stats`)."""
    with mlp_features(model) as features:
        hidden = hidden_states(model, input_ids)
    stats = hidden_profile(hidden, step) + representation_stats(hidden, step)
    return stats + feature_norm_stats(features, step)


def hidden_profile(hidden: Sequence[Tensor], step: int) -> list[LayerStat]:
    """RMS, max |activation| and block influence per layer, and the model's peak activation,
    from the embedding output and every block's output."""
    stats = []
    for layer, (h_in, h_out) in enumerate(pairwise(hidden)):
        influence = 1.0 - F.cosine_similarity(h_in, h_out, dim=-1).mean().item()
        stats += [
            LayerStat(step, layer, "hidden_rms", h_out.square().mean().sqrt().item()),
            LayerStat(step, layer, "max_abs_activation", h_out.abs().max().item()),
            LayerStat(step, layer, "block_influence", influence),
        ]
    return stats + peak_activation(hidden[1:], step)


def peak_activation(outputs: Sequence[Tensor], step: int) -> list[LayerStat]:
    """The largest |activation| of the block outputs, and where: layer, position, channel."""
    magnitudes = torch.stack(list(outputs)).abs()
    peak = magnitudes.flatten().argmax()
    layer, _, position, channel = (int(i) for i in torch.unravel_index(peak, magnitudes.shape))
    return [
        LayerStat(step, layer, "peak_activation", magnitudes.flatten()[peak].item()),
        LayerStat(step, layer, "peak_position", float(position)),
        LayerStat(step, layer, "peak_channel", float(channel)),
    ]
