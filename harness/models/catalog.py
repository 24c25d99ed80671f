"""The built-in model types: each with its section's schema and the "module:attr" of its
builder or loader, imported on first use (see harness/registry.py). Importing this module imports
neither torch nor transformers.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from harness.cache import missing_model
from harness.registry import MODELS, PretrainedModelEntry
from harness.spec.constraints import BlockShape
from harness.spec.schema import InitProfile, StrictModel


def default_d_ff(d_model: int, mlp: str) -> int:
    """4 * d_model, or for SwiGLU 8/3 * d_model rounded up to a multiple of 8 (same parameters)."""
    if mlp == "swiglu":
        return -(-((8 * d_model + 1) // 3) // 8) * 8  # round(8d/3), in integers (no float overflow)
    return 4 * d_model


def check_heads(d_model: int, n_heads: int, n_kv_heads: int | None, pos: str) -> None:
    """Raise ValueError unless the attention heads fit the model width."""
    if d_model % n_heads:
        raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
    if n_kv_heads is not None and n_heads % n_kv_heads:
        raise ValueError(f"n_kv_heads ({n_kv_heads}) must divide n_heads ({n_heads})")
    if pos == "rope" and (d_model // n_heads) % 2:
        raise ValueError(f"rope needs an even head dimension, got {d_model // n_heads}")


class GPTSpec(StrictModel):
    """The `gpt` model section of a suite (SPEC 3)."""

    type: Literal["gpt"] = "gpt"
    n_layers: PositiveInt = 6
    d_model: PositiveInt = 128
    n_heads: PositiveInt = 4
    n_kv_heads: PositiveInt | None = None
    d_ff: PositiveInt | None = None
    max_seq_len: PositiveInt = 256
    pos: Literal["rope", "learned"] = "rope"
    mlp: Literal["swiglu", "gelu", "relu"] = "swiglu"
    tie_embeddings: bool = True
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    init_std: PositiveFloat = 0.02
    init: InitProfile = "gpt2"
    """gpt2: normal(0, init_std), residual outputs / sqrt(2 n_layers); paper: the norm
    placement's authors' init where it differs (`Placement.paper_init`), else gpt2; unscaled:
    normal(0, init_std) with no residual scaling for every placement."""
    bias: bool = False

    @model_validator(mode="after")
    def _heads_fit(self) -> GPTSpec:
        check_heads(self.d_model, self.n_heads, self.n_kv_heads, self.pos)
        return self

    def block_shape(self) -> BlockShape:
        """`n_layers` blocks whose Linear layers read d_model (attention, MLP in) or d_ff (MLP
        out): what `validate` checks pruning counts and quantization groups against."""
        return BlockShape(
            self.n_layers,
            frozenset({self.d_model, self.d_ff or default_d_ff(self.d_model, self.mlp)}),
        )


class PretrainedSpec(StrictModel):
    """A model section of type `pretrained`."""

    type: Literal["pretrained"] = "pretrained"
    source: str = Field(min_length=1)
    revision: str | None = None
    dtype: Literal["fp32", "bf16"] = "fp32"


MODELS.declare("gpt", "harness.models.gpt:build_gpt", params=GPTSpec)
MODELS.declare(
    "pretrained",
    "harness.models.pretrained:load_pretrained",
    kind=PretrainedModelEntry,
    params=PretrainedSpec,
    summary="A pretrained causal LM (packaged, folder, GGUF file or hub id), evaluated as is.",
    missing=lambda spec: missing_model(spec.source),
)
