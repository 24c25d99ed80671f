"""Verdicts of a suite's published claims (`expect`) from its outcomes.

A claim says `method` is `better`, `worse` or a `tie` than `than` on `metric`. It is checked on
each of its recipes (the suite's models it lists; default: every model on which both methods
ran), on every task where both ran, with the trials the ranking reports (sweep points tuned on
`rank.tune_metric` the way `rank.tuning` says, `harness.ranking.outcomes.select_tuned`).

Per recipe, over the seeds both methods finished (`harness.ranking.stats`):

- **Failures.** A diverged seed loses every comparison: a method with more diverged seeds than
  the other (where the other finished) loses (`decided_by = "failures"`). A crash or a timeout
  is an infrastructure failure, never a loss: the check uses the seeds both methods finished and
  counts the seeds it `excluded`.
- **Degenerate.** Every task declares the level of a trivial predictor (`harness.tasks.trivial`:
  the unigram loss of an `lm` task's training split, a synthetic task's chance level, an lm-eval
  task's chance accuracy). A finished seed whose value is not better than that level by more
  than `TRIVIAL_MARGIN` of it "stays at the trivial predictor". When **both** methods stay there
  on most of their finished seeds, the check is **not tested** (degenerate): no p-value, no
  seeds needed, and it is left out of the Holm family. When only one does, the verdict stands
  and the check says on how many seeds it stays there (`at_trivial`).
- `better` / `worse`: the two-sided paired t-test; the p-values of the suite's directional
  checks (the Holm family, stated in the findings header) are Holm-adjusted together (Holm,
  1979). **reproduced** when the adjusted p < alpha and the difference goes the expected way,
  **contradicted** when it is significant the other way, else **inconclusive**. Beside the
  adjusted p, the matching interval: the Student-t interval at level 1 - alpha * p / p_Holm,
  which excludes 0 exactly when p_Holm < alpha (Holm's procedure has no simultaneous intervals;
  this one is the Bonferroni-type interval at the multiplier Holm applied to this check).
- `tie` (equivalence, two one-sided tests at alpha each, Schuirmann, 1987): **reproduced** when
  the 1 - 2 alpha interval (90% at alpha 0.05) lies inside +-margin, **contradicted** when it
  lies wholly outside, else **inconclusive**; an unequal count of diverged seeds contradicts a
  tie. Ties are not in the Holm family.
- Secondary statistics, so one catastrophic seed is visible: the median paired difference and
  the exact two-sided sign test (a binomial test of the positive differences among the nonzero
  ones).
- Seeds needed, for inconclusive checks whose observed difference has the claimed sign only: the
  seeds at which a paired t-test has 80% power to detect the observed difference (Cohen, 1988)
  at alpha / (the size of the Holm family), the level the first of them must pass; for a tie,
  to exclude the nearer margin (margin - |difference|) at alpha. Where the difference points
  the other way (or lies outside a tie's margin) more seeds would not reproduce the claim, and
  the check says so (`needed_note`).

With sequential seeds (`seeds: {initial, max, step}`), the interval, p-value and verdict of each
tested check are instead the anytime-valid ones of `harness.ranking.sequential` (`decided_by =
"sequential"`, the look record in `sequential`), valid however many looks the run took; a
degenerate check is left out of it (not tested, no further seeds).

A claim's verdict over its tested recipes: their common verdict; **flipped** when one recipe
reproduces it and another contradicts it (significant in opposite directions); **recipe-
dependent** when it is decided in one recipe and inconclusive in another (`differs_on` names
the recipes whose verdict differs from the first's, the paper's, listed first); **not tested**
when every recipe is degenerate.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

import numpy as np

from harness.core import Direction, TrialOutcome
from harness.ranking.groups import Group, build_group
from harness.ranking.outcomes import select_tuned
from harness.ranking.sequential import (
    CheckDecision,
    CheckInput,
    SequentialCheck,
    decide,
    summary,
)
from harness.ranking.stats import (
    finite_or_none,
    holm,
    row_stds,
    seeds_needed,
    sign_test,
    t_ci,
)
from harness.registry import METRICS
from harness.spec.schema import Claim, ClaimDirection, SeedSchedule, Tuning, tuning_seeds
from harness.tasks.trivial import trivial_name

Verdict = Literal["reproduced", "contradicted", "inconclusive", "not tested"]
ClaimVerdict = Literal[
    "reproduced",
    "contradicted",
    "inconclusive",
    "flipped",
    "recipe-dependent",
    "not tested",
    "no data",
]
NOT_TESTED: Verdict = "not tested"
DEGENERATE = "degenerate: both stay at the trivial predictor"
OTHER_WAY = "the observed difference points the other way"
IMPLICIT_SOURCE = "each method against the baseline (sequential seeds, no `expect` claims)"
"""The source of the comparisons a sequential suite without claims steers its seeds by: each
method against the baseline, decided either way, so its verdicts read better / worse."""
IMPLICIT_WORDS = {"reproduced": "better", "contradicted": "worse"}
OUTSIDE_MARGIN = "the observed difference lies outside the margin"
TRIVIAL_MARGIN = 0.02
"""A value within this fraction of the trivial predictor's level (or worse) stays at it."""
TrivialLevels = Mapping[str, Mapping[str, float]]
"""Task -> metric -> the trivial predictor's value."""


@dataclass(frozen=True)
class RecipeCheck:
    """A claim on one (model, task): the paired difference method - than and its verdict."""

    model: str
    task: str
    n: int
    """Seeds both methods finished."""
    delta: float | None
    ci_low: float | None
    ci_high: float | None
    """The unadjusted interval at `ci_level` (95%; a tie's 1 - 2 alpha, 90%)."""
    p_value: float | None
    """Holm-adjusted over the suite's directional checks; None for a tie or without a test."""
    seeds_needed: int | None
    verdict: Verdict
    decided_by: Literal["test", "interval", "failures", "sequential"] | None = None
    failed: tuple[int, int] = (0, 0)
    """Seeds (of method, of than) that diverged where the other finished."""
    sequential: SequentialCheck | None = None
    """With sequential seeds: n, looks, how it stopped, the interval's level, CPU seconds."""
    ci_level: float = 0.95
    p_raw: float | None = None
    """The unadjusted two-sided p-value."""
    holm_ci: tuple[float | None, float | None] | None = None
    holm_level: float | None = None
    """The interval matching the Holm-adjusted p, and its level (see the module doc)."""
    median_delta: float | None = None
    sign_p: float | None = None
    """Exact two-sided sign test of the paired differences."""
    signs: tuple[int, int] = (0, 0)
    """Paired differences (above 0, below 0)."""
    excluded: int = 0
    """Seeds left out because either method crashed or timed out there."""
    trivial: float | None = None
    """The task's trivial predictor's value of the metric (None: unknown)."""
    at_trivial: tuple[int, int] = (0, 0)
    finished: tuple[int, int] = (0, 0)
    """Finished seeds (of method, of than) that stay at the trivial predictor, and of how many."""
    needed_note: str | None = None
    """Why an inconclusive check has no seeds needed (e.g. `OTHER_WAY`)."""
    names: tuple[str, str] = ("", "")
    """The compared methods (method, than)."""
    implicit: bool = False
    """A comparison with the baseline, not a claim (`IMPLICIT_SOURCE`): verdicts read
    better / worse."""

    @property
    def degenerate(self) -> bool:
        return self.verdict == NOT_TESTED

    @property
    def annotation(self) -> str:
        """ "X stays at the trivial predictor on k of n seeds" for each method that does; plus
        the excluded seeds. Empty when there is nothing to add."""
        notes = [
            f"{name} stays at the trivial predictor on {k} of {n} seeds"
            for name, k, n in zip(self.names, self.at_trivial, self.finished, strict=True)
            if k and not self.degenerate
        ]
        if self.excluded:
            notes.append(f"{self.excluded} seeds excluded (crashed or timed out)")
        return "; ".join(notes)

    @property
    def verdict_text(self) -> str:
        if self.degenerate:
            return f"{NOT_TESTED} ({DEGENERATE})"
        word = IMPLICIT_WORDS.get(self.verdict, self.verdict) if self.implicit else self.verdict
        return word + (" (failures)" if self.decided_by == "failures" else "")


@dataclass(frozen=True)
class Finding:
    """A claim, its checks per recipe and its verdict."""

    index: int
    method: str
    than: str
    metric: str
    direction: ClaimDirection
    margin: float | None
    source: str
    note: str
    checks: list[RecipeCheck]
    verdict: ClaimVerdict
    differs_on: list[str] = field(default_factory=list)
    """Recipes whose verdict differs from the first tested recipe's."""

    @property
    def implicit(self) -> bool:
        """A comparison with the baseline that no claim states (`IMPLICIT_SOURCE`)."""
        return self.source == IMPLICIT_SOURCE

    @property
    def claim(self) -> str:
        """The claim in words, e.g. "post-ln worse than pre-ln on val_loss", "rmsnorm ties
        layernorm (+-0.03) on val_loss"; a comparison no claim states: "lion against adamw on
        val_loss"."""
        if self.implicit:
            return f"{self.method} against {self.than} on {self.metric}"
        if self.direction == "tie":
            return f"{self.method} ties {self.than} (+-{self.margin:g}) on {self.metric}"
        return f"{self.method} {self.direction} than {self.than} on {self.metric}"

    @property
    def untested_on(self) -> list[str]:
        """Recipes where the claim is degenerate (both methods stay at the trivial predictor)."""
        return [_label(c, self.checks) for c in self.checks if c.degenerate]

    @property
    def verdict_text(self) -> str:
        """The verdict with what qualifies it: the degenerate reason, the recipes it differs on,
        the recipes where it is not tested."""
        if self.verdict == NOT_TESTED:
            return f"{NOT_TESTED} ({DEGENERATE})"
        text = IMPLICIT_WORDS.get(self.verdict, self.verdict) if self.implicit else self.verdict
        if self.verdict == "flipped":
            text = f"flipped (significant the other way on {', '.join(self.differs_on)})"
        elif self.verdict == "recipe-dependent":
            text = f"recipe-dependent (differs on {', '.join(self.differs_on)})"
        if untested := self.untested_on:
            text += f"; not tested on {', '.join(untested)} (degenerate)"
        return text

    def to_dict(self) -> dict[str, Any]:
        checks = [
            asdict(c) | {"verdict_text": c.verdict_text, "annotation": c.annotation}
            for c in self.checks
        ]
        found = asdict(self) | {
            "claim": self.claim,
            "verdict_text": self.verdict_text,
            "checks": checks,
        }
        records = [c.sequential for c in self.checks if c.sequential is not None]
        if records:  # sequential seeds only: the fixed design's JSON has no such keys
            found["sequential"] = summary(records)
        else:
            for check in checks:
                del check["sequential"]
        return found


def degenerate_pairs(found: Iterable[Finding]) -> set[tuple[str, str, str, str]]:
    """(method, than, model, task) of every degenerate check: comparisons that must get no
    further seeds (both methods stay at the trivial predictor)."""
    return {
        (finding.method, finding.than, check.model, check.task)
        for finding in found
        for check in finding.checks
        if check.degenerate
    }


@dataclass(frozen=True)
class _Pending:
    """A check before the suite-wide Holm adjustment."""

    claim: int
    model: str
    task: str
    n: int
    delta: float | None
    ci: tuple[float | None, float | None]
    p: float | None
    favours: int  # +1 the difference favours method, -1 than, 0 neither
    failures: tuple[int, int]
    sd: float  # of the paired differences; NaN below 2 pairs
    diffs: np.ndarray  # the paired differences, in seed order
    excluded: int
    trivial: float | None
    at_trivial: tuple[int, int]
    finished: tuple[int, int]
    names: tuple[str, str]
    cpu_s: float = 0.0  # wall seconds of both methods' trials of this recipe, every sweep point

    @property
    def degenerate(self) -> bool:
        return all(2 * k > n for k, n in zip(self.at_trivial, self.finished, strict=True))


def findings(
    outcomes: Iterable[TrialOutcome],
    claims: Sequence[Claim],
    *,
    baseline: str | None,
    metric: str,
    tune_metric: str | None = None,
    tuning: Tuning = "per_method",
    alpha: float = 0.05,
    models: Sequence[str] = (),
    trivial: TrivialLevels | None = None,
    schedule: SeedSchedule | None = None,
) -> list[Finding]:
    """The verdict of each claim (see the module doc). `metric` is the default of claims that
    name none; `models` orders recipes of claims that list none (default: sorted); `trivial`
    gives each task's trivial predictor's values (a trial's own `trivial_name(metric)` result
    takes precedence; without either, no check is degenerate); `schedule`: the suite's
    sequential seeds, if any (sweep points are then chosen on its initial seeds)."""
    tune_metric = tune_metric or metric
    outcomes = list(outcomes)
    tuned_on = tuning_seeds(schedule)
    tuned = select_tuned(
        outcomes, tune_metric, METRICS.get(tune_metric).direction, tuning, tuned_on
    )
    levels = _levels(outcomes, trivial or {})
    pending = [
        _with_cpu(check, claim, baseline, outcomes)
        for index, claim in enumerate(claims)
        for check in _checks(index, claim, tuned, baseline, metric, alpha, models, levels)
    ]
    if schedule is not None:
        return _sequential_findings(claims, pending, baseline, metric, alpha, schedule)
    family = [
        i
        for i, c in enumerate(pending)
        if claims[c.claim].direction != "tie" and c.p is not None and not c.degenerate
    ]
    adjusted = dict(
        zip(family, map(float, holm([float(pending[i].p or 0.0) for i in family])), strict=True)
    )
    each = alpha / max(1, len(family))  # Holm's strictest level: what seeds needed must reach
    checks = [
        _decide(claims[c.claim], c, adjusted.get(i), alpha, each) for i, c in enumerate(pending)
    ]
    return _by_claim(claims, pending, checks, baseline, metric)


def _sequential_findings(
    claims: Sequence[Claim],
    pending: list[_Pending],
    baseline: str | None,
    metric: str,
    alpha: float,
    schedule: SeedSchedule,
) -> list[Finding]:
    """The findings under sequential seeds (`harness.ranking.sequential.decide`); degenerate
    checks are not tested and take no part in it."""
    tested = [i for i, c in enumerate(pending) if not c.degenerate]
    inputs = [
        CheckInput(
            "tie" if claims[pending[i].claim].direction == "tie" else "directional",
            pending[i].diffs,
            claims[pending[i].claim].margin,
            pending[i].cpu_s,
        )
        for i in tested
    ]
    decisions: dict[int, CheckDecision] = dict(
        zip(
            tested,
            decide(inputs, alpha, schedule.initial, schedule.step, schedule.max),
            strict=True,
        )
    )
    checks = [
        _decide(claims[c.claim], c, None, alpha, alpha, decisions.get(i))
        for i, c in enumerate(pending)
    ]
    return _by_claim(claims, pending, checks, baseline, metric)


def _by_claim(
    claims: Sequence[Claim],
    pending: list[_Pending],
    checks: list[RecipeCheck],
    baseline: str | None,
    metric: str,
) -> list[Finding]:
    """One finding per claim, holding the checks (per recipe) that belong to it."""
    return [
        _finding(
            index,
            claim,
            baseline,
            metric,
            [c for c, p in zip(checks, pending, strict=True) if p.claim == index],
        )
        for index, claim in enumerate(claims)
    ]


def _with_cpu(
    check: _Pending, claim: Claim, baseline: str | None, outcomes: list[TrialOutcome]
) -> _Pending:
    """The check with the wall seconds of its two methods' trials on its recipe."""
    methods = {claim.method, claim.than or baseline}
    spent = sum(
        o.wall_time_s or 0.0
        for o in outcomes
        if o.method in methods and o.model == check.model and o.task == check.task
    )
    return replace(check, cpu_s=float(spent))


def _levels(outcomes: list[TrialOutcome], trivial: TrivialLevels) -> dict[str, dict[str, float]]:
    """Task -> metric -> trivial level: the declared ones, overridden by the trials' own."""
    levels = {task: dict(by_metric) for task, by_metric in trivial.items()}
    for outcome in outcomes:
        for name, value in outcome.metrics.items():
            if name.endswith(trivial_name("")):
                levels.setdefault(outcome.task, {})[name.removesuffix(trivial_name(""))] = value
    return levels


def stays_at_trivial(values: np.ndarray, level: float, direction: Direction) -> np.ndarray:
    """Which finite values are not better than `level` by more than `TRIVIAL_MARGIN` of it."""
    slack = TRIVIAL_MARGIN * abs(level)
    return np.asarray(direction.gain(values - level) <= slack, dtype=bool)


def _checks(
    index: int,
    claim: Claim,
    tuned: list[TrialOutcome],
    baseline: str | None,
    default_metric: str,
    alpha: float,
    models: Sequence[str],
    levels: Mapping[str, Mapping[str, float]],
) -> list[_Pending]:
    than = claim.than or baseline
    if than is None:  # a suite without a baseline names `than` (validated)
        return []
    metric = claim.metric or default_metric
    direction = METRICS.get(metric).direction
    pair = [o for o in tuned if o.method in (claim.method, than)]
    ran = {(o.method, o.model, o.task) for o in pair}
    order = list(claim.recipes or models or sorted({o.model for o in pair}))
    found = []
    for model in order:
        for task in sorted({o.task for o in pair if o.model == model}):
            if (claim.method, model, task) not in ran or (than, model, task) not in ran:
                continue
            members = [o for o in pair if o.model == model and o.task == task]
            group = build_group(task, model, members, metric, None, None, True)
            level = levels.get(task, {}).get(metric)
            found.append(_pending(index, claim, group, than, direction, alpha, level))
    return found


def _pending(
    index: int,
    claim: Claim,
    group: Group,
    than: str,
    direction: Direction,
    alpha: float,
    level: float | None,
) -> _Pending:
    i, j = group.methods.index(claim.method), group.methods.index(than)
    both = ~np.isnan(group.values[i]) & ~np.isnan(group.values[j])
    diffs = np.where(both, group.values[i] - group.values[j], np.nan)[None, :]
    paired = group.present[i] & group.present[j]
    failures = (
        int((group.failed[i] & ~group.failed[j] & paired).sum()),
        int((group.failed[j] & ~group.failed[i] & paired).sum()),
    )
    n = int(both.sum())
    ci_level = 1 - 2 * alpha if claim.direction == "tie" else 1 - alpha
    low, high = (float(x[0]) for x in t_ci(diffs, ci_level)) if n >= 2 else (np.nan, np.nan)
    p = float(group.test(group.values[i], group.values[j])[0]) if n >= 2 else None
    delta = float(np.nanmean(diffs)) if n else None
    sd = float(row_stds(diffs)[0]) if n >= 2 else np.nan
    favours = direction.sign(delta)
    excluded = 0
    if group.excluded is not None:
        excluded = int((group.excluded[i] | group.excluded[j]).sum())
    finished = ~np.isnan(group.values[[i, j]])
    at = np.zeros(2, dtype=int)
    if level is not None:
        rows = group.values[[i, j]]
        at = (finished & stays_at_trivial(np.nan_to_num(rows, nan=np.inf), level, direction)).sum(
            axis=1
        )
    return _Pending(
        claim=index,
        model=group.model,
        task=group.task,
        n=n,
        delta=delta,
        ci=(finite_or_none(low), finite_or_none(high)),
        p=p,
        favours=favours,
        failures=failures,
        sd=sd,
        diffs=diffs[0][both],
        excluded=excluded,
        trivial=level,
        at_trivial=(int(at[0]), int(at[1])),
        finished=(int(finished[0].sum()), int(finished[1].sum())),
        names=(claim.method, than),
    )


def _seeds_needed(
    claim: Claim, check: _Pending, alpha: float, each: float
) -> tuple[int | None, str | None]:
    """See the module doc: for a tie at `alpha`, else at `each` (Holm's strictest level); or
    why there is no such number."""
    if check.delta is None:
        return None, None
    if claim.direction == "tie":
        room = (claim.margin or 0.0) - abs(check.delta)
        if room <= 0:
            return None, OUTSIDE_MARGIN
        needed = seeds_needed(room, check.sd, alpha)[0]
    else:
        if check.favours != {"better": 1, "worse": -1}[claim.direction]:
            return None, OTHER_WAY
        needed = seeds_needed(check.delta, check.sd, each)[0]
    return (None, None) if np.isnan(needed) else (int(needed), None)


def _holm_interval(
    check: _Pending, p: float | None, alpha: float
) -> tuple[tuple[float | None, float | None] | None, float | None]:
    """The interval matching the Holm-adjusted p (module doc), and its level."""
    if p is None or check.p is None or check.n < 2 or p <= 0 or check.p <= 0:
        return None, None
    level = 1 - alpha * check.p / p
    low, high = (float(x[0]) for x in t_ci(check.diffs[None, :], level))
    return (finite_or_none(low), finite_or_none(high)), level


def _decide(
    claim: Claim,
    check: _Pending,
    p: float | None,
    alpha: float,
    each: float,
    sequential: CheckDecision | None = None,
) -> RecipeCheck:
    verdict: Verdict = "inconclusive"
    decided_by: Literal["test", "interval", "failures", "sequential"] | None = None
    own, other = check.failures
    expected = {"better": 1, "worse": -1, "tie": 0}[claim.direction]
    low, high = check.ci
    if own != other:
        decided_by = "failures"
        favours = 1 if own < other else -1
        verdict = (
            "contradicted" if claim.direction == "tie" or favours != expected else "reproduced"
        )
    elif check.degenerate:
        verdict = NOT_TESTED
    elif sequential is not None:
        decided_by = "sequential"
        low, high = sequential.record.interval
        p = sequential.record.p_anytime
        verdict = _sequential_verdict(claim, sequential, check.favours)
    elif claim.direction == "tie" and low is not None and high is not None:
        margin = claim.margin or 0.0
        decided_by = "interval"
        if -margin <= low and high <= margin:
            verdict = "reproduced"
        elif low > margin or high < -margin:
            verdict = "contradicted"
    elif claim.direction != "tie" and p is not None:
        decided_by = "test"
        if p < alpha and check.favours != 0:
            verdict = "reproduced" if check.favours == expected else "contradicted"
    needed, note = (
        _seeds_needed(claim, check, alpha, each)
        if verdict == "inconclusive" and sequential is None
        else (None, None)
    )
    holm_ci, holm_level = (None, None) if sequential else _holm_interval(check, p, alpha)
    median = float(np.median(check.diffs)) if check.n else None
    sign_p, signs = sign_test(check.diffs)
    return RecipeCheck(
        model=check.model,
        task=check.task,
        n=check.n,
        delta=check.delta,
        ci_low=low,
        ci_high=high,
        p_value=None if verdict == NOT_TESTED else p,
        seeds_needed=needed,
        verdict=verdict,
        decided_by=decided_by,
        failed=check.failures,
        ci_level=_ci_level(claim, alpha, sequential),
        p_raw=None if verdict == NOT_TESTED else check.p,
        holm_ci=None if verdict == NOT_TESTED else holm_ci,
        holm_level=None if verdict == NOT_TESTED else holm_level,
        median_delta=median,
        sign_p=sign_p,
        signs=signs,
        excluded=check.excluded,
        trivial=check.trivial,
        at_trivial=check.at_trivial,
        finished=check.finished,
        needed_note=note,
        names=check.names,
        implicit=claim.source == IMPLICIT_SOURCE,
        sequential=sequential.record if sequential is not None else None,
    )


def _ci_level(claim: Claim, alpha: float, sequential: CheckDecision | None) -> float:
    """The interval's level: a tie's 1 - 2 alpha (Schuirmann), else 1 - alpha; under sequential
    seeds the confidence sequence's own (1 - alpha / m directional, 1 - alpha for a tie)."""
    if sequential is not None:
        return 1 - sequential.record.level
    return 1 - 2 * alpha if claim.direction == "tie" else 1 - alpha


def _sequential_verdict(claim: Claim, decision: CheckDecision, favours: int) -> Verdict:
    """reproduced / contradicted from a decided sequential check (`favours`: the side the
    difference favours, +1 method), else inconclusive."""
    if decision.outcome is None:
        return "inconclusive"
    if claim.direction == "tie":
        return "reproduced" if decision.outcome == "inside" else "contradicted"
    expected = 1 if claim.direction == "better" else -1
    return "reproduced" if favours == expected else "contradicted"


def claim_verdict(checks: Sequence[RecipeCheck]) -> tuple[ClaimVerdict, list[str]]:
    """The claim's verdict over its recipes' checks, and the recipes whose verdict differs
    from the first tested one's (see the module doc)."""
    tested = [c for c in checks if not c.degenerate]
    if not checks:
        return "no data", []
    if not tested:
        return NOT_TESTED, []
    first = tested[0].verdict
    differs = [_label(c, checks) for c in tested if c.verdict != first]
    found = {c.verdict for c in tested}
    if {"reproduced", "contradicted"} <= found:
        return "flipped", differs
    if len(found) > 1:
        return "recipe-dependent", differs
    return first, []


def _finding(
    index: int,
    claim: Claim,
    baseline: str | None,
    default_metric: str,
    checks: list[RecipeCheck],
) -> Finding:
    verdict, differs = claim_verdict(checks)
    return Finding(
        index,
        claim.method,
        claim.than or baseline or "",
        claim.metric or default_metric,
        claim.direction,
        claim.margin,
        claim.source,
        claim.note,
        checks,
        verdict,
        differs,
    )


def _label(check: RecipeCheck, checks: Sequence[RecipeCheck]) -> str:
    """The recipe's model, with the task where the claim is checked on several."""
    several = len({c.task for c in checks}) > 1
    return f"{check.model} on {check.task}" if several else check.model
