"""What a quantization scheme accepts: its bit widths and the QuantizeSpec options it reads.

Shared by suite validation (`layerbench validate`, located at file:line) and by
`harness.methods.quantization.quantize_model` at run time. A scheme's registry entry declares
`bits` (the widths it supports) and `options` (the fields of QUANTIZE_OPTIONS it reads); any other
option left at a non-default value is refused.
"""

from __future__ import annotations

from collections.abc import Collection

from harness.spec.loader import Loc
from harness.spec.schema import QuantizeSpec

QUANTIZE_OPTIONS = ("group_size", "symmetric", "act_order", "damp")


def used_bits(spec: QuantizeSpec) -> dict[Loc, int]:
    """Each bit width the spec asks for, by the field that sets it."""
    policy = spec.layerwise
    if policy is None:
        return {("bits",): spec.bits}
    low: Loc = ("bits",) if policy.low_bits is None else ("layerwise", "low_bits")
    return {
        low: spec.bits if policy.low_bits is None else policy.low_bits,
        ("layerwise", "high_bits"): policy.high_bits,
    }


def unsupported(
    spec: QuantizeSpec, bits: Collection[int], options: Collection[str]
) -> list[tuple[Loc, str]]:
    """(field, message) for each bit width and option of `spec` its scheme does not support."""
    problems: list[tuple[Loc, str]] = [
        (
            (option,),
            f"quantization scheme '{spec.scheme}' does not take {option} (a fixed layout or "
            "another scheme's option); drop it",
        )
        for option in QUANTIZE_OPTIONS
        if option not in options
        and getattr(spec, option) != QuantizeSpec.model_fields[option].default
    ]
    problems += [
        (loc, f"quantization scheme '{spec.scheme}' supports bits {sorted(bits)}, not {value}")
        for loc, value in used_bits(spec).items()
        if value not in bits
    ]
    return problems
