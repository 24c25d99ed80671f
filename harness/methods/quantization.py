"""Weight quantization of a trained or pretrained model (SPEC 5.6).

Quantized: every nn.Linear inside the decoder blocks (attention and MLP projections); the
embeddings, norms and the LM head keep their dtype. A scheme (registered in QUANTIZERS, with the
bit widths it supports as `bits`) quantizes one block's Linear layers in place and describes what
it stored. `layerwise` (LayerwiseQuant) gives the `fraction_high` most important blocks
`high_bits` and the others `low_bits`, by an importance registered in LAYER_IMPORTANCE (higher is
more important).

A scheme registered with `calibrated=True` (GPTQ) also gets the calibration inputs of its block:
blocks are quantized in order, each on the outputs of the already quantized blocks before it, as
GPTQ's authors do (`opt_sequential` in github.com/IST-DASLab/gptq, opt.py / llama.py).

The schemes a library implements (hqq, torchao, optimum-quanto) are in
`harness.methods.quantization_libraries`, the importances in `harness.methods.layer_importance`.

Reported size convention: a quantized weight costs `bits` per value plus one 16-bit scale per
group (symmetric) or a 16-bit scale and a 16-bit zero point per group (asymmetric), so
effective bits = bits + 16 * (1 or 2) / group_size, with a whole row as the group when the
scheme is per-channel. The effective bits are the parameter-weighted mean over quantized weights;
model bytes add every other parameter at its dtype.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import Tensor, nn

from harness.methods.layers import blocks, linears
from harness.methods.pruning import highest
from harness.registry import LAYER_IMPORTANCE, QUANTIZERS
from harness.spec.constraints import quantize_problems
from harness.spec.sections import QuantizeSpec
from harness.utils import intra_op_threads

GPTQ_BATCH = 128  # columns per lazy batch update (the authors' `blocksize`)


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


@dataclass(frozen=True)
class BlockCall:
    """The positional and keyword arguments of one call of a decoder block."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]


Scheme = Callable[[nn.Module, int, QuantizeSpec], list[QuantizedWeight]]
CalibratedScheme = Callable[[nn.Module, int, QuantizeSpec, list[BlockCall]], list[QuantizedWeight]]
Importance = Callable[[nn.Module, list[Tensor]], list[float]]


def quantize_model(
    model: nn.Module, spec: QuantizeSpec, calibration: list[Tensor]
) -> tuple[nn.Module, QuantReport]:
    """Quantize the Linear layers of `model`'s blocks in place by `spec`; return it and a report."""
    entry = QUANTIZERS.entry(spec.scheme)
    for _, message in quantize_problems(spec, entry, None):
        raise ValueError(message)
    bits = block_bits(model, spec, calibration)
    kept_bytes = unquantized_bytes(model)
    with torch.no_grad():
        if entry.calibrated:
            calibrated = cast(CalibratedScheme, entry.obj)  # entry.calibrated: GPTQ's signature
            weights = quantize_in_sequence(model, bits, spec, calibrated, calibration)
        else:
            scheme: Scheme = entry.obj
            weights = [
                w
                for block, b in zip(blocks(model), bits, strict=True)
                for w in scheme(block, b, spec)
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


class _Caught(Exception):
    """Stops a forward pass once the first block's inputs are caught."""


def first_block_calls(model: nn.Module, calibration: list[Tensor]) -> list[BlockCall]:
    """The first block's inputs for each calibration batch (the authors' `Catcher`)."""
    calls: list[BlockCall] = []

    def catch(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        calls.append(BlockCall(args, kwargs))
        raise _Caught

    handle = blocks(model)[0].register_forward_pre_hook(catch, with_kwargs=True)
    try:
        for batch in calibration:
            with suppress(_Caught):
                model(input_ids=batch, use_cache=False)
    finally:
        handle.remove()
    return calls


def with_hidden(call: BlockCall, output: Any) -> BlockCall:
    """`call` with its hidden states replaced by a block's `output` (the next block's input)."""
    hidden = output[0] if isinstance(output, tuple) else output
    if call.args:
        return BlockCall((hidden, *call.args[1:]), call.kwargs)
    return BlockCall(call.args, {**call.kwargs, "hidden_states": hidden})


def quantize_in_sequence(
    model: nn.Module,
    bits: list[int],
    spec: QuantizeSpec,
    scheme: CalibratedScheme,
    calibration: list[Tensor],
) -> list[QuantizedWeight]:
    """Quantize block i on the outputs of quantized blocks 0..i-1, then run it for block i+1."""
    if not calibration:
        raise ValueError(f"quantization scheme '{spec.scheme}' needs calibration batches")
    was_training = model.training
    model.eval()
    try:
        calls = first_block_calls(model, calibration)
        weights = []
        for block, width in zip(blocks(model), bits, strict=True):
            weights += scheme(block, width, spec, calls)
            calls = [with_hidden(call, block(*call.args, **call.kwargs)) for call in calls]
    finally:
        model.train(was_training)
    return weights


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


def round_to_grid(values: Tensor, scale: Tensor, zero: Tensor, bits: int) -> Tensor:
    """Quantize-dequantize `values` to the nearest of the 2^bits levels (q - zero) * scale."""
    q = torch.clamp(torch.round(values / scale) + zero, 0, 2**bits - 1)
    return (q - zero) * scale


def fake_quantize(weight: Tensor, bits: int, group: int, symmetric: bool) -> Tensor:
    """Round-to-nearest quantize-dequantize of `weight`, one scale per `group` values of a row."""
    groups = weight.float().reshape(-1, group)
    scale, zero = rtn_grid(groups, bits, symmetric)
    return round_to_grid(groups, scale, zero, bits).reshape(weight.shape).to(weight.dtype)


def rtn(block: nn.Module, bits: int, spec: QuantizeSpec) -> list[QuantizedWeight]:
    """Round-to-nearest fake quantization in place (GPTQ's RTN baseline, Frantar et al., 2023)."""
    weights = []
    for linear in linears(block):
        group = group_size(linear, spec.group_size)
        linear.weight.copy_(fake_quantize(linear.weight, bits, group, spec.symmetric))
        weights.append(stored(linear, bits, group, spec.symmetric))
    return weights


class Hessian:
    """GPTQ's layer Hessian H = 2/n sum_t x_t x_t^T over the n calibration tokens of its input."""

    def __init__(self, columns: int, device: torch.device) -> None:
        self.sum = torch.zeros(columns, columns, device=device)
        self.n = 0

    def add(self, inputs: Tensor) -> None:
        x = inputs.reshape(-1, inputs.shape[-1]).float()
        self.sum.addmm_(x.T, x)
        self.n += len(x)

    def matrix(self) -> Tensor:
        if not self.n:
            raise ValueError("a GPTQ layer saw no calibration tokens")
        return 2 * self.sum / self.n


def gptq_quantize(
    weight: Tensor,
    hessian: Tensor,
    bits: int,
    group: int,
    symmetric: bool,
    damp: float = 0.01,
    act_order: bool = False,
) -> Tensor:
    """GPTQ (Frantar et al., 2023, arXiv 2210.17323, Algorithm 1) of one weight; returns Q.

    Follows the authors' `GPTQ.fasterquant` (github.com/IST-DASLab/gptq, gptq.py): dead inputs
    (H_jj = 0) get H_jj = 1 and a zero weight; H += damp * mean(diag(H)) * I; the upper Cholesky
    factor of H^-1; columns are quantized one at a time on GPTQ's min/max grid (`rtn_grid`), each
    column's error (w - q) / [H^-1]_jj fed back into the columns not yet quantized, within a lazy
    batch at once and into later batches after it. The grid of a group is found when its first
    column comes up, on the error-updated weights. Batches are gcd(group, 128) columns so that
    every group starts a batch (the reference, with batches of 128, finds a group that starts
    mid-batch on weights without that batch's updates so far; at group size 128 the two agree).
    `act_order` quantizes columns by decreasing diag(H) with the grids fixed beforehand on the
    original column groups (the reference's `--act-order --static-groups`), so the stored layout
    is that of RTN. With H = I no error is fed back and Q is RTN's.

    Runs on one thread: its column loop is thousands of operations on a few thousand values
    each, where torch's intra-op threads cost more than they save (on two busy CPU cores, a
    576 x 1536 weight took 1 s on one thread and 18 s on two).
    """
    with intra_op_threads(1):
        return _gptq_columns(weight, hessian, bits, group, symmetric, damp, act_order)


def _gptq_columns(
    weight: Tensor,
    hessian: Tensor,
    bits: int,
    group: int,
    symmetric: bool,
    damp: float,
    act_order: bool,
) -> Tensor:
    w = weight.float().clone()
    h = hessian.float().clone()
    columns = w.shape[1]
    dead = torch.diag(h) == 0
    h[dead, dead] = 1
    w[:, dead] = 0
    static = None
    if act_order:
        scale, zero = rtn_grid(w.reshape(-1, group), bits, symmetric)
        static = scale.reshape(len(w), -1), zero.reshape(len(w), -1)
    order = torch.argsort(torch.diag(h), descending=True) if act_order else torch.arange(columns)
    w, h = w[:, order], h[order][:, order]
    h.diagonal().add_(damp * torch.mean(torch.diag(h)))
    h_inv = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True)
    q = torch.zeros_like(w)
    batch = math.gcd(group, GPTQ_BATCH)
    for i1 in range(0, columns, batch):
        i2 = min(i1 + batch, columns)
        w1, errors = w[:, i1:i2].clone(), torch.zeros(len(w), i2 - i1, device=w.device)
        h_inv1 = h_inv[i1:i2, i1:i2]
        if static is None and i1 % group == 0:
            scale, zero = rtn_grid(w[:, i1 : i1 + group], bits, symmetric)
        for i in range(i2 - i1):
            if static is not None:
                g = int(order[i1 + i]) // group
                scale, zero = static[0][:, g : g + 1], static[1][:, g : g + 1]
            column = w1[:, i : i + 1]
            q[:, i1 + i : i1 + i + 1] = round_to_grid(column, scale, zero, bits)
            error = (column - q[:, i1 + i : i1 + i + 1]) / h_inv1[i, i]
            w1[:, i:] -= error * h_inv1[i, i:]  # an outer product, off BLAS (tiny)
            errors[:, i : i + 1] = error
        w[:, i2:] -= errors @ h_inv[i1:i2, i2:]
    return q[:, torch.argsort(order)].to(weight.dtype)


def gptq(
    block: nn.Module, bits: int, spec: QuantizeSpec, calls: list[BlockCall]
) -> list[QuantizedWeight]:
    """GPTQ (Frantar et al., 2023): Hessian-aware column-wise quantization with error feedback.

    In-house reference of the authors' code (github.com/IST-DASLab/gptq, gptq.py and the
    sequential loop of opt.py / llama.py; see `gptq_quantize`): every Linear of the block gets
    its Hessian from its inputs over the block's calibration calls, all from one pass of the
    unquantized block (the reference's default, without `--true-sequential`), then is quantized.
    GPTQModel needs torch >= 2.14 and llm-compressor pins transformers <= 5.17, so neither is used.
    """
    device = next(block.parameters()).device
    hessians = {linear: Hessian(linear.in_features, device) for linear in linears(block)}
    handles = [
        linear.register_forward_pre_hook(lambda module, args: hessians[module].add(args[0]))
        for linear in hessians
    ]
    try:
        for call in calls:
            block(*call.args, **call.kwargs)
    finally:
        for handle in handles:
            handle.remove()
    weights = []
    for linear, hessian in hessians.items():
        group = group_size(linear, spec.group_size)
        linear.weight.copy_(
            gptq_quantize(
                linear.weight,
                hessian.matrix(),
                bits,
                group,
                spec.symmetric,
                spec.damp,
                spec.act_order,
            )
        )
        weights.append(stored(linear, bits, group, spec.symmetric))
    return weights
