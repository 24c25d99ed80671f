"""The built-in method entries: each name with its parameter model, typed capabilities and
the "module:attr" of its implementation, imported on first use (see harness/registry.py).

Importing this module imports neither torch nor transformers, so a suite is validated and planned
without them. A new built-in method is one entry here and its implementation in its family's
module (docs/extending.md).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt, model_validator

from harness.registry import (
    LAYER_IMPORTANCE,
    LAYERWISE,
    NORM_PLACEMENTS,
    NORM_TYPES,
    OPTIMIZERS,
    PRUNING,
    QUANTIZERS,
    SCHEDULES,
)
from harness.spec.constraints import LAYOUT_OPTIONS
from harness.spec.sections import ParamsModel


class MixParams(ParamsModel):
    post_fraction: float = Field(
        0.25,
        ge=0.0,
        le=1.0,
        description="The first floor(post_fraction * n_layers) layers are Post-LN (the paper's "
        "alpha).",
    )


class DyTParams(ParamsModel):
    alpha_init: PositiveFloat | None = Field(
        None,
        description="alpha_0 of every norm; None: the papers' language-model rule "
        "(`llm_alpha_init`).",
    )


class DerfParams(DyTParams):
    shift_init: float = Field(0.0, description="The initial value of the learnable shift s.")


class LarsParams(ParamsModel):
    trust_coefficient: PositiveFloat = Field(
        1e-3, description="eta in the local rate eta ||w|| / (||g|| + wd ||w||)."
    )


class HybridParams(ParamsModel):
    adamw_lr: PositiveFloat | None = Field(
        None,
        description="Learning rate of the AdamW part (embeddings, head, norms, biases); "
        "default: `lr`.",
    )


class MuonParams(HybridParams):
    ns_steps: PositiveInt = Field(5, description="Newton-Schulz iterations.")
    adjust_lr_fn: Literal["original", "match_rms_adamw"] = Field(
        "original",
        description="Per-matrix rate: sqrt(max(1, rows/cols)) (Jordan) or 0.2 sqrt(max(rows, "
        "cols)) (Moonshot).",
    )
    ns_dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto",
        description="Newton-Schulz precision: bfloat16 (torch.optim.Muon, as Jordan's "
        "reference), or float32; auto: bfloat16 on CUDA, float32 on CPU, where bfloat16 matmuls "
        "are ~20x slower.",
    )


class SinkGDParams(ParamsModel):
    alpha: PositiveFloat = Field(
        0.05,
        description="SinkGD's learning rate relative to `lr`, the AdamW part's (0.05 in the "
        "paper).",
    )
    iterations: PositiveInt = Field(5, description="SR-Sinkhorn iterations L (5 in the paper).")


class ScionParams(ParamsModel):
    """Radii of the norm balls: the official shallow nanoGPT example's ("Mixed")."""

    embedding_scale: PositiveFloat = Field(
        1.0, description="The radius of the embeddings' norm ball (column-norm LMO)."
    )
    hidden_scale: PositiveFloat = Field(
        3.0,
        description="The radius of the blocks' norm balls (spectral LMO for matrices, RMS for "
        "vectors).",
    )
    head_scale: PositiveFloat = Field(
        10.0, description="The radius of the output head's norm ball (sign LMO)."
    )
    unconstrained: bool = Field(
        False,
        description="True: W <- W - lr scale lmo; False (the paper's default): W <- (1 - lr) W "
        "- lr scale lmo.",
    )


class LrDepthParams(ParamsModel):
    decay: float = Field(
        0.8,
        gt=0.0,
        le=1.0,
        description="Ratio of a layer's learning rate to the next layer's (0.8 for ELECTRA-Base).",
    )


class LLRParams(ParamsModel):
    lr_min_ratio: PositiveFloat = Field(
        1.0, description="LR ratio of the matrix with the smallest alpha (the most heavy-tailed)."
    )
    lr_max_ratio: PositiveFloat = Field(
        5.0, description="LR ratio of the matrix with the largest alpha."
    )
    interval: PositiveInt = Field(100, description="Steps between two estimates of the alphas.")
    ramp_steps: PositiveInt = Field(
        50, description="Steps over which the ratios move linearly to new targets."
    )
    min_eigenvalues: PositiveInt = Field(
        50, description="Matrices with fewer eigenvalues (min(rows, cols)) keep the base rate."
    )

    @model_validator(mode="after")
    def _ordered(self) -> LLRParams:
        if self.lr_min_ratio > self.lr_max_ratio:
            raise ValueError("lr_min_ratio must not exceed lr_max_ratio")
        return self


class LisaParams(ParamsModel):
    active_layers: PositiveInt = Field(2, description="Blocks trained at a time (gamma).")
    interval: PositiveInt = Field(20, description="Steps between two draws (K).")


class LoraParams(ParamsModel):
    r: PositiveInt = Field(8, description="The rank of each adapter (LoRA's r).")
    alpha: PositiveInt = Field(16, description="The adapters' scale numerator (lora_alpha).")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout on the adapters' input.")
    target_modules: list[str] | Literal["all-linear"] | None = Field(
        None,
        description="The Linear modules (by name) given adapters; all-linear: every Linear but "
        "the head; None: peft's default for a transformers architecture (q_proj and v_proj for "
        "Llama), the LoRA paper's q_proj and v_proj for the built-in gpt.",
    )


class RemoveNormsParams(ParamsModel):
    start: NonNegativeInt = Field(
        20, description="The step at which the first block's second norm is removed."
    )
    gap_mlp: NonNegativeInt = Field(
        2, description="Steps between two blocks' second norms (ln_2) removed; 0: all at once."
    )
    gap_qk: NonNegativeInt = Field(
        2, description="Steps between two blocks' first norms removed on the query/key path."
    )
    gap_v: NonNegativeInt = Field(
        3,
        description="Steps between two blocks' first norms removed on the value path (and "
        "from the last of them to the final norm).",
    )


FreezeRole = Literal["embeddings", "head", "norms", "blocks"]


class FreezeParams(ParamsModel):
    roles: list[FreezeRole] = Field(
        default_factory=list,
        description="Parameter roles never updated: embeddings, head, norms (the final norm and "
        "everything else outside the blocks), blocks (every block).",
    )
    blocks: list[NonNegativeInt] = Field(
        default_factory=list, description="Blocks (by index, 0 the first) never updated."
    )


class DropParams(ParamsModel):
    """Drop-Muon's uniform start-layer sampling has no parameters."""


class WdScaleParams(ParamsModel):
    base_width: PositiveInt = Field(
        description="The width at which `lr` and `weight_decay` were tuned."
    )


# placement.py
NORM_PLACEMENTS.declare("pre", "harness.methods.placement:PreNorm")
NORM_PLACEMENTS.declare("post", "harness.methods.placement:PostNorm")
NORM_PLACEMENTS.declare("peri", "harness.methods.placement:PeriNorm")
NORM_PLACEMENTS.declare("mix", "harness.methods.placement:MixNorm", params=MixParams)
NORM_PLACEMENTS.declare("hybrid", "harness.methods.placement:HybridNorm")
NORM_PLACEMENTS.declare("normformer", "harness.methods.placement:NormFormer")
NORM_PLACEMENTS.declare("lns", "harness.methods.placement:LayerNormScaling")
NORM_PLACEMENTS.declare("deepnorm", "harness.methods.placement:DeepNorm")
NORM_PLACEMENTS.declare("none", "harness.methods.placement:NoNorm")

# norms.py
NORM_TYPES.declare("layernorm", "harness.methods.norms:layernorm")
NORM_TYPES.declare("rmsnorm", "harness.methods.norms:rmsnorm")
NORM_TYPES.declare(
    "dyt", "harness.methods.norms:dyt", params=DyTParams, scale_embeddings=True, model_width=True
)
NORM_TYPES.declare(
    "derf", "harness.methods.norms:derf", params=DerfParams, scale_embeddings=True, model_width=True
)
NORM_TYPES.declare("scalenorm", "harness.methods.norms:scalenorm")
NORM_TYPES.declare("crmsnorm", "harness.methods.norms:crmsnorm")
NORM_TYPES.declare("seednorm", "harness.methods.norms:seednorm")
NORM_TYPES.declare("identity", "harness.methods.norms:identity")

# optimizers.py
PYTORCH_OPTIMIZER = ("pytorch-optimizer",)
OPTIMIZERS.declare("adamw", "harness.methods.optimizers:adamw")
OPTIMIZERS.declare("adam", "harness.methods.optimizers:adam")
OPTIMIZERS.declare("sgd", "harness.methods.optimizers:sgd")
OPTIMIZERS.declare("lion", "harness.methods.optimizers:lion", libraries=PYTORCH_OPTIMIZER)
OPTIMIZERS.declare("lamb", "harness.methods.optimizers:lamb", libraries=PYTORCH_OPTIMIZER)
OPTIMIZERS.declare(
    "lars", "harness.methods.optimizers:lars", params=LarsParams, libraries=PYTORCH_OPTIMIZER
)
OPTIMIZERS.declare("novograd", "harness.methods.optimizers:novograd", libraries=PYTORCH_OPTIMIZER)
OPTIMIZERS.declare("adafactor", "harness.methods.optimizers:adafactor")


def ns_dtype_on(ns_dtype: str, on_gpu: bool) -> str:
    """Muon's `ns_dtype: auto`: bfloat16 on a GPU, float32 on the CPU, where bfloat16 matmuls
    are ~20x slower; others are kept."""
    if ns_dtype != "auto":
        return ns_dtype
    return "bfloat16" if on_gpu else "float32"


def muon_on_device(section: dict[str, Any], on_gpu: bool) -> dict[str, Any]:
    """Muon's section with `ns_dtype` resolved for the device (`ns_dtype_on`)."""
    return section | {"ns_dtype": ns_dtype_on(section.get("ns_dtype", "auto"), on_gpu)}


OPTIMIZERS.declare(
    "muon", "harness.methods.optimizers:muon", params=MuonParams, on_device=muon_on_device
)
OPTIMIZERS.declare("rmnp", "harness.methods.optimizers:rmnp", params=HybridParams)
OPTIMIZERS.declare("sinkgd", "harness.methods.optimizers:sinkgd", params=SinkGDParams)
OPTIMIZERS.declare(
    "scion", "harness.methods.optimizers:scion", params=ScionParams, libraries=PYTORCH_OPTIMIZER
)

# schedules.py
SCHEDULES.declare("constant", "harness.methods.schedules:constant")
SCHEDULES.declare("cosine", "harness.methods.schedules:cosine")
SCHEDULES.declare("linear", "harness.methods.schedules:linear")
SCHEDULES.declare("wsd", "harness.methods.schedules:wsd")

# layerwise.py
LAYERWISE.declare("lr_depth", "harness.methods.layerwise:lr_depth", params=LrDepthParams)
LAYERWISE.declare("llr", "harness.methods.layerwise:llr", params=LLRParams)
LAYERWISE.declare("lisa", "harness.methods.layerwise:lisa", params=LisaParams)
LAYERWISE.declare("lora", "harness.methods.layerwise:lora", params=LoraParams)
LAYERWISE.declare("freeze", "harness.methods.layerwise:freeze", params=FreezeParams)
LAYERWISE.declare("drop", "harness.methods.layerwise:drop", params=DropParams)
LAYERWISE.declare("wd_scale", "harness.methods.layerwise:wd_scale", params=WdScaleParams)
LAYERWISE.declare(
    "remove_norms", "harness.methods.norm_removal:remove_norms", params=RemoveNormsParams
)

# pruning.py
PRUNING.declare("block_influence", "harness.methods.pruning:block_influence")
PRUNING.declare("linearity", "harness.methods.pruning:linearity", targets=("block",))
PRUNING.declare("attention_qk", "harness.methods.pruning:attention_qk", targets=("attention",))
PRUNING.declare("task_greedy", "harness.methods.pruning:task_greedy")
PRUNING.declare("last_n", "harness.methods.pruning:last_n")
PRUNING.declare("first_n", "harness.methods.pruning:first_n")
PRUNING.declare("random", "harness.methods.pruning:random_layers")

# quantization.py (rtn, gptq) and quantization_libraries.py
QUANTIZERS.declare(
    "rtn", "harness.methods.quantization:rtn", bits=frozenset(range(2, 9)), options=LAYOUT_OPTIONS
)
QUANTIZERS.declare(
    "gptq",
    "harness.methods.quantization:gptq",
    bits=frozenset(range(2, 9)),
    options=LAYOUT_OPTIONS | {"act_order", "damp"},
    calibrated=True,
)
QUANTIZERS.declare(
    "hqq",
    "harness.methods.quantization_libraries:hqq",
    bits=frozenset({2, 3, 4, 8}),
    options=frozenset({"group_size"}),
    libraries=("hqq",),
)
QUANTIZERS.declare(
    "torchao_int8",
    "harness.methods.quantization_libraries:torchao_int8",
    bits=frozenset({8}),
    options=frozenset(),
    libraries=("torchao",),
)
QUANTIZERS.declare(
    "torchao_int4",
    "harness.methods.quantization_libraries:torchao_int4",
    bits=frozenset({4}),
    options=LAYOUT_OPTIONS,
    libraries=("torchao",),
)
QUANTIZERS.declare(
    "quanto",
    "harness.methods.quantization_libraries:quanto",
    bits=frozenset({2, 4, 8}),
    options=frozenset(),
    libraries=("optimum-quanto",),
)

# layer_importance.py
LAYER_IMPORTANCE.declare("cosine", "harness.methods.layer_importance:cosine_importance")
LAYER_IMPORTANCE.declare("outliers", "harness.methods.layer_importance:outlier_importance")
LAYER_IMPORTANCE.declare("position", "harness.methods.layer_importance:position_importance")
LAYER_IMPORTANCE.declare("random", "harness.methods.layer_importance:random_importance")
