"""What a ranking returns: rows per (task, model, method), summaries per method, the Ranking."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from harness.core import Direction
from harness.ranking.outcomes import Target
from harness.spec.schema import Aggregate, CIMethod, Tuning

if TYPE_CHECKING:
    from harness.claims import Finding

RankVerdict = Literal["better", "worse", "n.s.", "baseline"]
NOT_SIGNIFICANT: RankVerdict = "n.s."
"""A difference the test does not find significant: not a tie (a tie needs a margin, met)."""
Unit = Literal["seeds", "examples"]


@dataclass(frozen=True)
class RankRow:
    """Statistics of one method in one (task, model, metric) group; None where undefined.

    `failure` names why a method has no mean (`Status.DIVERGED`) when any of its seeds diverged: a
    diverged seed is infinitely bad, so no number stands for the method. `n_excluded` seeds
    crashed or timed out: they are left out, not counted as failures (`n` excludes them).
    `decided_by` says how the verdict vs the baseline was reached: "test" (a paired test,
    `p_value` is Holm-adjusted), "failures" (fewer failed seeds wins, no p-value), None.
    """

    task: str
    model: str
    metric: str
    method: str
    mean: float | None
    std: float | None
    n: int
    n_done: int
    n_failed: int
    ci_low: float | None
    ci_high: float | None
    delta: float | None
    p_value: float | None
    verdict: RankVerdict | None
    win_rate: float | None
    rank: int
    failure: str | None = None
    n_excluded: int = 0
    decided_by: Literal["test", "failures"] | None = None
    seeds_needed: int | None = None
    sweep: dict[str, Any] | None = None
    """The tuned sweep point (per_method tuning); None without a sweep or with per_seed."""
    unit: Unit = "seeds"
    trials: list[dict[str, Any]] = field(default_factory=list)
    """The ranked trial of each seed: seed, sweep point, key, status, value."""
    n_reached: int | None = None
    steps_to_target: float | None = None
    steps_ci_low: float | None = None
    steps_ci_high: float | None = None
    time_to_target: float | None = None
    time_ci_low: float | None = None
    time_ci_high: float | None = None
    tie_group: str | None = None
    """The ranks the tests allow ("1-3"; `harness.stats.ties`); `rank` is the strict one."""


@dataclass(frozen=True)
class MethodSummary:
    """A method's standing over all groups."""

    method: str
    mean_win_rate: float | None
    mean_rank: float
    n_trials: int
    n_failed: int
    normalized: float | None = None
    """Mean over groups of the method's mean / the baseline's mean (None if either is missing)."""
    profile_steps: float | None = None
    profile_time: float | None = None
    tie_group: str | None = None
    """The overall ranks the tests allow (`harness.stats.ties`)."""


@dataclass(frozen=True)
class Ranking:
    """Rows grouped by (task, model) in rank order, and the summary sorted best first by
    `aggregate`; `warnings` say what a reader must know (unequal sweeps, absent baseline...)."""

    metric: str
    direction: Direction
    baseline: str | None
    rows: list[RankRow]
    summary: list[MethodSummary]
    target: Target | None = None
    ci: CIMethod = "t"
    tuning: Tuning = "per_method"
    tune_metric: str | None = None
    aggregate: Aggregate = "mean_win_rate"
    alpha: float = 0.05
    warnings: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    """Verdicts of the suite's `expect` claims (`harness.ranking.findings`)."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        target = self.target
        return {
            "metric": self.metric,
            "direction": self.direction,
            "baseline": self.baseline,
            "target": {"metric": target.metric, "value": target.value} if target else None,
            "ci": self.ci,
            "tuning": self.tuning,
            "tune_metric": self.tune_metric or self.metric,
            "aggregate": self.aggregate,
            "alpha": self.alpha,
            "warnings": self.warnings,
            "rows": [asdict(row) for row in self.rows],
            "summary": [asdict(summary) for summary in self.summary],
            "findings": [finding.to_dict() for finding in self.findings],
        }
