"""The sections of a trial a suite's `defaults` and methods set (SPEC 5): norm, optimizer and its
layerwise wrapper, train loop, pruning and quantization, and the base models every suite section
uses (unknown keys are errors)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    StringConstraints,
    model_validator,
)


class StrictModel(BaseModel):
    """A suite section: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", validate_default=True)


class ParamsModel(StrictModel):
    """Extra fields a registered method accepts (e.g. `post_fraction` for placement `mix`)."""


class NormSpec(StrictModel):
    """Where the norms sit in a block and which norm is used (SPEC 5.1-5.2)."""

    model_config = ConfigDict(extra="allow")  # method parameters, checked against the registry

    placement: str = Field(
        "pre",
        description="Where the norms sit in each block: a registered placement (pre, post, peri, "
        "mix, ...; `layerbench methods`); its parameters are further keys of this section.",
    )
    type: str = Field(
        "layernorm",
        description="The norm: a registered norm type (layernorm, rmsnorm, dyt, ...); its "
        "parameters are further keys of this section.",
    )
    qk_norm: bool = Field(False, description="Normalize queries and keys before attention.")
    final_norm: bool | None = Field(
        None, description="A norm before the output head; None: the placement's own default."
    )
    embed_norm: bool | None = Field(
        None, description="A norm of the embeddings; None: the placement's default."
    )
    eps: PositiveFloat = Field(1e-5, description="The norms' epsilon.")


class LayerwiseSpec(StrictModel):
    """A layerwise treatment wrapped around the optimizer (SPEC 5.4)."""

    model_config = ConfigDict(extra="allow")  # the wrapper's parameters

    name: str = Field(
        description="A registered layerwise treatment (lr_depth, llr, lisa, drop, wd_scale, "
        "lora, freeze); its parameters are further keys of this section."
    )


class OptimizerSpec(StrictModel):
    """The optimizer and its hyperparameters (SPEC 5.3)."""

    model_config = ConfigDict(extra="allow")  # optimizer-specific parameters

    name: str = Field(
        "adamw",
        description="A registered optimizer (adamw, sgd, muon, ...; `layerbench methods`); its "
        "parameters are further keys of this section.",
    )
    lr: PositiveFloat = Field(1e-3, description="The peak learning rate (the schedule scales it).")
    weight_decay: float = Field(0.0, ge=0.0, description="Decoupled weight decay.")
    betas: tuple[float, float] = Field(
        (0.9, 0.999), description="Adam-style moment coefficients (beta1, beta2)."
    )
    eps: PositiveFloat = Field(1e-8, description="The optimizer's epsilon.")
    momentum: float | None = Field(
        None, ge=0.0, lt=1.0, description="Momentum; None: the optimizer's own default."
    )
    nesterov: bool | None = Field(
        None, description="Nesterov momentum; None: the optimizer's own default."
    )
    layerwise: LayerwiseSpec | None = Field(
        None, description="A layerwise treatment wrapped around the optimizer (SPEC 5.4)."
    )


Seconds = Annotated[str, StringConstraints(pattern=r"^\d+(\.\d+)?s$")]
"""A duration in seconds written as `600s`."""


class CheckpointSpec(StrictModel):
    """When a training trial writes a checkpoint it can resume from (`harness.runner.checkpoint`).

    Without this section a trial checkpoints at each evaluation once it has trained for
    `DEFAULT_AFTER_S` (five minutes) of wall time, so tiny trials never write one."""

    every: PositiveInt | Literal["eval"] | Seconds = Field(
        "eval",
        description="Steps between two checkpoints (an integer), `eval` (at each evaluation) or "
        "seconds of wall time as `600s`.",
    )
    keep: PositiveInt = Field(
        2, description="Checkpoints kept per trial, newest first (a corrupt newest falls back)."
    )
    keep_final: bool = Field(
        False, description="Keep the last checkpoint after the trial's result is stored."
    )


class TrainSpec(StrictModel):
    """The training loop's budget and schedule."""

    steps: PositiveInt = Field(400, description="Optimizer steps of the training run.")
    batch_size: PositiveInt = Field(
        32,
        description="Sequences (examples) per optimizer step, over all ranks and micro-batches "
        "(the global batch).",
    )
    micro_batch_size: PositiveInt | None = Field(
        None,
        description="Gradient accumulation: sequences per forward and backward on each rank; "
        "the gradients of `batch_size / (ranks x micro_batch_size)` micro-batches are summed, "
        "each loss scaled by its share, so the step equals the full batch's. None: each rank's "
        "whole share at once. Left out of the config when unset.",
    )
    parallel: Literal["ddp", "fsdp"] = Field(
        "ddp",
        description="How a trial over several ranks (`resources.tasks`, `gpus`, `nodes`) shares "
        "its model: `ddp` (a replica per rank, gradients all-reduced: DistributedDataParallel) "
        "or `fsdp` (parameters, gradients and optimizer state sharded: FSDP2 `fully_shard`). "
        "In the config only when the trial has more than one rank.",
    )
    warmup_steps: NonNegativeInt = Field(
        0, description="Steps of linear learning-rate warmup from zero."
    )
    schedule: str = Field(
        "cosine",
        description="The learning-rate schedule after warmup: a registered schedule (constant, "
        "cosine, linear, wsd).",
    )
    min_lr_ratio: float = Field(
        0.0, ge=0.0, le=1.0, description="The decaying schedules' final rate, a fraction of `lr`."
    )
    eval_every: PositiveInt = Field(
        100, description="Steps between evaluations (and the last step evaluates)."
    )
    eval_batches: PositiveInt = Field(
        20, description="Batches of the validation split each evaluation reads."
    )
    grad_clip: PositiveFloat | None = Field(
        1.0, description="Clip the gradients' global norm to this; None: no clipping."
    )
    divergence_factor: PositiveFloat = Field(
        5.0,
        description="A loss above this factor times the initial loss (or NaN/inf) ends the "
        "trial as `diverged`: a valid result, ranked last.",
    )
    log_every: PositiveInt = Field(10, description="Steps between two progress reports.")
    diagnostics: bool = Field(
        True, description="Layerwise statistics at every evaluation (SPEC 5.7)."
    )
    compile: bool | Literal["auto"] = Field(
        "auto",
        description="`torch.compile` (inductor) the training step's forward and backward; "
        "evaluation stays eager. `auto`: on for CUDA, off on the CPU. The planned trial's config "
        "holds `true` when it compiles and nothing when it runs eager (so eager trials keep "
        "their keys).",
    )
    checkpoint: CheckpointSpec | None = Field(
        None,
        description="Checkpointing inside the trial (every, keep, keep_final); unset: at each "
        "evaluation once the trial has run five minutes. Left out of the config when unset.",
    )

    def micro_batches(self, ranks: int = 1) -> tuple[int, int]:
        """(sequences per micro-batch, micro-batches per step) on each of `ranks` ranks; a
        ValueError names the field when `batch_size` does not split so."""
        if self.batch_size % ranks:
            raise ValueError(
                f"`batch_size` {self.batch_size} does not split over the trial's {ranks} ranks; "
                f"make it a multiple of {ranks}"
            )
        share = self.batch_size // ranks
        micro = self.micro_batch_size or share
        if share % micro:
            raise ValueError(
                f"`micro_batch_size` {micro} does not divide the {share} sequences each rank "
                f"takes of `batch_size` {self.batch_size}; make it a divisor of {share}"
            )
        return micro, share // micro


Precision = Literal["auto", "fp32", "bf16", "fp16"]
"""`auto`: bf16 on CUDA, fp32 on the CPU; planning writes the resolved value into the trial."""
InitProfile = Literal["gpt2", "paper", "unscaled"]
"""gpt2: GPT-2's init; paper: the norm placement's authors' init where it differs; unscaled: no
residual scaling whatever the placement (a paper's baselines trained with its method's init)."""


class PruneSpec(StrictModel):
    """Remove layers of a trained or pretrained model (SPEC 5.5): `n` or `fraction` of them."""

    criterion: str = Field(
        description="A registered pruning criterion (block_influence, linearity, last_n, ...): "
        "which layers go."
    )
    n: PositiveInt | None = Field(None, description="How many layers to remove (or `fraction`).")
    fraction: float | None = Field(
        None, gt=0.0, lt=1.0, description="The fraction of the layers to remove (or `n`)."
    )
    target: Literal["block", "attention", "mlp"] = Field(
        "block", description="What a layer is: a whole block, or its attention or MLP sublayer."
    )
    calibration_samples: PositiveInt = Field(
        32, description="Sequences of training data the data-driven criteria score layers on."
    )
    draws: PositiveInt = Field(
        1,
        description="A random criterion: prune this many draws of the same trained model and "
        "report the mean of their metrics (draw 0 is the seed's single draw).",
    )

    @model_validator(mode="after")
    def one_amount(self) -> PruneSpec:
        if (self.n is None) == (self.fraction is None):
            raise ValueError("give exactly one of `n` and `fraction`")
        return self


class LayerwiseQuantSpec(StrictModel):
    """Variable bits per layer by an importance score (LayerwiseQuant, SPEC 5.6)."""

    importance: str = Field(
        "cosine",
        description="A registered layer importance (cosine, outliers, position, random): which "
        "blocks get `high_bits`.",
    )
    high_bits: int = Field(8, ge=2, le=8, description="Bits of the most important blocks.")
    low_bits: int | None = Field(
        None, ge=2, le=8, description="Bits of the other blocks; None: the scheme's `bits`."
    )
    fraction_high: float = Field(
        0.25, ge=0.0, le=1.0, description="The fraction of the blocks that get `high_bits`."
    )
    draws: PositiveInt = Field(
        1,
        description="A random importance: quantize this many draws of the same trained model "
        "and report the mean of their metrics (draw 0 is the seed's single draw).",
    )


class QuantizeSpec(StrictModel):
    """Quantize the weights of a trained or pretrained model (SPEC 5.6)."""

    scheme: str = Field(
        description="A registered quantization scheme (rtn, gptq, hqq, torchao_int8, "
        "torchao_int4, quanto); each takes its own `bits` and layout options."
    )
    bits: int = Field(8, ge=2, le=8, description="Bits per weight.")
    symmetric: bool = Field(
        True, description="A symmetric grid (no zero point); False: asymmetric."
    )
    group_size: PositiveInt | None = Field(
        None, description="Weights sharing one scale; None: one scale per output channel."
    )
    layerwise: LayerwiseQuantSpec | None = Field(
        None, description="Variable bits per layer by an importance score (LayerwiseQuant)."
    )
    act_order: bool = Field(
        False, description="GPTQ: quantize columns by decreasing Hessian diagonal."
    )
    damp: float = Field(
        0.01, gt=0.0, lt=1.0, description="GPTQ: dampening, a fraction of mean(diag(H))."
    )
