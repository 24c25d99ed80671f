"""Weight quantization (SPEC 5.6): the RTN reference's error bound, the layerwise policy, the
reported bits and bytes, torchao / optimum-quanto models that run close to the original, GPTQ
against RTN, HQQ's grid and error, and which bits and options each scheme accepts."""

from __future__ import annotations

import copy
import itertools
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import Tensor, nn

from harness.methods.layers import blocks, linears
from harness.methods.quantization import (
    block_bits,
    fake_quantize,
    first_block_calls,
    gptq_quantize,
    quantize_model,
    with_hidden,
)
from harness.registry import LAYER_IMPORTANCE, QUANTIZERS
from harness.spec import SuiteError, load_suite
from harness.spec.sections import QuantizeSpec
from tests.factories import ROOT, tiny_gpt, tiny_llama, write_suite

VOCAB = 40
# Per block: q, k, v, o are 32x32, up is d_ff x 32, down is 32 x d_ff.
SMALL = {"n_layers": 2, "d_model": 32, "n_heads": 4, "d_ff": 64, "mlp": "gelu", "max_seq_len": 32}


def gpt(**fields: Any) -> nn.Module:
    return tiny_gpt(vocab_size=VOCAB, **{**SMALL, **fields}).eval()


@pytest.fixture(scope="module")
def calibration() -> list[Tensor]:
    generator = torch.Generator().manual_seed(1)
    return [torch.randint(0, VOCAB, (4, 16), generator=generator)]


def logits(model: nn.Module, batch: Tensor) -> Tensor:
    with torch.no_grad():
        return model(input_ids=batch).logits


def grid_step(weight: Tensor, bits: int, group: int, symmetric: bool) -> Tensor:
    """The quantization step of each value's group, from the range [min(w, 0), max(w, 0)]."""
    groups = weight.reshape(-1, group)
    lo, hi = groups.min(1, keepdim=True).values.clamp(max=0), groups.max(1, keepdim=True).values
    hi = hi.clamp(min=0)
    span = 2 * torch.maximum(-lo, hi) if symmetric else hi - lo
    return (span / (2**bits - 1)).expand_as(groups).reshape(weight.shape)


def rounding(weight: Tensor) -> float:
    """float32 rounding slack: the largest value on the grid's edge errs by exactly half a step."""
    return 4 * torch.finfo(torch.float32).eps * float(weight.abs().max())


@pytest.mark.parametrize("bits", range(2, 9))
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("group", [16, 64])
def test_rtn_error_is_at_most_half_a_step(bits: int, symmetric: bool, group: int) -> None:
    torch.manual_seed(bits)
    weight = torch.randn(8, 64) * 0.1 + 0.03
    weight[3, 5] = 1.5  # an outlier widens its group's step
    step = grid_step(weight, bits, group, symmetric)
    quantized = fake_quantize(weight, bits, group, symmetric)
    assert ((weight - quantized).abs() <= step / 2 + rounding(weight)).all()
    levels = quantized / step
    torch.testing.assert_close(levels, levels.round(), rtol=0, atol=1e-3)
    for row in quantized.reshape(-1, group):
        assert len(row.unique()) <= 2**bits
    assert (weight - quantized).abs().max() > 0


def llama() -> nn.Module:
    return tiny_llama(VOCAB, n_layers=2)


BLOCK_LINEARS = {
    "gpt": (gpt, r"blocks\.\d\.(attn|mlp)\.\w+_proj\.weight", 12),
    "llama": (llama, r"model\.layers\.\d\.(self_attn|mlp)\.\w+_proj\.weight", 14),
}


@pytest.mark.parametrize("kind", ["gpt", "llama"])
def test_rtn_quantizes_only_the_blocks_linear_weights(kind: str, calibration: list[Tensor]) -> None:
    build, pattern, count = BLOCK_LINEARS[kind]
    model = build()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    spec = QuantizeSpec(scheme="rtn", bits=3, group_size=16, symmetric=False)
    quantized, _ = quantize_model(model, spec, calibration)
    changed = 0
    for name, param in quantized.named_parameters():
        if re.fullmatch(pattern, name):
            step = grid_step(before[name], 3, 16, symmetric=False)
            assert ((param - before[name]).abs() <= step / 2 + rounding(before[name])).all()
            changed += not torch.equal(param, before[name])
        else:
            assert torch.equal(param, before[name]), name
    assert changed == count


def nominal_bytes(model: nn.Module, quantized_weight_bytes: int) -> int:
    """Parameter bytes, the blocks' Linear weights counted at their quantized size."""
    params = {id(p): p for p in model.parameters()}
    total = sum(p.numel() * p.element_size() for p in params.values())
    return (
        total
        - sum(lin.weight.numel() * lin.weight.element_size() for lin in linears(blocks(model)))
        + quantized_weight_bytes
    )


@pytest.mark.parametrize(
    ("spec", "effective_bits", "block_bytes"),
    [
        # per-channel symmetric 4 bit: 32-wide rows (4 + 16/32) but down_proj's 64 (4 + 16/64)
        (QuantizeSpec(scheme="rtn", bits=4), (6144 * 4.5 + 2048 * 4.25) / 8192, 4096 + 224 * 2),
        # groups of 16, asymmetric 3 bit: 3 + 2 * 16 / 16; 3072 data bytes, 512 groups x 2 x 2 bytes
        (QuantizeSpec(scheme="rtn", bits=3, group_size=16, symmetric=False), 5.0, 3072 + 2048),
    ],
)
def test_effective_bits_and_bytes_by_hand(
    spec: QuantizeSpec, effective_bits: float, block_bytes: int, calibration: list[Tensor]
) -> None:
    model = gpt()
    expected_bytes = nominal_bytes(model, 2 * block_bytes)
    _, report = quantize_model(model, spec, calibration)
    assert report.effective_bits == pytest.approx(effective_bits)
    assert report.model_bytes == expected_bytes
    assert report.bits_per_layer == {0: spec.bits, 1: spec.bits}


def block_cosines(model: nn.Module, batch: Tensor) -> list[float]:
    with torch.no_grad():
        hidden = [
            h.flatten(0, 1).double() for h in model(batch, output_hidden_states=True).hidden_states
        ]
    return [
        float(torch.nn.functional.cosine_similarity(x, y, dim=-1).mean())
        for x, y in itertools.pairwise(hidden)
    ]


def outlier_fractions(model: nn.Module) -> list[float]:
    fractions = []
    for block in blocks(model):
        weights = np.concatenate(
            [linear.weight.detach().numpy().ravel() for linear in linears(block)]
        )
        z = (weights - weights.mean()) / weights.std(ddof=1)
        fractions.append(float((z > 1).mean()))
    return fractions


def top(values: list[float], n: int) -> set[int]:
    return set(sorted(range(len(values)), key=lambda i: -values[i])[:n])


@pytest.mark.parametrize("importance", ["cosine", "outliers", "position", "random"])
def test_layerwise_gives_high_bits_to_the_most_important_blocks(
    importance: str, calibration: list[Tensor]
) -> None:
    model = gpt(n_layers=6)
    expected_importance = {
        "cosine": [-c for c in block_cosines(model, calibration[0])],  # LIM
        "outliers": [-f for f in outlier_fractions(model)],  # ZD: fewer outliers, more important
        "position": [-float(i) for i in range(6)],
        "random": torch.rand(6, generator=torch.Generator().manual_seed(5)).tolist(),
    }[importance]
    high = top(expected_importance, 2)  # fraction_high 0.3 of 6 blocks, rounded
    policy = {"importance": importance, "high_bits": 8, "low_bits": 2, "fraction_high": 0.3}
    torch.manual_seed(5)
    _, report = quantize_model(
        model, QuantizeSpec(scheme="rtn", bits=4, layerwise=policy), calibration
    )
    assert report.bits_per_layer == {i: 8 if i in high else 2 for i in range(6)}
    for i, block in enumerate(blocks(model)):
        for linear in linears(block):
            levels = max(len(row.unique()) for row in linear.weight)
            assert (levels > 4) == (i in high)
    if importance != "random":
        torch.manual_seed(5)
        scores = LAYER_IMPORTANCE.get(importance)(gpt(n_layers=6), calibration)
        assert scores == pytest.approx(expected_importance, abs=1e-6)


def test_layerwise_effective_bits_mix_the_blocks(calibration: list[Tensor]) -> None:
    policy = {"importance": "position", "high_bits": 8, "fraction_high": 0.5}
    _, report = quantize_model(
        gpt(), QuantizeSpec(scheme="rtn", bits=4, layerwise=policy), calibration
    )
    assert report.bits_per_layer == {0: 8, 1: 4}
    overhead = (6144 * 16 / 32 + 2048 * 16 / 64) / 8192
    assert report.effective_bits == pytest.approx((8 + overhead + 4 + overhead) / 2)


def library_scales(weight: Tensor) -> int:
    """How many scales and (non-zero) zero points a torchao / quanto weight tensor stores."""
    names, _ = weight.__tensor_flatten__()
    scales = [getattr(weight, name) for name in ("scale", "_scale") if name in names]
    zeros = [getattr(weight, name) for name in ("zero_point", "_shift") if name in names]
    return sum(t.numel() for t in scales) + sum(t.numel() for t in zeros if t.any())


@pytest.mark.parametrize(
    ("spec", "fields", "effective_bits"),
    [
        (QuantizeSpec(scheme="torchao_int8"), {}, (6144 * 8.5 + 2048 * 8.25) / 8192),
        (QuantizeSpec(scheme="quanto", bits=8), {}, (6144 * 8.5 + 2048 * 8.25) / 8192),
        (QuantizeSpec(scheme="torchao_int4", bits=4, group_size=16, symmetric=False), {}, 6.0),
        # quanto qint4 / qint2 are affine; rows up to 128 wide are one group, the 256-wide
        # rows of down_proj groups of 128
        (QuantizeSpec(scheme="quanto", bits=4), {"d_ff": 256}, (12288 * 5 + 8192 * 4.25) / 20480),
        (QuantizeSpec(scheme="quanto", bits=2), {"d_ff": 256}, (12288 * 3 + 8192 * 2.25) / 20480),
    ],
)
def test_library_schemes_run_and_report_their_layout(
    spec: QuantizeSpec, fields: dict[str, Any], effective_bits: float, calibration: list[Tensor]
) -> None:
    model = gpt(**fields)
    reference = logits(model, calibration[0])
    weights = sum(linear.weight.numel() for linear in linears(blocks(model)))
    scales = round((effective_bits - spec.bits) * weights / 16)
    expected_bytes = nominal_bytes(model, weights * spec.bits // 8 + 2 * scales)
    quantized, report = quantize_model(model, spec, calibration)
    assert report.effective_bits == pytest.approx(effective_bits)
    assert report.model_bytes == expected_bytes
    assert sum(library_scales(linear.weight) for linear in linears(blocks(quantized))) == scales
    out = logits(quantized, calibration[0])
    assert torch.isfinite(out).all()
    if spec.bits == 8:
        torch.testing.assert_close(out, reference, rtol=0, atol=0.02 * float(reference.abs().max()))


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (QuantizeSpec(scheme="torchao_int8", bits=4), "supports bits \\[8\\]"),
        (QuantizeSpec(scheme="quanto", bits=3), "supports bits \\[2, 4, 8\\]"),
        (QuantizeSpec(scheme="quanto", bits=4, group_size=16), "does not take group_size"),
        (QuantizeSpec(scheme="torchao_int8", symmetric=False), "does not take symmetric"),
        (QuantizeSpec(scheme="rtn", bits=4, group_size=24), "does not divide"),
        (QuantizeSpec(scheme="rtn", bits=4, act_order=True), "does not take act_order"),
        (QuantizeSpec(scheme="hqq", bits=5), "supports bits \\[2, 3, 4, 8\\], not 5"),
        (QuantizeSpec(scheme="hqq", bits=4, group_size=4), "multiple of 8"),
    ],
)
def test_unsupported_settings_are_refused(
    spec: QuantizeSpec, message: str, calibration: list[Tensor]
) -> None:
    with pytest.raises(ValueError, match=message):
        quantize_model(gpt(), spec, calibration)


def test_registered_schemes_and_importances_cite_their_source() -> None:
    assert {"rtn", "torchao_int8", "torchao_int4", "quanto", "gptq", "hqq"} <= set(
        QUANTIZERS.names()
    )
    assert set(LAYER_IMPORTANCE.names()) >= {"cosine", "outliers", "position", "random"}
    assert all(entry.doc for entry in [*QUANTIZERS.entries(), *LAYER_IMPORTANCE.entries()])


def test_validate_locates_unsupported_bits_and_options(tmp_path: Path) -> None:
    """`layerbench validate` refuses what a scheme cannot do, at the line that asks for it."""
    path = write_suite(
        tmp_path,
        "pre-ln: {}\n"
        "hqq-5: {quantize: {scheme: hqq, bits: 5}}\n"
        "rtn-ordered: {quantize: {scheme: rtn, act_order: true}}\n"
        "gptq-mixed: {quantize: {scheme: gptq, bits: 3, layerwise: {high_bits: 8}}}",
    )
    with pytest.raises(SuiteError) as caught:
        load_suite(path)
    lines = path.read_text().splitlines()
    hqq_line, rtn_line = (
        next(i for i, text in enumerate(lines, 1) if name in text)
        for name in ("hqq-5", "rtn-ordered")
    )
    assert [str(problem) for problem in caught.value.problems] == [
        f"{path}:{hqq_line}: methods.hqq-5.quantize.bits: "
        "quantization scheme 'hqq' supports bits [2, 3, 4, 8], not 5",
        f"{path}:{rtn_line}: methods.rtn-ordered.quantize.act_order: quantization scheme "
        "'rtn' does not take act_order (a fixed layout or another scheme's option); drop it",
    ]


def block_inputs(model: nn.Module, batch: Tensor) -> list[Tensor]:
    """The input of each Linear of block 0, as (tokens, features), from the unquantized model."""
    inputs: list[Tensor] = []
    handles = [
        linear.register_forward_pre_hook(
            lambda module, args: inputs.append(args[0].flatten(0, -2).clone())
        )
        for linear in linears(blocks(model)[0])
    ]
    logits(model, batch)
    for handle in handles:
        handle.remove()
    return inputs


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
@pytest.mark.parametrize("group", [16, 64])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("act_order", [False, True])
def test_gptq_with_an_identity_hessian_is_rtn(
    bits: int, group: int, symmetric: bool, act_order: bool
) -> None:
    torch.manual_seed(bits)
    weight = torch.randn(24, 64) * 0.1
    weight[2, 9] = 1.0
    quantized = gptq_quantize(weight, torch.eye(64), bits, group, symmetric, 0.01, act_order)
    assert torch.equal(quantized, fake_quantize(weight, bits, group, symmetric))


@pytest.mark.parametrize("kind", ["gpt", "llama"])
@pytest.mark.parametrize("bits", [3, 4])
@pytest.mark.parametrize("group", [16, None])
def test_gptq_layer_output_error_on_calibration_is_below_rtn(
    kind: str, bits: int, group: int | None, calibration: list[Tensor]
) -> None:
    """Block 0's Linears see the same calibration inputs under both; GPTQ minimizes ||XW - XQ||."""
    build, _, count = BLOCK_LINEARS[kind]
    model = build()
    inputs = block_inputs(model, calibration[0])
    originals = [linear.weight.detach().clone() for linear in linears(blocks(model)[0])]
    errors, reports = {}, {}
    for scheme in ("gptq", "rtn"):
        quantized, reports[scheme] = quantize_model(
            copy.deepcopy(model),
            QuantizeSpec(scheme=scheme, bits=bits, group_size=group, symmetric=False),
            calibration,
        )
        errors[scheme] = [
            float(((x @ (w - linear.weight.detach()).T) ** 2).mean())
            for x, w, linear in zip(inputs, originals, linears(blocks(quantized)[0]), strict=True)
        ]
    assert len(errors["gptq"]) == count // 2
    for gptq_error, rtn_error in zip(errors["gptq"], errors["rtn"], strict=True):
        assert 0 < gptq_error < 0.8 * rtn_error
    assert reports["gptq"] == reports["rtn"]  # the same stored layout, bits and bytes


def test_gptq_quantizes_each_block_on_the_quantized_blocks_outputs(
    calibration: list[Tensor],
) -> None:
    """The caught block inputs, run block by block, are the model's own hidden states."""
    for model in (gpt(), llama()):
        with torch.no_grad():
            hidden = model(calibration[0], output_hidden_states=True).hidden_states
            calls = first_block_calls(model, calibration)
            for i, block in enumerate(blocks(model)[:-1]):
                calls = [with_hidden(call, block(*call.args, **call.kwargs)) for call in calls]
                torch.testing.assert_close(calls[0].args[0], hidden[i + 1])
    with pytest.raises(ValueError, match="needs calibration batches"):
        quantize_model(gpt(), QuantizeSpec(scheme="gptq", bits=4), [])


def hqq_layer(weight: Tensor, bits: int, group: int, axis: int) -> Any:
    from hqq.core.quantize import HQQLinear, hqq_base_quant_config

    linear = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    linear.weight.data = weight.clone()
    config = hqq_base_quant_config(nbits=bits, group_size=group, axis=axis)
    return HQQLinear(linear, config, compute_dtype=torch.float32, device="cpu")


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
@pytest.mark.parametrize("group", [16, None])
def test_hqq_grid_bits_and_error_against_rtn(
    bits: int, group: int | None, calibration: list[Tensor]
) -> None:
    """Each group holds at most 2^bits levels of HQQ's affine grid, a group running down a column
    (axis 0, the authors' low-bit setting) when a group size is set and along a row otherwise; on
    these weights its squared error is below asymmetric RTN's at the same bits and group size
    (HQQ's range is min..max, RTN's also covers 0, and HQQ then fits the zero point)."""
    model = gpt()
    originals = [linear.weight.detach().clone() for linear in linears(blocks(model))]
    reference = logits(model, calibration[0])
    _, report = quantize_model(model, QuantizeSpec(scheme="hqq", bits=bits, group_size=group), [])
    hqq_error = rtn_error = 0.0
    for original, linear in zip(originals, linears(blocks(model)), strict=True):
        width = group or original.shape[1]
        layer = hqq_layer(original, bits, width, axis=0 if group else 1)
        scale, zero = layer.meta["scale"], layer.meta["zero"]
        grouped = linear.weight.reshape(width, -1) if group else linear.weight.reshape(-1, width)
        levels = (grouped / scale + zero).detach()
        torch.testing.assert_close(levels, levels.round(), rtol=0, atol=1e-3)
        assert levels.round().min() >= 0 and levels.round().max() <= 2**bits - 1
        assert scale.numel() == original.numel() // width
        hqq_error += float(((linear.weight - original) ** 2).sum())
        rtn_error += float(((fake_quantize(original, bits, width, False) - original) ** 2).sum())
    assert 0 < hqq_error < rtn_error
    overhead = 32 / 16 if group else (6144 * 32 / 32 + 2048 * 32 / 64) / 8192
    assert report.effective_bits == pytest.approx(bits + overhead)
    out = logits(model, calibration[0])
    if bits == 8:
        torch.testing.assert_close(out, reference, rtol=0, atol=0.02 * float(reference.abs().max()))


def test_the_findings_position_baseline_keeps_the_first_blocks_at_the_same_bits(
    calibration: list[Tensor],
) -> None:
    """suites/findings/layerwise-quant.yaml: lq-position spends LIM's bits on blocks 0 and 1."""
    suite = load_suite(ROOT / "suites" / "findings" / "layerwise-quant.yaml")
    specs = {
        name: QuantizeSpec.model_validate(method.quantize.model_dump())
        for name, method in suite.methods.items()
        if method.quantize is not None and method.quantize.layerwise is not None
    }
    model = gpt(n_layers=8)
    position = block_bits(model, specs["lq-position"], calibration)
    assert position == [8, 8] + [3] * 6
    for name in ("lq-cosine", "lq-outliers"):
        assert sorted(block_bits(model, specs[name], calibration)) == sorted(position)
