"""Verdicts of a suite's published claims (`expect`) from its outcomes.

A claim says `method` is `better`, `worse` or a `tie` than `than` on `metric`. It is checked on
each of its recipes (the suite's models it lists; default: every model on which both methods
ran), on every task where both ran, with the trials the ranking reports (sweep points tuned on
`rank.tune_metric` the way `rank.tuning` says, `harness.ranking.outcomes.select_tuned`).

Per recipe, over the seeds both methods finished (`harness.ranking.stats`):

- the observed difference method - than, its 95% Student-t interval (of the paired differences),
  and the two-sided paired t-test; the p-values of every directional test of the suite are
  Holm-adjusted together (Holm, 1979);
- `better` / `worse`: **reproduced** when the adjusted p < alpha and the difference goes the
  expected way, **contradicted** when it is significant the other way, else **inconclusive**.
  A method with more failed seeds (diverged, timed out) than the other loses, as in the ranking
  (`decided_by = "failures"`);
- `tie` (equivalence, Schuirmann's interval-inclusion rule): **reproduced** when the interval
  lies inside +-margin, **contradicted** when it lies wholly outside, else **inconclusive**; an
  unequal count of failed seeds contradicts a tie;
- seeds needed, for inconclusive checks only (as the ranking gives them for ties only): the
  seeds at which a paired t-test has 80% power to detect the observed difference (Cohen, 1988)
  at alpha / (the directional checks Holm adjusts over), the level the first of them must pass,
  or for a tie, to exclude the nearer margin (margin - |difference|) at alpha.

With sequential seeds (`seeds: {initial, max, step}`), the interval, p-value and verdict of each
check are instead the anytime-valid ones of `harness.ranking.sequential` (`decided_by =
"sequential"`, the look record in `sequential`), valid however many looks the run took.

A claim's verdict is its recipes' common verdict, or **fragile** when they differ: `flipped_by`
names the recipes whose verdict differs from the first recipe's (the paper's, listed first).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
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
from harness.ranking.stats import finite_or_none, holm, row_stds, seeds_needed, t_ci
from harness.registry import METRICS
from harness.spec.schema import Claim, ClaimDirection, SeedSchedule, Tuning

Verdict = Literal["reproduced", "contradicted", "inconclusive"]
ClaimVerdict = Literal["reproduced", "contradicted", "inconclusive", "fragile", "no data"]


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
    p_value: float | None
    """Holm-adjusted over the suite's directional tests; None for a tie or without a test."""
    seeds_needed: int | None
    verdict: Verdict
    decided_by: Literal["test", "interval", "failures", "sequential"] | None = None
    failed: tuple[int, int] = (0, 0)
    """Seeds (of method, of than) that failed where the other finished."""
    sequential: SequentialCheck | None = None
    """With sequential seeds: n, looks, how it stopped, the interval's level, CPU seconds."""


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
    flipped_by: list[str] = field(default_factory=list)

    @property
    def claim(self) -> str:
        """The claim in words, e.g. "post-ln worse than pre-ln on val_loss"."""
        relation = f"ties (+-{self.margin:g})" if self.direction == "tie" else self.direction
        return f"{self.method} {relation} than {self.than} on {self.metric}"

    @property
    def verdict_text(self) -> str:
        """The verdict in words, with the recipes a fragile claim flips on."""
        if self.flipped_by:
            return f"{self.verdict} (flips on {', '.join(self.flipped_by)})"
        return self.verdict

    def to_dict(self) -> dict[str, Any]:
        found = asdict(self) | {"claim": self.claim}
        records = [c.sequential for c in self.checks if c.sequential is not None]
        if records:  # sequential seeds only: the fixed design's JSON is unchanged
            found["sequential"] = summary(records)
        else:
            for check in found["checks"]:
                del check["sequential"]
        return found


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
    diffs: np.ndarray  # the paired differences in seed order
    cpu_s: float  # wall seconds of both methods' trials of this recipe, every sweep point


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
    schedule: SeedSchedule | None = None,
) -> list[Finding]:
    """The verdict of each claim (see the module doc). `metric` is the default of claims that
    name none; `models` orders recipes of claims that list none (default: sorted); `schedule`:
    the suite's sequential seeds, if any."""
    tune_metric = tune_metric or metric
    outcomes = list(outcomes)
    tuned = select_tuned(outcomes, tune_metric, METRICS.get(tune_metric).direction, tuning)
    pending = [
        _with_cpu(check, claim, baseline, outcomes)
        for index, claim in enumerate(claims)
        for check in _checks(index, claim, tuned, baseline, metric, alpha, models)
    ]
    if schedule is not None:
        return _sequential_findings(claims, pending, baseline, metric, alpha, schedule)
    directional = [i for i, c in enumerate(pending) if claims[c.claim].direction != "tie"]
    tested = [i for i in directional if pending[i].p is not None]
    adjusted = dict(
        zip(tested, map(float, holm([float(pending[i].p or 0.0) for i in tested])), strict=True)
    )
    each = alpha / max(1, len(tested))  # Holm's strictest level: what seeds needed must reach
    checks = [
        _decide(claims[c.claim], c, adjusted.get(i), alpha, each) for i, c in enumerate(pending)
    ]
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


def _sequential_findings(
    claims: Sequence[Claim],
    pending: list[_Pending],
    baseline: str | None,
    metric: str,
    alpha: float,
    schedule: SeedSchedule,
) -> list[Finding]:
    """The findings under sequential seeds (`harness.ranking.sequential.decide`)."""
    inputs = [
        CheckInput(
            "tie" if claims[c.claim].direction == "tie" else "directional",
            c.diffs,
            claims[c.claim].margin,
            c.cpu_s,
        )
        for c in pending
    ]
    decisions = decide(inputs, alpha, schedule.initial, schedule.step, schedule.max)
    checks = [
        _decide(claims[c.claim], c, None, alpha, alpha, decision)
        for c, decision in zip(pending, decisions, strict=True)
    ]
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


def _checks(
    index: int,
    claim: Claim,
    tuned: list[TrialOutcome],
    baseline: str | None,
    default_metric: str,
    alpha: float,
    models: Sequence[str],
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
            found.append(_pending(index, claim, group, than, direction, alpha))
    return found


def _pending(
    index: int, claim: Claim, group: Group, than: str, direction: Direction, alpha: float
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
    low, high = (float(x[0]) for x in t_ci(diffs)) if n >= 2 else (np.nan, np.nan)
    p = float(group.test(group.values[i], group.values[j])[0]) if n >= 2 else None
    delta = float(np.nanmean(diffs)) if n else None
    sd = float(row_stds(diffs)[0]) if n >= 2 else np.nan
    favours = direction.sign(delta)
    return _Pending(
        index,
        group.model,
        group.task,
        n,
        delta,
        (finite_or_none(low), finite_or_none(high)),
        p,
        favours,
        failures,
        sd,
        diffs[0][both],
        0.0,
    )


def _seeds_needed(claim: Claim, check: _Pending, alpha: float, each: float) -> int | None:
    """See the module doc: for a tie at `alpha`, else at `each` (Holm's strictest level)."""
    if check.delta is None:
        return None
    if claim.direction == "tie":
        room = (claim.margin or 0.0) - abs(check.delta)
        needed = seeds_needed(room, check.sd, alpha)[0] if room > 0 else np.nan
    else:
        needed = seeds_needed(check.delta, check.sd, each)[0]
    return None if np.isnan(needed) else int(needed)


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
    return RecipeCheck(
        check.model,
        check.task,
        check.n,
        check.delta,
        low,
        high,
        p,
        _seeds_needed(claim, check, alpha, each)
        if verdict == "inconclusive" and sequential is None
        else None,
        verdict,
        decided_by,
        check.failures,
        sequential.record if sequential is not None else None,
    )


def _sequential_verdict(claim: Claim, decision: CheckDecision, favours: int) -> Verdict:
    """reproduced / contradicted from a decided sequential check (`favours`: the side the
    difference favours, +1 method), else inconclusive."""
    if decision.outcome is None:
        return "inconclusive"
    if claim.direction == "tie":
        return "reproduced" if decision.outcome == "inside" else "contradicted"
    expected = 1 if claim.direction == "better" else -1
    return "reproduced" if favours == expected else "contradicted"


def _finding(
    index: int,
    claim: Claim,
    baseline: str | None,
    default_metric: str,
    checks: list[RecipeCheck],
) -> Finding:
    verdict: ClaimVerdict = "no data"
    flipped: list[str] = []
    if checks:
        first = checks[0].verdict
        flipped = [_label(c, checks) for c in checks if c.verdict != first]
        verdict = "fragile" if flipped else first
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
        flipped,
    )


def _label(check: RecipeCheck, checks: list[RecipeCheck]) -> str:
    """The recipe's model, with the task where the claim is checked on several."""
    several = len({c.task for c in checks}) > 1
    return f"{check.model} on {check.task}" if several else check.model
