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
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
)

from harness.spec.rank import (
    Claim,
    RankSpec,
    Seeds,
    SeedSchedule,
)
from harness.spec.sections import (
    NormSpec,
    OptimizerSpec,
    Precision,
    PruneSpec,
    QuantizeSpec,
    StrictModel,
    TrainSpec,
)

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
    evaluate: str | None = Field(
        None,
        description="A task of the suite, of type lm-eval, that a fine-tuning trial also "
        "evaluates before and after fine-tuning (its metrics, e.g. `before_acc` and `acc`, "
        "stored in the one trial); None: the fine-tuning task's own held-out metrics only.",
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
    tasks: PositiveInt | None = Field(
        None,
        description="Processes (torch.distributed ranks) of each trial per node, which train "
        "one model together as `train.parallel` says: one per GPU on CUDA (NCCL), gloo ranks on "
        "the CPU. Unset: `gpus` when it is 2 or more, else 1.",
    )
    nodes: PositiveInt = Field(
        1,
        description="Nodes each trial spans (Slurm `--nodes`), `tasks` ranks on each; the "
        "local backend starts all the ranks on its own machine.",
    )

    @property
    def threads(self) -> int:
        """A trial's intra-op torch threads: the whole CPUs in `cpus` (Ray may give a fraction
        of one), at least 1; 1 when unset."""
        return max(1, math.floor(self.cpus)) if self.cpus is not None else DEFAULT_THREADS

    @property
    def tasks_per_node(self) -> int:
        """A trial's ranks on each node: `tasks`, else one per whole GPU (at least 1)."""
        if self.tasks is not None:
            return self.tasks
        return max(1, math.floor(self.gpus)) if self.gpus is not None else 1

    @property
    def ranks(self) -> int:
        """A trial's processes in all (its torch.distributed world size)."""
        return self.nodes * self.tasks_per_node


class SlurmSpec(StrictModel):
    """How `--backend slurm` submits (sbatch options; the CLI's `--slurm-*` flags override).

    `folder` holds each job's pickled trial, result and logs: on a filesystem the nodes share.
    The Slurm time limit is `time_limit_s` plus `time_grace_s`, rounded up to whole minutes (at
    least two), or `job_time_s` where that is shorter: the trial then continues over several
    jobs from its checkpoints, within `time_limit_s` of running time over all of them."""

    partition: str | None = Field(None, description="sbatch --partition; None: the default.")
    account: str | None = Field(None, description="sbatch --account; None: the default.")
    qos: str | None = Field(None, description="sbatch --qos; None: the default.")
    array_parallelism: PositiveInt = Field(
        64, description="Trials of this driver queued or running at once."
    )
    time_grace_s: NonNegativeFloat = Field(
        60.0, description="Added to `time_limit_s` for the Slurm time limit (seconds)."
    )
    job_time_s: float | None = Field(
        None,
        ge=120,
        description="Each job's Slurm time limit (seconds, at least 120) when the partition's is "
        "shorter than a trial: the trial is requeued from its checkpoints within its "
        "time_limit_s; None: time_limit_s plus time_grace_s, one job.",
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
