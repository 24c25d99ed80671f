"""Layer diagnostics of a pretrained model as it is evaluated (no training: step 0).

The statistics trained models record (`harness.diagnostics.hidden_profile`, effective rank and
tokenwise share), plus attention-sink mass per layer and head: the mean attention a query pays
to the first token (StreamingLLM, Xiao et al. 2024, "Efficient Streaming Language Models with
Attention Sinks"; Gu et al. 2025, "When Attention Sink Emerges in Language Models"), averaged
over the probe batch and the queries after the first (which can attend only to it). The probe
batch is fixed: the first windows of the task's calibration text.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

from harness.diagnostics import hidden_profile
from harness.diagnostics_geometry import feature_norm_stats, mlp_features, representation_stats
from harness.methods.layers import blocks
from harness.records import LayerStat
from harness.tasks.base import EvalTask

PROBE_SAMPLES = 4
PROBE_LENGTH = 128
"""The probe batch: this many calibration windows of this many tokens."""


def probe_batch(task: EvalTask, device: torch.device) -> Tensor:
    """The fixed probe windows of the task's calibration text, as one batch."""
    windows = torch.cat(task.calibration(PROBE_SAMPLES, PROBE_LENGTH))[:PROBE_SAMPLES]
    return windows.to(device)


@contextmanager
def eager_attention(model: nn.Module) -> Iterator[None]:
    """Attention computed eagerly, so a forward can return its weights (fused kernels cannot);
    the model's own implementation is restored after."""
    config: Any = getattr(model, "config", None)
    saved = getattr(config, "_attn_implementation", None)
    if config is not None:
        config._attn_implementation = "eager"
    try:
        yield
    finally:
        if config is not None:
            config._attn_implementation = saved


@torch.no_grad()
def forward_with_attention(model: nn.Module, input_ids: Tensor) -> tuple[tuple[Tensor, ...], Any]:
    """The embedding output and every block's output (float32), and the attention weights
    (None for a model that does not return them), of one eval-mode forward.

    transformers' last hidden state has the final norm applied: the last block's own output is
    taken from a hook instead, as for every other block."""
    last: list[Tensor] = []

    def keep(module: nn.Module, args: Any, output: Any) -> None:
        last.append(output[0] if isinstance(output, tuple) else output)

    was_training = model.training
    model.eval()
    hook = blocks(model)[-1].register_forward_hook(keep)
    try:
        with eager_attention(model):
            output = model(input_ids=input_ids, output_hidden_states=True, output_attentions=True)
    finally:
        hook.remove()
        model.train(was_training)
    hidden = (*output.hidden_states[:-1], last[-1])
    return tuple(h.float() for h in hidden), getattr(output, "attentions", None)


def attention_sink_stats(attentions: Sequence[Tensor], step: int) -> list[LayerStat]:
    """Per layer: `attention_sink` (mean over heads), `attention_sink_max` (the largest head)
    and `attention_sink/head_<h>`, each the mean weight on the first token over the queries
    after it. `attentions[l]` is (batch, heads, queries, keys)."""
    stats = []
    for layer, weights in enumerate(attentions):
        per_head = weights[:, :, 1:, 0].float().mean(dim=(0, 2))
        stats += [
            LayerStat(step, layer, "attention_sink", per_head.mean().item()),
            LayerStat(step, layer, "attention_sink_max", per_head.max().item()),
        ]
        stats += [
            LayerStat(step, layer, f"attention_sink/head_{head}", value)
            for head, value in enumerate(per_head.tolist())
        ]
    return stats


def attention_sinks(model: nn.Module, input_ids: Tensor, step: int) -> list[LayerStat]:
    """`attention_sink_stats` of `model` on the probe batch (a fine-tuned model's, before and
    after; its other layer statistics come from training's own diagnostics)."""
    _, attentions = forward_with_attention(model, input_ids)
    return attention_sink_stats(attentions, step) if attentions else []


def pretrained_layer_stats(model: nn.Module, input_ids: Tensor, step: int = 0) -> list[LayerStat]:
    """Hidden RMS, massive activations, block influence, effective rank, tokenwise share,
    feature norms and attention-sink mass of `model` on the probe batch."""
    with mlp_features(model) as features:
        hidden, attentions = forward_with_attention(model, input_ids)
    stats = hidden_profile(hidden, step) + representation_stats(hidden, step)
    stats += feature_norm_stats(features, step)
    return stats + (attention_sink_stats(attentions, step) if attentions else [])
