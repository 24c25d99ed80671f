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

    placement: str = "pre"
    type: str = "layernorm"
    qk_norm: bool = False
    final_norm: bool | None = None  # None: the placement's own default
    embed_norm: bool | None = None  # a norm of the embeddings; None: the placement's default
    eps: PositiveFloat = 1e-5


class LayerwiseSpec(StrictModel):
    """A layerwise treatment wrapped around the optimizer (SPEC 5.4)."""

    model_config = ConfigDict(extra="allow")  # the wrapper's parameters

    name: str


class OptimizerSpec(StrictModel):
    """The optimizer and its hyperparameters (SPEC 5.3)."""

    model_config = ConfigDict(extra="allow")  # optimizer-specific parameters

    name: str = "adamw"
    lr: PositiveFloat = 1e-3
    weight_decay: float = Field(0.0, ge=0.0)
    betas: tuple[float, float] = (0.9, 0.999)
    eps: PositiveFloat = 1e-8
    momentum: float | None = Field(None, ge=0.0, lt=1.0)  # None: the optimizer's own default
    nesterov: bool | None = None  # None: the optimizer's own default
    layerwise: LayerwiseSpec | None = None


class TrainSpec(StrictModel):
    """The training loop's budget and schedule."""

    steps: PositiveInt = 400
    batch_size: PositiveInt = 32
    warmup_steps: NonNegativeInt = 0
    schedule: str = "cosine"
    min_lr_ratio: float = Field(0.0, ge=0.0, le=1.0)
    eval_every: PositiveInt = 100
    eval_batches: PositiveInt = 20
    grad_clip: PositiveFloat | None = 1.0
    divergence_factor: PositiveFloat = 5.0
    log_every: PositiveInt = 10
    diagnostics: bool = True  # layerwise statistics at every evaluation (SPEC 5.7)
    compile: bool | Literal["auto"] = "auto"
    """`torch.compile` (inductor) the training step's forward and backward; evaluation stays
    eager. `auto`: on for CUDA, off on the CPU. The planned trial's config holds `true` when it
    compiles and nothing when it runs eager (so eager trials keep their keys)."""


Precision = Literal["auto", "fp32", "bf16", "fp16"]
"""`auto`: bf16 on CUDA, fp32 on the CPU; planning writes the resolved value into the trial."""
InitProfile = Literal["gpt2", "paper", "unscaled"]
"""gpt2: GPT-2's init; paper: the norm placement's authors' init where it differs; unscaled: no
residual scaling whatever the placement (a paper's baselines trained with its method's init)."""


class PruneSpec(StrictModel):
    """Remove layers of a trained or pretrained model (SPEC 5.5): `n` or `fraction` of them."""

    criterion: str
    n: PositiveInt | None = None
    fraction: float | None = Field(None, gt=0.0, lt=1.0)
    target: Literal["block", "attention", "mlp"] = "block"
    calibration_samples: PositiveInt = 32

    @model_validator(mode="after")
    def one_amount(self) -> PruneSpec:
        if (self.n is None) == (self.fraction is None):
            raise ValueError("give exactly one of `n` and `fraction`")
        return self


class LayerwiseQuantSpec(StrictModel):
    """Variable bits per layer by an importance score (LayerwiseQuant, SPEC 5.6)."""

    importance: str = "cosine"
    high_bits: int = Field(8, ge=2, le=8)
    low_bits: int | None = Field(None, ge=2, le=8)  # None: the scheme's `bits`
    fraction_high: float = Field(0.25, ge=0.0, le=1.0)


class QuantizeSpec(StrictModel):
    """Quantize the weights of a trained or pretrained model (SPEC 5.6)."""

    scheme: str
    bits: int = Field(8, ge=2, le=8)
    symmetric: bool = True
    group_size: PositiveInt | None = None  # None: one scale per output channel
    layerwise: LayerwiseQuantSpec | None = None
    act_order: bool = False  # GPTQ: quantize columns by decreasing Hessian diagonal
    damp: float = Field(0.01, gt=0.0, lt=1.0)  # GPTQ: dampening, a fraction of mean(diag(H))


class TrialSettings(StrictModel):
    """What `defaults` and each method may set; the resolved trial is one of these."""

    device: str = Field("auto", pattern=r"^(auto|cpu|cuda(:\d+)?)$")
    precision: Precision = "auto"
    time_limit_s: PositiveFloat = 900.0
    train: TrainSpec = TrainSpec()
    optimizer: OptimizerSpec = OptimizerSpec()
    norm: NormSpec = NormSpec()
    prune: PruneSpec | None = None
    quantize: QuantizeSpec | None = None
    model: dict[str, Any] = {}
    """Fields this method sets in every model section it runs on (e.g. `{init: gpt2}`: a
    baseline with another init in the same recipe); validated against each model's schema."""


class MethodSpec(TrialSettings):
    """A named method: a partial trial, optionally inheriting another and sweeping fields."""

    extends: str | None = None
    description: str = ""
    sweep: dict[str, SweepValues] = {}


class MatrixEntry(StrictModel):
    methods: list[str] = Field(min_length=1)
    models: list[str] = Field(min_length=1)
    tasks: list[str] = Field(min_length=1)


class TargetSpec(StrictModel):
    """A value of `metric` to reach: one for every task, or a map task -> value (AlgoPerf sets
    one target per workload)."""

    model_config = ConfigDict(frozen=True)

    metric: str
    value: float | dict[str, float]

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

    metric: str = "val_loss"
    tune_metric: str | None = None  # None: `metric`; pick sweep points on a held-out metric
    tuning: Tuning = "per_method"
    ci: CIMethod = "t"
    aggregate: Aggregate = "mean_win_rate"
    target: TargetSpec | None = None
    alpha: float = Field(0.05, gt=0.0, lt=1.0)

    @model_validator(mode="after")
    def aggregate_target(self) -> RankSpec:
        if AGGREGATES.entry(self.aggregate).needs_target and self.target is None:
            raise ValueError(f"aggregate {self.aggregate} needs a `target`")
        return self


class Claim(StrictModel):
    """A published claim the suite tests (`expect`): `method` is `direction` than `than` on
    `metric`; `recipes` are the suite's models it is checked under (verdicts in
    `harness.claims`)."""

    method: str
    than: str | None = None  # None: the suite's baseline
    metric: str | None = None  # None: rank.metric
    direction: ClaimDirection
    margin: PositiveFloat | None = None  # the equivalence margin of a tie, in the metric's units
    source: str = Field(min_length=1)  # "arXiv id, table or figure"
    note: str = ""
    recipes: list[str] | None = Field(None, min_length=1)  # None: every model of the suite

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

    initial: int = Field(ge=2)
    max: PositiveInt
    step: PositiveInt = 1

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

    metrics: list[str] = []  # the metrics watched; empty: `rank.metric`
    window: PositiveInt = 14  # earlier nightly runs on the same host class in the baseline
    tolerance: PositiveFloat = 0.02  # the smallest change that matters
    tolerance_kind: Literal["relative", "absolute"] = "relative"  # of the window's mean, or units
    z: PositiveFloat = 4.0  # outside the window's mean +- z sigma (Conbench)
    confirm: PositiveInt = 2  # consecutive flagged runs that confirm a change (PyTorch HUD)


class TrackingSpec(StrictModel):
    mlflow: bool = True


class ResourcesSpec(StrictModel):
    """What each trial asks a Ray or Slurm cluster for; unset: 1 CPU, 1 GPU when its device is
    CUDA, and the cluster's default memory (Slurm rounds CPUs and GPUs up to whole ones).

    `cpus` also fixes each trial's intra-op torch threads on every backend, local included
    (`threads`), since the thread count changes a CPU trial's float reductions, so its numbers."""

    cpus: PositiveFloat | None = None
    gpus: NonNegativeFloat | None = None
    memory_gb: PositiveFloat | None = None

    @property
    def threads(self) -> int:
        """A trial's intra-op torch threads: the whole CPUs in `cpus` (Ray may give a fraction
        of one), at least 1; 1 when unset."""
        return max(1, math.floor(self.cpus)) if self.cpus is not None else DEFAULT_THREADS


class SlurmSpec(StrictModel):
    """How `--backend slurm` submits (sbatch options; the CLI's `--slurm-*` flags override).

    `folder` holds each job's pickled trial, result and logs: on a filesystem the nodes share.
    The Slurm time limit is `time_limit_s` plus `time_grace_s`, rounded up to whole minutes."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    array_parallelism: PositiveInt = 64  # trials of this driver queued or running at once
    time_grace_s: NonNegativeFloat = 60.0
    max_retries: NonNegativeInt = 1  # resubmissions after a node failure or preemption
    folder: str = "slurm-jobs"
    setup: list[str] = []  # shell lines run before each trial (module load, source a venv)
    sbatch: dict[str, str | int | bool] = {}  # any other sbatch flag, e.g. {constraint: a100}


class Suite(StrictModel):
    """A suite file (SPEC section 2)."""

    suite: str = Field(pattern=SLUG)
    description: str = ""
    cadence: Literal["commit", "nightly", "weekly", "manual"] = "manual"
    seeds: Seeds = [0]
    """A fixed list of seeds, or a sequential schedule (`SeedSchedule`)."""
    defaults: TrialSettings = TrialSettings()
    models: dict[str, dict[str, Any]] = Field(min_length=1)
    tasks: dict[str, dict[str, Any]] = Field(min_length=1)
    methods: dict[str, MethodSpec] = Field(min_length=1)
    matrix: list[MatrixEntry] | None = None
    baseline: str | None = None
    rank: RankSpec = RankSpec()
    expect: list[Claim] = []
    regression: RegressionSpec = RegressionSpec()
    tracking: TrackingSpec = TrackingSpec()
    resources: ResourcesSpec = ResourcesSpec()
    slurm: SlurmSpec = SlurmSpec()
    plugins: list[str] = []

    @property
    def seed_list(self) -> list[int]:
        """Every seed a trial may get: the fixed list, or 0 .. max - 1 of a schedule."""
        if isinstance(self.seeds, SeedSchedule):
            return list(range(self.seeds.max))
        return list(self.seeds)

    @property
    def schedule(self) -> SeedSchedule | None:
        return self.seeds if isinstance(self.seeds, SeedSchedule) else None
