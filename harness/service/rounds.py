"""Which trials a suite with sequential seeds (`seeds: {initial, max, step}`) runs next.

The policy of `layerbench run`: first seeds 0 .. initial - 1 of every trial; then after each look
(the findings of `harness.claims` on every stored outcome) `step` more seeds only for
the two methods of each comparison still open on its recipe (model, task): not decided, not
futile (unless `stop_futile: false`), below `max` (`harness.claims.sequential`). The
comparisons are the suite's `expect` claims, or without claims each method against the
baseline. A method with a sweep is tuned on
the initial seeds (`harness.stats.outcomes.select_tuned`, `tuned_on`), so its later seeds run
the chosen sweep point alone (with `rank.tuning: per_seed`, every point, as each seed picks its
own). `SequentialSeeds` is the round policy of a run (`trials(round)`: the next batch given the
stored outcomes, which the run path reads); everything here is pure (no store).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from harness.claims import Finding
from harness.claims.sequential import SequentialCheck
from harness.core import CellKey, TrialOutcome, cell_of, point_label
from harness.ranking.suite import RankPlan, claim_findings, plan_of, ranked_metrics
from harness.records import PlannedTrial, TrialResult
from harness.registry import METRICS
from harness.spec.rank import RankSpec, SeedSchedule
from harness.spec.schema import Suite
from harness.stats.outcomes import select_tuned


@dataclass(frozen=True)
class Round:
    """What a `RoundPolicy` sees before each round."""

    number: int
    """0 for the first round."""
    planned: Sequence[PlannedTrial]
    """Every selected trial of the suite, under the keys this run stores them."""
    outcomes: Sequence[TrialOutcome]
    """The planned trials' stored outcomes, with the final metrics the policy `reads`."""
    results: dict[str, TrialResult]
    """What the earlier rounds of this run produced, by trial key."""


class RoundPolicy(Protocol):
    """Which trials the next round runs (none: the run is over)."""

    @property
    def reads(self) -> frozenset[str] | None:
        """The final metrics of the stored outcomes each round is given (None: no outcomes)."""
        ...

    def trials(self, round: Round) -> Sequence[PlannedTrial]: ...

    def most(self, planned: Sequence[PlannedTrial]) -> int | None:
        """The most trials the rounds can run (None: those of the first round)."""
        ...


class FixedDesign:
    """Every planned trial, in one round."""

    reads = None

    def trials(self, round: Round) -> Sequence[PlannedTrial]:
        return round.planned if round.number == 0 else ()

    def most(self, planned: Sequence[PlannedTrial]) -> int | None:
        return None


def default_policy(suite: Suite, show: Callable[[str], None]) -> RoundPolicy:
    """`SequentialSeeds` for a suite with a seed schedule (`show` gets each look), else
    `FixedDesign`."""
    if suite.schedule is None:
        return FixedDesign()
    return SequentialSeeds(suite, show)


@dataclass(frozen=True)
class Look:
    """One look: the findings on the stored outcomes and the seeds each cell needs next."""

    findings: list[Finding]
    wanted: dict[CellKey, int]
    """(method, model, task) -> seeds 0 .. n - 1 it needs; only cells of open comparisons."""
    points: dict[CellKey, str] | None = None
    """(method, model, task) -> the sweep point that runs the later seeds; None: every point."""

    def lines(self, number: int) -> list[str]:
        """The look as `layerbench run` prints it."""
        out = [f"look {number}:"]
        for finding in self.findings:
            for check in finding.checks:
                record = check.sequential
                if record is None:
                    continue
                low, high = (f"{x:+.4g}" if x is not None else "inf" for x in record.interval)
                state = record.stopped or "open"
                out.append(
                    f"  {finding.claim} [{check.model}/{check.task}]: n = {record.n}, "
                    f"interval [{low}, {high}], {check.verdict_text} ({state})"
                )
        if self.wanted:
            points = self.points or {}
            more = ", ".join(
                f"{points.get(cell, cell.method)}/{cell.model}/{cell.task} to {n}"
                for cell, n in sorted(self.wanted.items())
            )
            out.append(f"  more seeds: {more}")
        else:
            out.append("  every comparison decided, futile or at max: done")
        return out


def look(plan: RankPlan, schedule: SeedSchedule, outcomes: Sequence[TrialOutcome]) -> Look:
    """The findings of the stored outcomes and the seeds the open comparisons need next."""
    found = claim_findings(replace(plan, schedule=schedule), outcomes)
    seeds: dict[CellKey, set[int]] = {}
    for o in outcomes:
        seeds.setdefault(cell_of(o), set()).add(o.seed)
    wanted: dict[CellKey, int] = {}
    for finding in found:
        for check in finding.checks:
            record = check.sequential
            if check.verdict != "inconclusive" or record is None or not _open(record, schedule):
                continue
            cells = [CellKey(m, check.model, check.task) for m in (finding.method, finding.than)]
            ran = max(len(seeds.get(cell, ())) for cell in cells)
            target = min(schedule.max, ran + schedule.step)
            for cell in cells:
                wanted[cell] = max(wanted.get(cell, 0), target)
    return Look(found, wanted, tuned_points(plan.spec, schedule.initial, outcomes))


def _open(record: SequentialCheck, schedule: SeedSchedule) -> bool:
    """Would the schedule add seeds to this check: not stopped, or futile where futility is
    not applied (`stop_futile: false`)?"""
    return record.stopped is None or (record.stopped == "futile" and not schedule.stop_futile)


def tuned_points(
    spec: RankSpec, initial: int, outcomes: Sequence[TrialOutcome]
) -> dict[CellKey, str] | None:
    """The sweep point each cell reports, chosen on the initial seeds; None under per_seed
    tuning (each seed picks its own point, so every point runs every seed)."""
    if spec.tuning == "per_seed":
        return None
    tune_metric = spec.tune_metric or spec.metric
    direction = METRICS.get(tune_metric).direction
    tuned = select_tuned(outcomes, tune_metric, direction, "per_method", initial)
    return {cell_of(o): point_label(o.method, o.sweep) for o in tuned}


def unneeded_trials(
    suite: Suite, planned: Sequence[PlannedTrial], stored: Sequence[TrialOutcome]
) -> set[str]:
    """Keys of later seeds the schedule will never run: of a method with a sweep, the points
    the first look did not choose (known once every initial trial is stored)."""
    schedule = suite.schedule
    keys = {o.key for o in stored}
    if schedule is None or any(t.key not in keys for t in initial_trials(schedule, planned)):
        return set()
    points = tuned_points(suite.rank, schedule.initial, stored) or {}
    return {
        t.key
        for t in planned
        if t.seed >= schedule.initial
        and points.get(CellKey(t.method, t.model, t.task), point_label(t.method, t.sweep))
        != point_label(t.method, t.sweep)
    }


def initial_trials(schedule: SeedSchedule, planned: Sequence[PlannedTrial]) -> list[PlannedTrial]:
    """Seeds 0 .. initial - 1 of every planned trial."""
    return [t for t in planned if t.seed < schedule.initial]


def most_trials(suite: Suite, planned: Sequence[PlannedTrial]) -> int:
    """The most trials the schedule can run: every initial trial, then one sweep point per
    (method, model, task) and later seed (every point under per_seed tuning)."""
    schedule = suite.schedule
    if schedule is None or suite.rank.tuning == "per_seed":
        return len(planned)
    later = {
        (CellKey(t.method, t.model, t.task), t.seed) for t in planned if t.seed >= schedule.initial
    }
    return len(initial_trials(schedule, planned)) + len(later)


def wanted_trials(look_: Look, planned: Sequence[PlannedTrial]) -> list[PlannedTrial]:
    """The planned trials the look asks for, of each cell's tuned sweep point (stored ones
    included: the caller skips them)."""
    out = []
    for trial in planned:
        cell = CellKey(trial.method, trial.model, trial.task)
        point = None if look_.points is None else look_.points.get(cell)
        if trial.seed >= look_.wanted.get(cell, 0):
            continue
        if point is None or point == point_label(trial.method, trial.sweep):
            out.append(trial)
    return out


class SequentialSeeds:
    """The round policy of a suite with sequential seeds: the initial seeds while any is not
    stored, then after each look the trials the open comparisons ask for that this run has not
    run yet (none: the run is over). `show` receives each look's lines. Pure: the run path
    (`harness.service.run`) reads the stored outcomes it looks at (the final metrics `reads`)."""

    def __init__(self, suite: Suite, show: Callable[[str], None] = lambda line: None) -> None:
        if suite.schedule is None:
            raise ValueError(f"suite '{suite.suite}' has a fixed list of seeds")
        self.suite, self.schedule, self.show = suite, suite.schedule, show
        self.looks = 0
        plan = plan_of(suite, [])
        self.reads: frozenset[str] | None = ranked_metrics(plan, plan.spec)
        """What a look ranks and checks, no more."""

    def most(self, planned: Sequence[PlannedTrial]) -> int:
        return most_trials(self.suite, planned)

    def trials(self, round: Round) -> list[PlannedTrial]:
        first = initial_trials(self.schedule, round.planned)
        stored = {o.key for o in round.outcomes}
        if round.number == 0 and any(t.key not in stored for t in first):
            return first
        found = look(
            plan_of(self.suite, [t.key for t in round.planned]), self.schedule, round.outcomes
        )
        self.looks += 1
        self.show("\n".join(found.lines(self.looks)))
        return [t for t in wanted_trials(found, round.planned) if t.key not in round.results]
