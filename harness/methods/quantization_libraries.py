"""The quantization schemes a library implements: HQQ (`hqq`), torchao's int8 and int4, and
optimum-quanto (see `harness.methods.quantization` for what a scheme does and reports). Each
imports its library in its body: they take seconds to import.
"""

from __future__ import annotations

import torch
from torch import nn

from harness.methods.layers import linears
from harness.methods.quantization import QuantizedWeight, group_size, stored
from harness.spec.sections import QuantizeSpec

HQQ_GROUPED_AXIS = 0  # groups of `group_size` weights down a column: the authors' low-bit setting
HQQ_ROW_AXIS = 1  # one group per output row


def hqq(block: nn.Module, bits: int, spec: QuantizeSpec) -> list[QuantizedWeight]:
    """HQQ (Badri & Shaji, 2023, Half-Quadratic Quantization) by the `hqq` package; no data.

    `hqq.core.quantize.HQQLinear` with the package's base config (`hqq_base_quant_config`:
    affine, zero point optimized by the half-quadratic solver, zero rounded at 4 bits) quantizes
    each weight on the tensor's device; the Linear keeps the dequantized weight, which is what
    HQQLinear's pure-torch backend multiplies by. Scale and zero are counted at 16 bits per group
    (hqq keeps them in its compute dtype, fp16 on GPU).

    With a group size, groups run along the output dimension (`axis=0`), the authors' quality
    setting: "In general axis=0 gives better results than axis=1, especially at lower bits"
    (github.com/mobiusml/hqq, Readme.md), and their Llama-2 benchmark quantizes 3 bits with
    `group_size=64, axis=0` (examples/llama2_benchmark/quant_llama2_hqq_demo.py); the package's
    default `axis=1` is the one its fast inference kernels need. Without a group size the scale
    is per output row (`axis=1`, as for the other schemes). Same number of groups either way.
    """
    from hqq.core.quantize import HQQLinear, hqq_base_quant_config

    weights = []
    for linear in linears(block):
        group = group_size(linear, spec.group_size)
        if group % 8:
            raise ValueError(f"hqq needs a group size that is a multiple of 8, not {group}")
        axis = HQQ_GROUPED_AXIS if spec.group_size else HQQ_ROW_AXIS
        layer = HQQLinear(
            linear,
            hqq_base_quant_config(nbits=bits, group_size=group, axis=axis),
            del_orig=False,
            compute_dtype=torch.float32,
            device=str(linear.weight.device),
        )
        linear.weight.copy_(layer.dequantize().reshape(linear.weight.shape))
        weights.append(stored(linear, bits, group, symmetric=False))
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
