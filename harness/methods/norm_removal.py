"""Removing a pretrained model's norms by fine-tuning (layerwise treatment `remove_norms`).

Heimersheim, 2024, "You can remove GPT2's LayerNorm by fine-tuning", and Baroni, Khara,
Schaeffer and Heimersheim, 2025, "Transformers Don't Need LayerNorm at Inference Time". As the
authors' code does (submarat/removing-layer-norm, `train.py`: `FakeLayerNorm`,
`replace_layernorm_with_fake_layernorm` and the `LNRemover` callback; schedules in `config.py`,
`make_gpt2_standard`; the frozen values from `generate_std_dict.py`), during fine-tuning each norm
in turn stops dividing by its input's own per-token scale and divides instead by one frozen
number for that norm: the scale of its input averaged over a sample of training text. Once every
norm is removed the model has no normalization left: each norm is a fixed linear map.

The schedule (the authors' `LNRemover`, counted as the Trainer's `global_step`, 0 at the first
step): the second norm of each block (`ln_2`; Llama's `post_attention_layernorm`) is removed
block by block, block i at `start + i * gap_mlp`; then the first norm (`ln_1`;
`input_layernorm`) on the path to the queries and keys, block by block every `gap_qk` steps;
then the same norm on the path to the values, every `gap_v` steps (the authors split `ln_1` in
two so that the two paths lose it apart); then the final norm, `gap_v` steps after the last
block's. The defaults are the authors' GPT-2 small schedule (`make_gpt2_standard`: start 20,
gaps 2, 2 and 3; the medium and large schedules scale the same formula by the number of blocks).

The frozen value of a norm is the authors' `generate_std_dict.py` statistic of its input on
training text, skipping position 0 (the first token's scale they keep apart): for a LayerNorm
the standard deviation of every element, `x[:, 1:, :].std()`; for an RMSNorm (Llama, SmolLM2),
which divides by the root mean square instead, the root mean square of the same elements. A
removed LayerNorm still centres its input (`FakeLayerNorm`: (x - mean) / s * w + b); a removed
RMSNorm is x / s * w. The statistic is taken on the first training batch (the authors: one
random training sequence of 1024 tokens, before fine-tuning).

What differs from the paper's setting: GPT-2's weights are not available offline, so the
packaged model is SmolLM2 (RMSNorm, 30 blocks); the authors' first-token (`bos`) and
end-of-text (`eot`) treatments are left out, as their default run leaves them off
(`bos_special_treatment` False, so both steps change nothing); their optional auxiliary loss
(`aux_loss_weight`, 0 in the standard schedule) is not built. Supported: the transformers Llama
family (`model.layers[i].input_layernorm` and `post_attention_layernorm`, `model.norm`, the
values from `self_attn.v_proj`), with LayerNorm or RMSNorm modules, and the built-in `gpt` with
GPT-2's placement (`norm.placement: pre`, its `norm1`, `norm2` and `final_norm`, the values from
`attn.v_proj`) and `norm.type` layernorm (GPT-2's own norm, so the paper's setting exactly) or
rmsnorm, trained from scratch or fine-tuned.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from harness.methods.catalog import RemoveNormsParams
from harness.methods.optimizers import method_params
from harness.spec.sections import LayerwiseSpec


class FrozenScaleNorm(nn.Module):
    """A norm whose division by its input's per-token scale can be replaced by a frozen one.

    It wraps the model's norm (its weight, bias and eps are the wrapped module's) and computes
    two outputs: the one on the path to the queries and keys (all of a norm's output when it has
    one path) and, when `value_path` is set, the one on the path to the values, kept for the
    `ValueInput` that feeds `v_proj` (`removed` and `value_removed` say which are frozen).
    """

    def __init__(self, norm: nn.Module, value_path: bool = False) -> None:
        super().__init__()
        self.norm = norm
        self.centred = isinstance(norm, nn.LayerNorm)
        self.value_path = value_path
        self.removed = False
        self.value_removed = False
        self.scale: Tensor
        self.register_buffer("scale", torch.tensor(float("nan")))
        self.calibrated = False
        self.value_input: Tensor | None = None

    def frozen(self, x: Tensor) -> Tensor:
        """The norm with its per-token scale replaced by the frozen `scale`."""
        weight = getattr(self.norm, "weight", None)
        bias = getattr(self.norm, "bias", None)
        if self.centred:
            x = x - x.mean(-1, keepdim=True)
        out = (x.float() / self.scale).to(x.dtype)
        out = out * weight if weight is not None else out
        return out + bias if bias is not None else out

    def calibrate(self, x: Tensor) -> None:
        """The frozen scale: the authors' statistic of this input, position 0 left out."""
        with torch.no_grad():
            rest = x[:, 1:, :].float()
            value = rest.std() if self.centred else rest.pow(2).mean().sqrt()
            self.scale.fill_(float(value))

    def forward(self, x: Tensor) -> Tensor:
        if not self.calibrated:  # a resumed trial's scale comes back with the model's buffers
            if torch.isnan(self.scale):
                self.calibrate(x)
            self.calibrated = True
        values = self.value_path and self.value_removed != self.removed
        out = self.frozen(x) if self.removed else self.norm(x)
        if self.value_path:
            self.value_input = (
                (self.frozen(x) if self.value_removed else self.norm(x)) if values else out
            )
        return out


class ValueInput(nn.Module):
    """`v_proj` fed the value path's output of its block's first norm (`FrozenScaleNorm`), not
    the query and key path's it is called with (the two differ while only one is removed)."""

    def __init__(self, v_proj: nn.Module, norm: FrozenScaleNorm) -> None:
        super().__init__()
        self.v_proj = v_proj
        self.source = [norm]  # a list: not a second parent of the norm's parameters

    def forward(self, x: Tensor) -> Tensor:
        value_input = self.source[0].value_input
        out: Tensor = self.v_proj(x if value_input is None else value_input)
        return out


Norms = tuple[list[FrozenScaleNorm], list[FrozenScaleNorm], FrozenScaleNorm | None]
"""A model's wrapped norms: each block's first (before attention) and second (before the MLP)
norm, and the final norm (None where the model has none)."""


def model_norms(model: nn.Module) -> Norms:
    """Wrap the norms of a Llama-family model or of a Pre-LN built-in `gpt`, in place."""
    if isinstance(getattr(model, "blocks", None), nn.ModuleList):
        return gpt_norms(model)
    return llama_norms(model)


def llama_norms(model: nn.Module) -> Norms:
    """Wrap a Llama-family model's norms in place: (first norms, second norms, final norm)."""
    base: Any = getattr(model, "model", None)
    layers = getattr(base, "layers", None)
    if not isinstance(layers, nn.ModuleList) or not hasattr(base, "norm"):
        raise ValueError(
            f"remove_norms: {type(model).__name__} is neither a transformers Llama-family model "
            "(model.layers with input_layernorm and post_attention_layernorm, model.norm) nor a "
            "Pre-LN gpt"
        )
    first, second = [], []
    for layer in layers:
        block: Any = layer
        norm = FrozenScaleNorm(block.input_layernorm, value_path=True)
        block.input_layernorm = norm
        block.self_attn.v_proj = ValueInput(block.self_attn.v_proj, norm)
        first.append(norm)
        block.post_attention_layernorm = FrozenScaleNorm(block.post_attention_layernorm)
        second.append(block.post_attention_layernorm)
    final = FrozenScaleNorm(base.norm)
    base.norm = final
    return first, second, final


def gpt_norms(model: nn.Module) -> Norms:
    """Wrap a built-in `gpt`'s norms in place; it must place them as GPT-2 does (`pre`) and be
    LayerNorms or RMSNorms (QK-norms, inside attention, are no norm of the paper's and stay)."""
    from harness.methods.placement import PreNorm

    gpt: Any = model
    first, second = [], []
    for block in gpt.blocks:
        placement = block.placement
        norms = (placement.norm1, placement.norm2) if isinstance(placement, PreNorm) else ()
        if not all(isinstance(n, nn.LayerNorm | nn.RMSNorm) for n in norms) or not norms:
            raise ValueError(
                "remove_norms: a gpt must place its norms as GPT-2 does (`norm.placement: pre`) "
                "with `norm.type` layernorm or rmsnorm"
            )
        placement.norm1 = FrozenScaleNorm(placement.norm1, value_path=True)
        block.attn.v_proj = ValueInput(block.attn.v_proj, placement.norm1)
        placement.norm2 = FrozenScaleNorm(placement.norm2)
        first.append(placement.norm1)
        second.append(placement.norm2)
    final = None
    if isinstance(gpt.final_norm, nn.LayerNorm | nn.RMSNorm):
        final = FrozenScaleNorm(gpt.final_norm)
        gpt.final_norm = final
    return first, second, final


Removal = Callable[[], None]


def removal_schedule(
    first: list[FrozenScaleNorm],
    second: list[FrozenScaleNorm],
    final: FrozenScaleNorm | None,
    params: RemoveNormsParams,
) -> dict[int, list[Removal]]:
    """What is removed at each global step (0 the first step), the authors' `LNRemover`s (a gap
    of 0 removes every block's norm at once, as theirs does)."""
    blocks = len(first)
    start_qk = params.start + blocks * params.gap_mlp
    start_v = start_qk + blocks * params.gap_qk
    schedule: dict[int, list[Removal]] = {}

    def at(step: int, removal: Removal) -> None:
        schedule.setdefault(step, []).append(removal)

    for i in range(blocks):
        at(params.start + i * params.gap_mlp, partial(setattr, second[i], "removed", True))
        at(start_qk + i * params.gap_qk, partial(setattr, first[i], "removed", True))
        at(start_v + i * params.gap_v, partial(setattr, first[i], "value_removed", True))
    if final is not None:
        at(start_v + blocks * params.gap_v, partial(setattr, final, "removed", True))
    return schedule


class NormRemover:
    """Applies the removals of each global step before that step's forward pass: those of step
    0 at once, those of step k after the optimizer's step k - 1."""

    def __init__(
        self, optimizer: torch.optim.Optimizer, schedule: dict[int, list[Removal]]
    ) -> None:
        self.schedule, self.step = schedule, 0
        self.apply()
        optimizer.register_step_post_hook(self.after_step)

    def apply(self) -> None:
        for removal in self.schedule.get(self.step, []):
            removal()

    def after_step(self, *_: Any) -> None:
        self.step += 1
        self.apply()

    def state_dict(self) -> dict[str, int]:
        """What a checkpoint keeps (`harness.runner.checkpoint`): the global step reached."""
        return {"step": self.step}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Resume at the saved step: every removal scheduled up to it applied again (the frozen
        scales come back with the model's buffers)."""
        self.step = state["step"]
        for step, removals in self.schedule.items():
            for removal in removals if step <= self.step else ():
                removal()


def remove_norms(
    optimizer: torch.optim.Optimizer, model: nn.Module, spec: LayerwiseSpec
) -> torch.optim.Optimizer:
    """Remove the model's norms one by one during fine-tuning, on the authors' schedule (see the
    module docstring). The optimizer and every parameter are as without it."""
    params = method_params(spec, RemoveNormsParams)
    first, second, final = model_norms(model)
    NormRemover(optimizer, removal_schedule(first, second, final, params))
    return optimizer
