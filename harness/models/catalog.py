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
from harness.spec.sections import InitProfile, StrictModel


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

    type: Literal["gpt"] = Field(
        "gpt", description="The built-in decoder-only transformer (plain PyTorch)."
    )
    n_layers: PositiveInt = Field(6, description="Transformer blocks.")
    d_model: PositiveInt = Field(128, description="The model width.")
    n_heads: PositiveInt = Field(4, description="Attention heads; they must divide `d_model`.")
    n_kv_heads: PositiveInt | None = Field(
        None,
        description="Key/value heads (grouped-query attention); they must divide `n_heads`; "
        "None: `n_heads`.",
    )
    d_ff: PositiveInt | None = Field(
        None,
        description="The MLP's hidden width; None: 4 d_model, or for SwiGLU 8/3 d_model rounded "
        "up to a multiple of 8 (the same parameters).",
    )
    max_seq_len: PositiveInt = Field(
        256, description="The longest sequence (context); a task's `seq_len` must fit in it."
    )
    pos: Literal["rope", "learned"] = Field(
        "rope", description="Positions: rotary embeddings, or learned absolute embeddings."
    )
    mlp: Literal["swiglu", "gelu", "relu"] = Field("swiglu", description="The MLP's activation.")
    tie_embeddings: bool = Field(
        True, description="The output head shares the token embeddings' weights."
    )
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout probability.")
    init_std: PositiveFloat = Field(0.02, description="The initial weights' standard deviation.")
    init: InitProfile = Field(
        "gpt2",
        description="gpt2: normal(0, init_std), residual outputs / sqrt(2 n_layers); paper: the "
        "norm placement's authors' init where it differs (`Placement.paper_init`), else gpt2; "
        "unscaled: normal(0, init_std) with no residual scaling for every placement.",
    )
    bias: bool = Field(False, description="Biases in the Linear layers.")

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

    type: Literal["pretrained"] = Field(
        "pretrained",
        description="A pretrained causal LM, evaluated (or compressed) as is, or fine-tuned on an "
        "`lm` task in its own tokens.",
    )
    source: str = Field(
        min_length=1,
        description="A packaged model name (smollm2-135m), a local folder, a .gguf file, or a "
        "hub id.",
    )
    revision: str | None = Field(
        None, description="The hub revision (branch, tag or commit); None: the default."
    )
    dtype: Literal["fp32", "bf16"] = Field(
        "fp32", description="The dtype the weights are loaded in."
    )


MODELS.declare("gpt", "harness.models.gpt:build_gpt", params=GPTSpec)
MODELS.declare(
    "pretrained",
    "harness.models.pretrained:load_pretrained",
    kind=PretrainedModelEntry,
    params=PretrainedSpec,
    summary="A pretrained causal LM (packaged, folder, GGUF file or hub id), evaluated as is or "
    "fine-tuned.",
    missing=lambda spec: missing_model(spec.source),
)
