"""What a ranking returns: rows per (task, model, method), summaries per method, the Ranking."""

from __future__ import annotations

from copy import deepcopy
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from harness.core import Direction
from harness.ranking.outcomes import Target
from harness.spec.rank import CIMethod, Tuning

if TYPE_CHECKING:
    from harness.claims import Finding

RankVerdict = Literal["better", "worse", "n.s.", "baseline"]
NOT_SIGNIFICANT: RankVerdict = "n.s."
"""A difference the test does not find significant: not a tie (a tie needs a margin, met)."""
Unit = Literal["seeds", "examples"]


@dataclass(frozen=True)
class SeedStats:
    """A method's values over its seeds (or examples) in one group; None where undefined.

    `failure` names why the method has no mean (`Status.DIVERGED`) when any of its seeds
    diverged: a diverged seed is infinitely bad, so no number stands for the method.
    `n_excluded` seeds crashed or timed out: they are left out, not counted as failures (`n`
    excludes them)."""

    mean: float | None
    std: float | None
    n: int
    n_done: int
    n_failed: int
    ci_low: float | None
    ci_high: float | None
    failure: str | None = None
    n_excluded: int = 0


@dataclass(frozen=True)
class BaselineTest:
    """A method against the group's baseline. `decided_by` says how the verdict was reached:
    "test" (a paired test, `p_value` is Holm-adjusted), "failures" (fewer failed seeds wins, no
    p-value), None; `seeds_needed` where the test is not significant."""

    delta: float | None = None
    p_value: float | None = None
    verdict: RankVerdict | None = None
    decided_by: Literal["test", "failures"] | None = None
    seeds_needed: int | None = None


@dataclass(frozen=True)
class TimeToTarget:
    """Seeds that reach the target, and the median (with its interval) over seeds of the fewest
    steps and the least train time to it; all None without a target."""

    n_reached: int | None = None
    steps_to_target: float | None = None
    steps_ci_low: float | None = None
    steps_ci_high: float | None = None
    time_to_target: float | None = None
    time_ci_low: float | None = None
    time_ci_high: float | None = None


ROW_KEYS = (
    *("task", "model", "metric", "method", "mean", "std", "n", "n_done", "n_failed", "ci_low"),
    *("ci_high", "delta", "p_value", "verdict", "win_rate", "rank", "failure", "n_excluded"),
    *("decided_by", "seeds_needed", "sweep", "unit", "trials", "n_reached", "steps_to_target"),
    *("steps_ci_low", "steps_ci_high", "time_to_target", "time_ci_low", "time_ci_high"),
    "tie_group",
)
"""The keys of a row in rank JSON, in their published order (`RankRow.to_dict`)."""


@dataclass(frozen=True)
class RankRow:
    """One method in one (task, model, metric) group: its rank and win rate, its seed
    statistics, its test against the baseline, its time to target and its tie group."""

    task: str
    model: str
    metric: str
    method: str
    rank: int
    win_rate: float | None
    seeds: SeedStats
    versus: BaselineTest = BaselineTest()
    to_target: TimeToTarget = TimeToTarget()
    tie_group: str | None = None
    """The ranks the tests allow ("1-3"; `harness.stats.ties`); `rank` is the strict one."""
    sweep: dict[str, Any] | None = None
    """The tuned sweep point (per_method tuning); None without a sweep or with per_seed."""
    unit: Unit = "seeds"
    trials: list[dict[str, Any]] = field(default_factory=list)
    """The ranked trial of each seed: seed, sweep point, key, status, value."""

    def to_dict(self) -> dict[str, Any]:
        """The row as one flat JSON-ready record (`ROW_KEYS`)."""
        parts = asdict(self.seeds) | asdict(self.versus) | asdict(self.to_target)
        own = {
            "task": self.task,
            "model": self.model,
            "metric": self.metric,
            "method": self.method,
            "rank": self.rank,
            "win_rate": self.win_rate,
            "tie_group": self.tie_group,
            "sweep": deepcopy(self.sweep),
            "unit": self.unit,
            "trials": deepcopy(self.trials),
        }
        flat = parts | own
        return {key: flat[key] for key in ROW_KEYS}


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
    aggregate: str = "mean_win_rate"
    """The overall statistic the summary is sorted by (`harness.registry.AGGREGATES`)."""
    alpha: float = 0.05
    warnings: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    """Verdicts of the suite's `expect` claims (`harness.claims`)."""

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
            "rows": [row.to_dict() for row in self.rows],
            "summary": [asdict(summary) for summary in self.summary],
            "findings": [finding.to_dict() for finding in self.findings],
        }
