"""How a suite is ranked and what it claims (SPEC 6-7): the `rank` section, the `expect` claims
and the seeds (a fixed list or a sequential schedule)."""

from __future__ import annotations

from datetime import date, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    ConfigDict,
    Discriminator,
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Tag,
    model_validator,
)

from harness.registry import AGGREGATES
from harness.spec.sections import StrictModel


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


class PaperEffect(StrictModel):
    """The size of the effect the paper reports (`expect[].paper_effect`): an undecided claim
    whose interval excludes it reads "not reproduced at this scale"."""

    value: PositiveFloat = Field(
        description="The effect's size in the claimed direction: metric units, or a fraction "
        "of the `than` method's mean when `relative`."
    )
    relative: bool = Field(False, description="`value` is a fraction of `than`'s mean.")
    source: str = Field(min_length=1, description="Where the paper reports it.")


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
    paper_effect: PaperEffect | None = Field(
        None, description="The effect the paper reports, for labelling an undecided verdict."
    )
    scope: str = Field(
        "",
        description="Why the verdict may not speak to the paper at this scale (e.g. its "
        "precondition is absent); shown with the verdict.",
    )
    registered: datetime | date | None = Field(
        None,
        description="When the claim was added to the suite (a date: its start, UTC); a claim "
        "registered after trials it uses were stored is exploratory. None: the suite file's git "
        "history says (`harness.spec.history`).",
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
    looks: Literal["planned", "unplanned"] = Field(
        "planned",
        description="planned: alpha is spent over the schedule's looks (O'Brien-Fleming "
        "shares); unplanned: anytime-valid verdicts, for seeds added by hand "
        "(docs/sequential.md).",
    )
    stop_futile: bool = Field(
        True,
        description="Stop adding seeds to a comparison whose conditional power at `max` is "
        "below 10% (futile); false: every undecided comparison runs to `max`. Futility is "
        "non-binding: the error rates hold either way (docs/sequential.md).",
    )

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
