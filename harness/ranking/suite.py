"""The one path from a suite to its `Ranking`, used by `layerbench rank`, `layerbench run` and
the leaderboard: the suite's current trials (not those of an older config or package version:
their keys differ), ranked the way its `rank` section says.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from harness.cache import DataMissingError
from harness.claims import IMPLICIT_SOURCE, Finding, TrivialLevels, findings
from harness.core import TrialOutcome
from harness.lazy_registry import RegistryError
from harness.ranking.outcomes import each_point
from harness.ranking.ranker import rank
from harness.ranking.records import Ranking
from harness.registry import TASKS, TrainTaskEntry
from harness.spec.declaration import RankingDeclaration
from harness.spec.history import as_utc
from harness.spec.rank import Claim, RankSpec, SeedSchedule, tuning_seeds
from harness.spec.schema import Suite
from harness.stats.examples import ExampleOutcomes
from harness.store.coverage import unstored_notes
from harness.store.nightly import latest_results
from harness.store.queries import (
    end_times,
    example_outcomes,
    recorded_plan,
    stored_outcomes,
    suite_keys,
    task_sections,
)
from harness.tasks.trivial import trivial_name
from harness.utils import paused_gc

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from harness.records import PlannedTrial

SUPERSEDED_UNKNOWN = (
    "no suite run recorded this suite's plan (a database older than this version): every "
    "stored trial is ranked, including any of an older config"
)


@dataclass(frozen=True)
class RankPlan:
    """What to rank: the suite's trial keys, its baseline and its `rank` section."""

    suite: str
    keys: list[str]
    baseline: str | None
    spec: RankSpec
    warnings: tuple[str, ...] = ()
    claims: tuple[Claim, ...] = ()
    models: tuple[str, ...] = ()
    """The suite's models in suite order: the recipes of claims that list none."""
    unstored: tuple[str, ...] | None = None
    """Why planned trials have no stored result (`harness.store.coverage.unstored_notes`); None
    when not known (a recorded plan): `rank_suite` then states only their number."""
    schedule: SeedSchedule | None = None
    """The suite's sequential seeds, if any: claims get anytime-valid verdicts."""
    tasks: Mapping[str, Mapping[str, Any]] | None = None
    """The suite's task sections (their trivial predictors' levels); None: read them from the
    stored trials' configs."""
    registered: tuple[datetime | None, ...] = ()
    """When each claim was registered (`harness.spec.history`; empty: the claims' own
    `registered:` fields): exploratory claims."""

    def registrations(self) -> tuple[datetime | None, ...]:
        """Per claim, when it was registered (None: unknown)."""
        if self.registered:
            return self.registered
        return tuple(as_utc(c.registered) if c.registered else None for c in self.claims)


def plan_of(
    suite: Suite,
    keys: list[str],
    unstored: tuple[str, ...] | None = None,
    registered: tuple[datetime | None, ...] = (),
) -> RankPlan:
    """What to rank of a suite file: its trials `keys` (as the runner plans them now);
    `registered`: when each claim was registered (`harness.spec.history.registrations`)."""
    declared = RankingDeclaration.of_suite(suite)
    return RankPlan(
        suite=suite.suite,
        keys=keys,
        baseline=declared.baseline,
        spec=declared.rank,
        claims=declared.expect,
        models=declared.models,
        unstored=unstored,
        schedule=declared.schedule,
        tasks=dict(suite.tasks),
        registered=registered,
    )


def trivial_levels(tasks: Mapping[str, Mapping[str, Any]]) -> tuple[TrivialLevels, list[str]]:
    """Each task's trivial predictor's values (`harness.tasks.trivial`), and a warning per task
    whose level cannot be computed here (its data is not installed)."""
    levels: dict[str, dict[str, float]] = {}
    warnings = []
    for name, section in tasks.items():
        try:
            entry = TASKS.entry(str(section.get("type")))
            if not isinstance(entry, TrainTaskEntry) or entry.trivial is None:
                continue
            params = entry.params.model_validate(section) if entry.params else section
            levels[name] = entry.trivial(params)
        except (DataMissingError, RegistryError, ValueError, OSError) as error:
            warnings.append(
                f"task '{name}': its trivial predictor's level is unknown ({error}); no claim "
                "on it is checked for degenerate (untrained) methods"
            )
    return levels, warnings


def planned(
    engine: Engine,
    suite: Suite,
    trials: list[PlannedTrial],
    registered: tuple[datetime | None, ...] = (),
) -> RankPlan:
    """What to rank of a suite file planned as `trials`, with why some have no stored result.
    Under sequential seeds only the initial seeds are owed: a later seed runs only when a look
    asks for it, so its absence needs no reason."""
    owed = [t for t in trials if suite.schedule is None or t.seed < suite.schedule.initial]
    notes = tuple(unstored_notes(engine, owed))
    return plan_of(suite, [trial.key for trial in trials], notes, registered)


def unstored_count_note(plan: RankPlan, stored: Sequence[TrialOutcome]) -> list[str]:
    """The line for a recorded plan's trials without a stored result (their reasons need the
    suite file: `planned`). Under sequential seeds a later seed runs only when a look asks for
    it, so those are counted apart from the initial seeds really missing (the plan holds every
    seed up to `max` of every cell and sweep point: `initial / max` of its trials are
    initial)."""
    absent = len(plan.keys) - len(stored)
    if absent <= 0:
        return []
    head = f"{absent} of {len(plan.keys)} planned trials have no stored result"
    why = "(not run, running, or interrupted): `layerbench rank` of the suite file says why"
    schedule = plan.schedule
    if schedule is None or len(plan.keys) % schedule.max:
        return [f"{head} {why}"]
    initial = len(plan.keys) // schedule.max * schedule.initial
    missing = max(0, initial - sum(o.seed < schedule.initial for o in stored))
    later = (
        f"{absent - missing} are later seeds the sequential rule has not asked for (its "
        "comparisons need no more, or its next look has not run)"
    )
    if not missing:
        return [f"{head}: {later}; every initial seed is stored"]
    return [f"{head}: {missing} of the {initial} initial-seed trials {why}; {later}"]


def recorded(engine: Engine, suite: str) -> RankPlan:
    """The plan the suite's latest run recorded (every stored trial if no run recorded one)."""
    found = recorded_plan(engine, suite)
    declared, keys = found if found else (None, None)
    declared = declared or RankingDeclaration()
    warnings: tuple[str, ...] = ()
    if keys is None:
        keys, warnings = suite_keys(engine, suite), (SUPERSEDED_UNKNOWN,)
    return RankPlan(
        suite=suite,
        keys=keys,
        baseline=declared.baseline,
        spec=declared.rank,
        warnings=warnings,
        claims=declared.expect,
        models=declared.models,
        schedule=declared.schedule,
    )


def ranked_metrics(plan: RankPlan, spec: RankSpec) -> frozenset[str]:
    """The final metrics that ranking the plan by `spec` and checking its claims read: the
    ranked, tuning and target metrics, and each claim's metric with its trivial predictor's
    level (`compared_claims`: implicit claims are on the ranked metric)."""
    checked = {claim.metric or spec.metric for claim in plan.claims}
    if implicit_claims(plan):
        checked.add(spec.metric)
    named = {spec.metric, spec.tune_metric, spec.target.metric if spec.target else None}
    named |= checked | {trivial_name(metric) for metric in checked}
    return frozenset(name for name in named if name is not None)


def plan_outcomes(
    engine: Engine, plan: RankPlan, nightly: bool, spec: RankSpec | None = None
) -> list[TrialOutcome]:
    """The stored finished trials of the plan, with the final metrics that ranking them by
    `spec` (default: the plan's) reads (`ranked_metrics`) and the target metric's series if
    any; with `nightly`, the last finished nightly run's instead when it is newer
    (`latest_results`)."""
    spec = spec or plan.spec
    series = spec.target.metric if spec.target else None
    metrics = ranked_metrics(plan, spec)
    if nightly:
        return latest_results(engine, plan.suite, plan.keys, series, metrics)
    return stored_outcomes(engine, plan.keys, series, suite=plan.suite, metrics=metrics)


def stored_examples(engine: Engine, keys: list[str]) -> ExampleOutcomes | None:
    """Per-example outcomes of the trials (evaluation-only tasks store them); None if none."""
    from sqlalchemy.orm import Session

    with Session(engine) as session:
        return example_outcomes(session, keys) or None


@dataclass(frozen=True)
class Baseline:
    """A baseline chosen by the reader instead of the suite's (`name` None: no baseline)."""

    name: str | None


@dataclass(frozen=True)
class RankOverrides:
    """What a reader changes of how the suite says to rank it: `metric`, `baseline` and `alpha`
    replace the suite's; `keep` filters the outcomes (the leaderboard's sidebar);
    `current_only=False` ranks every stored trial (History); `all_points` ranks each sweep point
    as a method; with `nightly` (and `current_only`), the last finished nightly run is ranked
    when it is newer."""

    metric: str | None = None
    baseline: Baseline | None = None
    alpha: float | None = None
    all_points: bool = False
    keep: Callable[[TrialOutcome], bool] | None = None
    current_only: bool = True
    nightly: bool = True

    def spec(self, declared: RankSpec) -> RankSpec:
        """The suite's `rank` section with the metric and alpha replaced."""
        changed = {"metric": self.metric, "alpha": self.alpha}
        return declared.model_copy(update={k: v for k, v in changed.items() if v is not None})


@paused_gc()
def rank_suite(
    engine: Engine, suite: RankPlan | str, overrides: RankOverrides = RankOverrides()
) -> Ranking | None:
    """Rank a suite's current trials (a suite file's plan, `plan_of`, or a suite name: the plan
    its latest run recorded), the way its `rank` section says but for the `overrides`;
    single-seed groups get example-level statistics where the store holds per-example
    outcomes. None when nothing is stored."""
    plan = suite if isinstance(suite, RankPlan) else recorded(engine, suite)
    if not overrides.current_only:
        plan = replace(plan, keys=suite_keys(engine, plan.suite), warnings=())
    latest = overrides.nightly and overrides.current_only
    keep = overrides.keep
    spec = overrides.spec(plan.spec)
    loaded = plan_outcomes(engine, plan, latest, spec)
    outcomes = [o for o in loaded if keep is None or keep(o)]
    if not outcomes:
        return None
    gaps = list(plan.unstored) if plan.unstored is not None else []
    if plan.unstored is None and overrides.current_only:
        gaps = unstored_count_note(plan, loaded)
    chosen = plan.baseline if overrides.baseline is None else overrides.baseline.name
    if overrides.all_points:
        outcomes = each_point(outcomes)
        chosen = chosen if any(o.method == chosen for o in outcomes) else None
    examples = stored_examples(engine, [o.key for o in outcomes])
    tuned_on = tuning_seeds(plan.schedule)
    ranking = rank(outcomes, spec, chosen, examples=examples, tuned_on=tuned_on)
    found: list[Finding] = []
    notes: list[str] = []
    if not overrides.all_points and compared_claims(plan, outcomes):
        tasks = plan.tasks if plan.tasks is not None else task_sections(engine, plan.keys)
        levels, notes = trivial_levels(tasks)
        ended = end_times(engine, plan.keys) if any(plan.registrations()) else {}
        found = claim_findings(plan, outcomes, ranking.alpha, levels, ended)
    warnings = [*gaps, *plan.warnings, *ranking.warnings, *notes]
    if plan.schedule is not None:
        warnings.append(SEQUENTIAL_WARNING)
    return replace(ranking, warnings=warnings, findings=found)


SEQUENTIAL_WARNING = (
    "sequential seeds: each method's seeds were chosen by the run's looks, so the p-values and "
    "verdicts of the tables above are fixed-n tests on data-dependent seeds; the sequential rule's "
    "verdicts are the Findings' (docs/sequential.md)"
)


def compared_claims(plan: RankPlan, outcomes: Sequence[TrialOutcome]) -> tuple[Claim, ...]:
    """The plan's `expect` claims; under sequential seeds without claims, each method against
    the baseline (two-sided: `better` is decided either way), the comparisons that steer the
    seeds (`harness.service.rounds`)."""
    if not implicit_claims(plan):
        return plan.claims
    methods = sorted({o.method for o in outcomes} - {plan.baseline})
    return tuple(
        Claim(method=m, than=plan.baseline, direction="better", source=IMPLICIT_SOURCE)
        for m in methods
    )


def implicit_claims(plan: RankPlan) -> bool:
    """The plan's claims are implicit: sequential seeds and a baseline, and no `expect`."""
    return not plan.claims and plan.schedule is not None and plan.baseline is not None


def claim_findings(
    plan: RankPlan,
    outcomes: Sequence[TrialOutcome],
    alpha: float | None = None,
    trivial: TrivialLevels | None = None,
    ended: Mapping[str, datetime] | None = None,
) -> list[Finding]:
    """The verdicts of the plan's claims (`compared_claims`) on these outcomes, tuned the way
    its `rank` section says (`alpha`: the suite's unless given; `trivial`: the tasks' trivial
    levels, computed from the plan's task sections unless given; `ended`: the trials' end
    times, which mark claims registered after them exploratory)."""
    claims = compared_claims(plan, outcomes)
    if not claims:
        return []
    if trivial is None:
        trivial = trivial_levels(plan.tasks or {})[0]
    spec = plan.spec
    return findings(
        outcomes,
        claims,
        baseline=plan.baseline,
        metric=spec.metric,
        tune_metric=spec.tune_metric,
        tuning=spec.tuning,
        alpha=spec.alpha if alpha is None else alpha,
        models=plan.models,
        trivial=trivial,
        schedule=plan.schedule,
        registered=plan.registrations() if plan.claims and ended else (),
        ended=ended,
    )
