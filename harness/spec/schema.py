"""Pydantic models of a suite (SPEC section 2).

Every model forbids unknown keys. Methods are partial trials: they use the same models as
`defaults`, and only the fields a method sets (`exclude_unset`) are merged over the defaults.
Model and task sections are validated against the schema their registry entry declares.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    StringConstraints,
    Tag,
    model_validator,
)

from harness.registry import AGGREGATES

SLUG = r"^[a-z0-9][a-z0-9-]*$"
DEFAULT_THREADS = 1
"""A trial's intra-op torch threads unless its suite's `resources.cpus` says otherwise (every
result in docs/results/data/ was trained with 1); the count enters a trial's config, so its key,
only when it differs from this (`harness.spec.plan`)."""


def some_values(values: list[Any]) -> list[Any]:
    if not values:
        raise ValueError("an empty list sweeps no value, so the method would have no trials")
    return values


SweepValues = Annotated[list[Any], AfterValidator(some_values)]


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
        description="A registered layerwise treatment (lr_depth, llr, lisa, drop, wd_scale); its "
        "parameters are further keys of this section."
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
    batch_size: PositiveInt = Field(32, description="Sequences (examples) per step.")
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


class TrialSettings(StrictModel):
    """What `defaults` and each method may set; the resolved trial is one of these."""

    device: str = Field(
        "auto",
        pattern=r"^(auto|cpu|cuda(:\d+)?)$",
        description="Where a trial runs: auto (CUDA where a GPU is, else the CPU), cpu, cuda or "
        "cuda:N.",
    )
    precision: Precision = Field(
        "auto",
        description="fp32, bf16 or fp16 (autocast); auto: bf16 on CUDA, fp32 on the CPU; "
        "planning writes the resolved value into the trial.",
    )
    time_limit_s: PositiveFloat = Field(
        900.0, description="A trial running longer ends as `timeout` (seconds)."
    )
    train: TrainSpec = Field(
        TrainSpec(),
        description="The training loop: steps, batch size, learning-rate schedule, evaluations.",
    )
    optimizer: OptimizerSpec = Field(
        OptimizerSpec(),
        description="The optimizer, its hyperparameters and a layerwise treatment (SPEC 5.3).",
    )
    norm: NormSpec = Field(
        NormSpec(), description="Where the norms sit in a block and which norm (SPEC 5.1-5.2)."
    )
    prune: PruneSpec | None = Field(
        None, description="Remove layers of the trained or pretrained model (SPEC 5.5)."
    )
    quantize: QuantizeSpec | None = Field(
        None, description="Quantize the weights of the trained or pretrained model (SPEC 5.6)."
    )
    model: dict[str, Any] = Field(
        {},
        description="Fields this method sets in every model section it runs on (e.g. `{init: "
        "gpt2}`: a baseline with another init in the same recipe); validated against each "
        "model's schema.",
    )


class MethodSpec(TrialSettings):
    """A named method: a partial trial, optionally inheriting another and sweeping fields."""

    extends: str | None = Field(
        None, description="Another method of the suite whose fields this one inherits."
    )
    description: str = Field("", description="What the method is, for people (the reports).")
    sweep: dict[str, SweepValues] = Field(
        {},
        description="A grid over dotted fields (`optimizer.lr: [0.01, 0.02]`): one trial per "
        "point; the tuned point per (model, task) is chosen as `rank.tuning` says.",
    )


class MatrixEntry(StrictModel):
    """Every method of `methods` on every model of `models` and every task of `tasks`."""

    methods: list[str] = Field(min_length=1, description="Methods of the suite.")
    models: list[str] = Field(min_length=1, description="Models of the suite.")
    tasks: list[str] = Field(min_length=1, description="Tasks of the suite.")


class TargetSpec(StrictModel):
    """A value of `metric` to reach: one for every task, or a map task -> value (AlgoPerf sets
    one target per workload)."""

    model_config = ConfigDict(frozen=True)

    metric: str = Field(description="The metric whose value is the target.")
    value: float | dict[str, float] = Field(
        description="The target: one value for every task, or a map task -> value."
    )

    def value_for(self, task: str) -> float | None:
        """The target of `task`; None when a per-task target names no value for it."""
        if isinstance(self.value, dict):
            return self.value.get(task)
        return self.value

    def describe(self) -> str:
        if isinstance(self.value, dict):
            values = ", ".join(f"{task} {value:g}" for task, value in self.value.items())
            return f"{self.metric} = {values}"
        return f"{self.metric} = {self.value:g}"


Tuning = Literal["per_method", "per_seed"]
CIMethod = Literal["t", "bootstrap", "bca"]
ClaimDirection = Literal["better", "worse", "tie"]


def known_aggregate(name: str) -> str:
    """An overall statistic of `harness.registry.AGGREGATES` (an unknown one: "did you mean")."""
    AGGREGATES.entry(name)
    return name


Aggregate = Annotated[str, AfterValidator(known_aggregate)]


class RankSpec(StrictModel):
    """How the suite is ranked (harness/ranking): metric, tuning, intervals, overall order."""

    metric: str = Field(
        "val_loss",
        description="The primary metric; its direction comes from the metric's declaration.",
    )
    tune_metric: str | None = Field(
        None,
        description="The metric sweep points are picked on (a held-out one); None: `metric`.",
    )
    tuning: Tuning = Field(
        "per_method",
        description="per_method: one sweep point per (method, model, task), the best mean over "
        "seeds; per_seed: the best point of each seed (optimistic, labelled so).",
    )
    ci: CIMethod = Field(
        "t",
        description="Confidence intervals: t, or bootstrap / bca (sensible from about 10 seeds).",
    )
    aggregate: Aggregate = Field(
        "mean_win_rate",
        description="The overall order across tasks: mean_win_rate (HELM), "
        "performance_profile (AlgoPerf; needs `target`), mean_rank or normalized (to the "
        "baseline).",
    )
    target: TargetSpec | None = Field(
        None, description="A value to reach: steps and time to target, performance profiles."
    )
    alpha: float = Field(
        0.05, gt=0.0, lt=1.0, description="The significance level of tests and intervals."
    )

    @model_validator(mode="after")
    def aggregate_target(self) -> RankSpec:
        if AGGREGATES.entry(self.aggregate).needs_target and self.target is None:
            raise ValueError(f"aggregate {self.aggregate} needs a `target`")
        return self


class Claim(StrictModel):
    """A published claim the suite tests (`expect`): `method` is `direction` than `than` on
    `metric`; `recipes` are the suite's models it is checked under (verdicts in
    `harness.claims`)."""

    method: str = Field(description="The method the claim is about.")
    than: str | None = Field(
        None, description="The method it is compared with; None: the suite's baseline."
    )
    metric: str | None = Field(None, description="The metric compared; None: `rank.metric`.")
    direction: ClaimDirection = Field(
        description="better, worse, or tie (within `margin`) than `than`."
    )
    margin: PositiveFloat | None = Field(
        None, description="The equivalence margin of a tie, in the metric's units."
    )
    source: str = Field(
        min_length=1, description='Where the claim is published: "arXiv id, table or figure".'
    )
    note: str = Field("", description="Anything a reader of the verdict should know.")
    recipes: list[str] | None = Field(
        None,
        min_length=1,
        description="The suite's models the claim is checked under; None: every model.",
    )

    @model_validator(mode="after")
    def tie_needs_margin(self) -> Claim:
        if self.direction == "tie" and self.margin is None:
            raise ValueError("a `tie` needs a `margin` (the largest difference that counts as one)")
        if self.direction != "tie" and self.margin is not None:
            raise ValueError("`margin` is only for direction `tie`")
        return self


class SeedSchedule(StrictModel):
    """Sequential seeds (docs/sequential.md): seeds 0 .. `initial` - 1 for every method, then
    `step` more at a time only for the methods of comparisons still undecided, up to `max`."""

    initial: int = Field(ge=2, description="Seeds every method runs first.")
    max: PositiveInt = Field(description="The most seeds a method may get.")
    step: PositiveInt = Field(1, description="Seeds added at a time to undecided comparisons.")

    @model_validator(mode="after")
    def max_after_initial(self) -> SeedSchedule:
        if self.max < self.initial:
            raise ValueError("`max` must be at least `initial`")
        return self


def tuning_seeds(schedule: SeedSchedule | None) -> int | None:
    """The seeds sweep points are chosen on: a sequential schedule's initial ones (later seeds run
    the chosen point alone, `harness.service.rounds`); None: every seed (a fixed design)."""
    return schedule.initial if schedule is not None else None


def _seeds_kind(value: Any) -> str:
    return "schedule" if isinstance(value, dict | SeedSchedule) else "list"


Seeds = Annotated[
    Annotated[list[NonNegativeInt], Field(min_length=1), Tag("list")]
    | Annotated[SeedSchedule, Tag("schedule")],
    Discriminator(_seeds_kind),
]
"""A fixed list of seeds, or a mapping {initial, max, step} (sequential seeds)."""


class RegressionSpec(StrictModel):
    """How `layerbench nightly` flags a change (SPEC 11, docs/nightly.md)."""

    metrics: list[str] = Field([], description="The metrics watched; empty: `rank.metric`.")
    window: PositiveInt = Field(
        14, description="Earlier nightly runs on the same host class in the baseline."
    )
    tolerance: PositiveFloat = Field(0.02, description="The smallest change that matters.")
    tolerance_kind: Literal["relative", "absolute"] = Field(
        "relative",
        description="relative: `tolerance` is a fraction of the window's mean; absolute: in "
        "the metric's units.",
    )
    z: PositiveFloat = Field(
        4.0, description="A change lies outside the window's mean +- z sigma (Conbench)."
    )
    confirm: PositiveInt = Field(
        2, description="Consecutive flagged runs that confirm a change (PyTorch HUD)."
    )


class TrackingSpec(StrictModel):
    """Where trials are tracked besides the results database."""

    mlflow: bool = Field(
        True, description="One MLflow run per trial (`--no-mlflow` turns it off for a command)."
    )


class ResourcesSpec(StrictModel):
    """What each trial asks a Ray or Slurm cluster for; unset: 1 CPU, 1 GPU when its device is
    CUDA, and the cluster's default memory (Slurm rounds CPUs and GPUs up to whole ones).

    `cpus` also fixes each trial's intra-op torch threads on every backend, local included
    (`threads`), since the thread count changes a CPU trial's float reductions, so its numbers."""

    cpus: PositiveFloat | None = Field(
        None,
        description="CPUs per trial (a Ray fraction allowed); also each trial's intra-op torch "
        "threads on every backend (whole CPUs, at least 1); unset: 1.",
    )
    gpus: NonNegativeFloat | None = Field(
        None, description="GPUs per trial; unset: 1 when its device is CUDA, else 0."
    )
    memory_gb: PositiveFloat | None = Field(
        None, description="Memory per trial (GB); unset: the cluster's default."
    )

    @property
    def threads(self) -> int:
        """A trial's intra-op torch threads: the whole CPUs in `cpus` (Ray may give a fraction
        of one), at least 1; 1 when unset."""
        return max(1, math.floor(self.cpus)) if self.cpus is not None else DEFAULT_THREADS


class SlurmSpec(StrictModel):
    """How `--backend slurm` submits (sbatch options; the CLI's `--slurm-*` flags override).

    `folder` holds each job's pickled trial, result and logs: on a filesystem the nodes share.
    The Slurm time limit is `time_limit_s` plus `time_grace_s`, rounded up to whole minutes."""

    partition: str | None = Field(None, description="sbatch --partition; None: the default.")
    account: str | None = Field(None, description="sbatch --account; None: the default.")
    qos: str | None = Field(None, description="sbatch --qos; None: the default.")
    array_parallelism: PositiveInt = Field(
        64, description="Trials of this driver queued or running at once."
    )
    time_grace_s: NonNegativeFloat = Field(
        60.0, description="Added to `time_limit_s` for the Slurm time limit (seconds)."
    )
    max_retries: NonNegativeInt = Field(
        1, description="Resubmissions after a node failure or preemption."
    )
    folder: str = Field(
        "slurm-jobs",
        description="Each job's pickled trial, result and logs: on a filesystem the nodes share.",
    )
    setup: list[str] = Field(
        [], description="Shell lines run before each trial (module load, source a venv)."
    )
    sbatch: dict[str, str | int | bool] = Field(
        {}, description="Any other sbatch flag, e.g. {constraint: a100}."
    )


class Suite(StrictModel):
    """A suite file (SPEC section 2)."""

    suite: str = Field(
        pattern=SLUG, description="The suite's id: lowercase letters, digits and dashes."
    )
    description: str = Field("", description="What the suite compares, for people.")
    cadence: Literal["commit", "nightly", "weekly", "manual"] = Field(
        "manual",
        description="How often it runs: `layerbench nightly --cadence` and the scheduler pick "
        "suites by it.",
    )
    seeds: Seeds = Field(
        [0],
        description="A fixed list of seeds, or a sequential schedule {initial, max, step} "
        "(docs/sequential.md).",
    )
    defaults: TrialSettings = Field(
        TrialSettings(),
        description="Merged into every trial; a method overrides any of these fields.",
    )
    models: dict[str, dict[str, Any]] = Field(
        min_length=1,
        description="Named model sections, each with a registered `type` (gpt, pretrained) "
        "and that type's fields.",
    )
    tasks: dict[str, dict[str, Any]] = Field(
        min_length=1,
        description="Named task sections, each with a registered `type` (lm, synthetic, "
        "lm-eval, perplexity) and that type's fields.",
    )
    methods: dict[str, MethodSpec] = Field(
        min_length=1, description="Named methods: partial trials merged over `defaults`."
    )
    matrix: list[MatrixEntry] | None = Field(
        None,
        description="Which methods run on which models and tasks; None: every method on every "
        "model and task.",
    )
    baseline: str | None = Field(None, description="The method every other is tested against.")
    rank: RankSpec = Field(
        RankSpec(), description="How the suite is ranked: metric, tuning, intervals, order."
    )
    expect: list[Claim] = Field(
        [], description="Published claims checked on every rank (findings)."
    )
    regression: RegressionSpec = Field(
        RegressionSpec(), description="How `layerbench nightly` flags a change."
    )
    tracking: TrackingSpec = Field(TrackingSpec(), description="MLflow tracking.")
    resources: ResourcesSpec = Field(
        ResourcesSpec(),
        description="What each trial asks a cluster for (and its threads on every backend).",
    )
    slurm: SlurmSpec = Field(SlurmSpec(), description="How `--backend slurm` submits.")
    plugins: list[str] = Field(
        [],
        description="Importable modules that register extra methods, models or tasks "
        "(importing them runs their code).",
    )

    @property
    def seed_list(self) -> list[int]:
        """Every seed a trial may get: the fixed list, or 0 .. max - 1 of a schedule."""
        if isinstance(self.seeds, SeedSchedule):
            return list(range(self.seeds.max))
        return list(self.seeds)

    @property
    def schedule(self) -> SeedSchedule | None:
        return self.seeds if isinstance(self.seeds, SeedSchedule) else None
