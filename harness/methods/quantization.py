"""Weight quantization of a trained or pretrained model (SPEC 5.6).

Quantized: every nn.Linear inside the decoder blocks (attention and MLP projections); the
embeddings, norms and the LM head keep their dtype. A scheme (registered in QUANTIZERS, with the
bit widths it supports as `bits`) quantizes one block's Linear layers in place and describes what
it stored. `layerwise` (LayerwiseQuant) gives the `fraction_high` most important blocks
`high_bits` and the others `low_bits`, by an importance registered in LAYER_IMPORTANCE (higher is
more important).

torchao and optimum-quanto are imported by their schemes only (they take seconds to import).

Reported size convention: a quantized weight costs `bits` per value plus one 16-bit scale per
group (symmetric) or a 16-bit scale and a 16-bit zero point per group (asymmetric), so
effective bits = bits + 16 * (1 or 2) / group_size, with a whole row as the group when the
scheme is per-channel. The effective bits are the parameter-weighted mean over quantized weights;
model bytes add every other parameter at its dtype.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from harness.methods.layers import blocks, linears
from harness.methods.pruning import highest, mean_cosines
from harness.registry import LAYER_IMPORTANCE, QUANTIZERS
from harness.spec.constraints import quantize_problems
from harness.spec.schema import QuantizeSpec


@dataclass(frozen=True)
class QuantReport:
    """Effective bits per quantized weight, model bytes after quantization, bits of each block."""

    effective_bits: float
    model_bytes: int
    bits_per_layer: dict[int, int]


@dataclass(frozen=True)
class QuantizedWeight:
    """What one quantized weight stores: `bits` per value, `params` 16-bit numbers per group."""

    numel: int
    bits: int
    group_size: int
    params: int

    @property
    def effective_bits(self) -> float:
        return self.bits + 16 * self.params / self.group_size

    @property
    def nbytes(self) -> int:
        return (
            math.ceil(self.numel * self.bits / 8) + 2 * self.params * self.numel // self.group_size
        )


def stored(linear: nn.Linear, bits: int, group: int, symmetric: bool) -> QuantizedWeight:
    """What `linear.weight` stores at `bits` with a scale (and a zero point) per group."""
    return QuantizedWeight(linear.weight.numel(), bits, group, 1 if symmetric else 2)


Scheme = Callable[[nn.Module, int, QuantizeSpec], list[QuantizedWeight]]
Importance = Callable[[nn.Module, list[Tensor]], list[float]]


def quantize_model(
    model: nn.Module, spec: QuantizeSpec, calibration: list[Tensor]
) -> tuple[nn.Module, QuantReport]:
    """Quantize the Linear layers of `model`'s blocks in place by `spec`; return it and a report."""
    entry = QUANTIZERS.entry(spec.scheme)
    for _, message in quantize_problems(spec, entry, None):
        raise ValueError(message)
    bits = block_bits(model, spec, calibration)
    scheme: Scheme = entry.obj
    kept_bytes = unquantized_bytes(model)
    with torch.no_grad():
        weights = [
            w for block, b in zip(blocks(model), bits, strict=True) for w in scheme(block, b, spec)
        ]
    quantized = sum(w.numel for w in weights)
    report = QuantReport(
        effective_bits=sum(w.numel * w.effective_bits for w in weights) / quantized,
        model_bytes=kept_bytes + sum(w.nbytes for w in weights),
        bits_per_layer=dict(enumerate(bits)),
    )
    return model, report


def block_bits(model: nn.Module, spec: QuantizeSpec, calibration: list[Tensor]) -> list[int]:
    """The bits of each block: `spec.bits`, or the layerwise policy's high / low bits."""
    n_blocks = len(blocks(model))
    policy = spec.layerwise
    if policy is None:
        return [spec.bits] * n_blocks
    importance_of: Importance = LAYER_IMPORTANCE.get(policy.importance)
    importance = importance_of(model, calibration)
    n_high = int(policy.fraction_high * n_blocks + 0.5)
    high = set(highest(dict(enumerate(importance)), n_high))
    low_bits = spec.bits if policy.low_bits is None else policy.low_bits
    return [policy.high_bits if i in high else low_bits for i in range(n_blocks)]


def unquantized_bytes(model: nn.Module) -> int:
    """Bytes of every parameter (shared ones once) except the blocks' Linear weights."""
    quantized = {id(linear.weight) for linear in linears(blocks(model))}
    params = {id(p): p for p in model.parameters() if id(p) not in quantized}
    return sum(p.numel() * p.element_size() for p in params.values())


def group_size(linear: nn.Linear, size: int | None) -> int:
    """The quantization group along a row of `linear.weight`: `size`, or the whole row."""
    if size is None:
        return linear.in_features
    if linear.in_features % size:
        raise ValueError(f"group_size {size} does not divide in_features {linear.in_features}")
    return size


def rtn_grid(groups: Tensor, bits: int, symmetric: bool) -> tuple[Tensor, Tensor]:
    """Scale and zero point of each row of `groups` on the 2^bits-level grid (GPTQ's quantizer).

    The range is [min(w, 0), max(w, 0)] (symmetric: [-max|w|, max|w|], zero point at the middle).
    """
    maxq = 2**bits - 1
    lo = groups.amin(dim=1, keepdim=True).clamp(max=0)
    hi = groups.amax(dim=1, keepdim=True).clamp(min=0)
    if symmetric:
        hi = torch.maximum(-lo, hi)
        lo = -hi
    scale = (hi - lo) / maxq
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    zero = torch.full_like(scale, (maxq + 1) / 2) if symmetric else torch.round(-lo / scale)
    return scale, zero


def fake_quantize(weight: Tensor, bits: int, group: int, symmetric: bool) -> Tensor:
    """Round-to-nearest quantize-dequantize of `weight`, one scale per `group` values of a row."""
    groups = weight.float().reshape(-1, group)
    scale, zero = rtn_grid(groups, bits, symmetric)
    q = torch.clamp(torch.round(groups / scale) + zero, 0, 2**bits - 1)
    return ((q - zero) * scale).reshape(weight.shape).to(weight.dtype)


def rtn(block: nn.Module, bits: int, spec: QuantizeSpec) -> list[QuantizedWeight]:
    """Round-to-nearest fake quantization in place (GPTQ's RTN baseline, Frantar et al., 2023)."""
    weights = []
    for linear in linears(block):
        group = group_size(linear, spec.group_size)
        linear.weight.copy_(fake_quantize(linear.weight, bits, group, spec.symmetric))
        weights.append(stored(linear, bits, group, spec.symmetric))
    return weights


def torchao_int8(block: nn.Module, bits: int, spec: QuantizeSpec) -> list[QuantizedWeight]:
    """torchao int8 weight-only quantization (Int8WeightOnlyConfig: per-channel, symmetric)."""
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    weights = [stored(linear, 8, linear.in_features, symmetric=True) for linear in linears(block)]
    quantize_(block, Int8WeightOnlyConfig())
    return weights


def torchao_int4(block: nn.Module, bits: int, spec: QuantizeSpec) -> list[QuantizedWeight]:
    """torchao int4 weight-only quantization (IntxWeightOnlyConfig, which runs on CPU)."""
    from torchao.quantization import IntxWeightOnlyConfig, MappingType, quantize_
    from torchao.quantization.granularity import PerAxis, PerGroup

    weights = [
        stored(linear, 4, group_size(linear, spec.group_size), spec.symmetric)
        for linear in linears(block)
    ]
    config = IntxWeightOnlyConfig(
        weight_dtype=torch.int4,
        granularity=PerAxis(0) if spec.group_size is None else PerGroup(spec.group_size),
        mapping_type=MappingType.SYMMETRIC if spec.symmetric else MappingType.ASYMMETRIC,
    )
    quantize_(block, config)
    return weights


def quanto(block: nn.Module, bits: int, spec: QuantizeSpec) -> list[QuantizedWeight]:
    """optimum-quanto weights: qint8 per-channel symmetric; qint4 / qint2 affine, groups of <= 128.

    The quantized model runs under torch.no_grad() (not inference_mode).
    """
    from optimum.quanto import QModuleMixin, freeze, qint2, qint4, qint8, quantize

    quantize(block, weights={8: qint8, 4: qint4, 2: qint2}[bits])
    freeze(block)
    return [
        stored(module, bits, module.weight_group_size or module.in_features, symmetric=bits == 8)
        for module in block.modules()
        if isinstance(module, QModuleMixin)
    ]


def cosine_importance(model: nn.Module, calibration: list[Tensor]) -> list[float]:
    """LIM (Dumitru et al., 2024, LayerwiseQuant): -E_tokens[cos(x_in, x_out)] of each block.

    A block that changes its input more is more important; the cosine is averaged over tokens.
    """
    if not calibration:
        raise ValueError("layerwise importance 'cosine' needs calibration batches")
    return [-cosine for cosine in mean_cosines(model, calibration, "block")]


def z_outlier_fraction(block: nn.Module) -> float:
    """The fraction of a block's Linear weights more than one std above their mean (z > 1)."""
    weights = torch.cat([linear.weight.detach().float().flatten() for linear in linears(block)])
    z = (weights - weights.mean()) / weights.std()
    return float((z > 1).double().mean())


def outlier_importance(model: nn.Module, calibration: list[Tensor]) -> list[float]:
    """ZD (Dumitru et al., 2024, LayerwiseQuant): -(fraction of weights with z-score > 1).

    The paper counts a layer's weights "much larger than average (smaller is better)": the
    fewer such outliers, the more important the block. Mean and std are over all its Linear weights.
    """
    return [-z_outlier_fraction(block) for block in blocks(model)]


def position_importance(model: nn.Module, calibration: list[Tensor]) -> list[float]:
    """Baseline: earlier blocks are more important (importance -index)."""
    return [-float(i) for i in range(len(blocks(model)))]


def random_importance(model: nn.Module, calibration: list[Tensor]) -> list[float]:
    """Baseline: a U(0, 1) importance per block from torch's global generator (seeded per trial)."""
    return torch.rand(len(blocks(model))).tolist()
