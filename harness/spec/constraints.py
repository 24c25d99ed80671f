"""Constraints of post-training methods that a suite can break, checked before anything runs.

Registries declare them beside each entry: a quantization scheme its `bits` and the layout
`options` it honours, a pruning criterion its `targets`; a model's schema its `block_shape()`
(the number of blocks and the input widths of their Linear layers). `validate` checks a suite
against them, and `prune_model` / `quantize_model` call the same functions, so a suite that
validates does not fail on them after training.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from harness.spec.sections import PruneSpec, QuantizeSpec

Loc = tuple[str | int, ...]

LAYOUT_OPTIONS = frozenset({"group_size", "symmetric"})
"""The layout fields of QuantizeSpec a scheme may honour (its entry's `options`); a scheme with
a fixed layout takes neither."""
QUANTIZE_OPTIONS = LAYOUT_OPTIONS | {"act_order", "damp"}
"""QuantizeSpec fields a scheme either honours (its entry's `options`) or must leave unset."""


@dataclass(frozen=True)
class BlockShape:
    """What post-training needs to know about a model before building it."""

    n_blocks: int
    in_features: frozenset[int]
    """Input widths of the blocks' Linear layers (a quantization group must divide each)."""


def layers_to_remove(spec: PruneSpec, n_layers: int) -> int:
    """`spec.n`, or `spec.fraction` of the layer count rounded half up; at least one is kept."""
    fraction = spec.fraction if spec.fraction is not None else 0.0  # PruneSpec sets one
    k = spec.n if spec.n is not None else int(fraction * n_layers + 0.5)
    if not 1 <= k < n_layers:
        raise ValueError(
            f"pruning must remove between 1 and {n_layers - 1} of {n_layers} layers, not {k}"
        )
    return k


def prune_problems(
    spec: PruneSpec, entry: Any, shape: BlockShape | None
) -> Iterator[tuple[Loc, str]]:
    """The criterion (its registry entry's `targets`) must support the target, and the model
    must have layers to spare."""
    targets = entry.targets
    if spec.target not in targets:
        yield (
            ("prune", "target"),
            f"pruning criterion '{spec.criterion}' supports target {' / '.join(targets)}, "
            f"not '{spec.target}'",
        )
    if shape is not None:
        try:
            layers_to_remove(spec, shape.n_blocks)
        except ValueError as error:
            yield (("prune", "n" if spec.n is not None else "fraction"), str(error))


def used_bits(spec: QuantizeSpec) -> dict[int, Loc]:
    """The bit widths the spec asks for, each with the field that sets it."""
    policy = spec.layerwise
    if policy is None:
        return {spec.bits: ("quantize", "bits")}
    used: dict[int, Loc] = {}
    if policy.fraction_high < 1.0:
        if policy.low_bits is None:
            used[spec.bits] = ("quantize", "bits")
        else:
            used[policy.low_bits] = ("quantize", "layerwise", "low_bits")
    if policy.fraction_high > 0.0:
        used.setdefault(policy.high_bits, ("quantize", "layerwise", "high_bits"))
    return used


def quantize_problems(
    spec: QuantizeSpec, entry: Any, shape: BlockShape | None
) -> Iterator[tuple[Loc, str]]:
    """Bits the scheme (its registry entry's `bits`) lacks, options it does not take (`options`),
    groups that do not divide a width."""
    for option in sorted(QUANTIZE_OPTIONS - entry.options):
        if getattr(spec, option) != QuantizeSpec.model_fields[option].default:
            yield (
                ("quantize", option),
                f"quantization scheme '{spec.scheme}' does not take {option} (a fixed layout or "
                "another scheme's option); drop it",
            )
    for bits, loc in sorted(used_bits(spec).items()):
        if bits not in entry.bits:
            yield (
                loc,
                f"quantization scheme '{spec.scheme}' supports bits "
                f"{sorted(entry.bits)}, not {bits}",
            )
    if shape is None or spec.group_size is None or "group_size" not in entry.options:
        return
    if widths := sorted(w for w in shape.in_features if w % spec.group_size):
        yield (
            ("quantize", "group_size"),
            f"group_size {spec.group_size} does not divide the model's Linear input "
            f"width{'s' if len(widths) > 1 else ''} {', '.join(map(str, widths))}",
        )


MODEL_TOKENIZER = "model"
"""The `lm` task's `tokenizer` that names a fine-tuned pretrained model's own tokenizer: the
trial loads the model and tokenizes the corpus with it (`harness.tasks.corpora.lm_splits`)."""
