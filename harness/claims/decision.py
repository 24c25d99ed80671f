"""One recipe's check decided: its verdict, interval, seeds needed and secondary statistics
from the paired differences of its two methods (the rules: `harness.claims.checks`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from harness.claims.sequential import CheckDecision
from harness.claims.verdicts import (
    IMPLICIT_SOURCE,
    NOT_TESTED,
    OTHER_WAY,
    OUTSIDE_MARGIN,
    CheckVerdict,
    RecipeCheck,
)
from harness.spec.rank import Claim
from harness.stats.intervals import finite_or_none, t_ci
from harness.stats.paired import seeds_needed, sign_test


@dataclass(frozen=True)
class PairedCheck:
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
    paper_effect: float | None = None  # the paper's effect as a difference (method - than)
    seeds: np.ndarray | None = None  # the seed of each of `diffs` (None: 0, 1, ...)
    ran: int = 0  # seeds 0 .. ran - 1 have a stored trial of both methods (finished or not)

    @property
    def degenerate(self) -> bool:
        return all(2 * k > n for k, n in zip(self.at_trivial, self.finished, strict=True))


def _seeds_needed(
    claim: Claim, check: PairedCheck, alpha: float, each: float
) -> tuple[int | None, str | None]:
    """The seeds needed (`harness.claims.checks`): for a tie at `alpha`, else at `each` (Holm's
    strictest level); or why there is no such number."""
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
    check: PairedCheck, p: float | None, alpha: float
) -> tuple[tuple[float | None, float | None] | None, float | None]:
    """The interval matching the Holm-adjusted p (`harness.claims.checks`), and its level."""
    if p is None or check.p is None or check.n < 2 or p <= 0 or check.p <= 0:
        return None, None
    level = 1 - alpha * check.p / p
    low, high = (float(x[0]) for x in t_ci(check.diffs[None, :], level))
    return (finite_or_none(low), finite_or_none(high)), level


def decide_check(
    claim: Claim,
    check: PairedCheck,
    p: float | None,
    alpha: float,
    each: float,
    sequential: CheckDecision | None = None,
) -> RecipeCheck:
    verdict: CheckVerdict = "inconclusive"
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
        p = sequential.record.p_adjusted
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
        paper_effect=check.paper_effect,
        sequential=sequential.record if sequential is not None else None,
    )


def _ci_level(claim: Claim, alpha: float, sequential: CheckDecision | None) -> float:
    """The interval's level: a tie's 1 - 2 alpha (Schuirmann), else 1 - alpha; under sequential
    seeds the rule's own: 1 - alpha / m directional; a tie's 1 - 2 alpha' under planned looks
    (each side at alpha' w_k) and 1 - alpha' under unplanned ones (the confidence sequence at
    alpha'), alpha' = alpha / the claim's recipes."""
    if sequential is not None:
        record = sequential.record
        sides = 2 if record.kind == "tie" and record.looks_plan == "planned" else 1
        return 1 - sides * record.level
    return 1 - 2 * alpha if claim.direction == "tie" else 1 - alpha


def _sequential_verdict(claim: Claim, decision: CheckDecision, favours: int) -> CheckVerdict:
    """reproduced / contradicted from a decided sequential check (`favours`: the side the
    difference favours, +1 method), else inconclusive."""
    if decision.outcome is None:
        return "inconclusive"
    if claim.direction == "tie":
        return "reproduced" if decision.outcome == "inside" else "contradicted"
    expected = 1 if claim.direction == "better" else -1
    return "reproduced" if favours == expected else "contradicted"
