"""Aggregation and statistics of trial outcomes, shared by the CLI and the leaderboard.

The module only reads the outcomes it is given: no database access, no torch.

Rules (for one `metric`, whose direction comes from `METRICS`):

- Groups. Statistics are computed per (task, model) group, per method, over seeds. `rank` first
  reduces the outcomes with `select_tuned`, so each (method, model, task, seed) counts once.
- Failed seeds. A seed fails when its status is not "done" ("diverged", "failed", "timeout") or
  when a done trial has no finite value of the metric. Failed seeds are never dropped: for the mean,
  std, CI and every paired test, a failed seed takes the worst value of the metric observed in the
  group (over the done trials of all methods). If the group has no value at all, the mean, std, CI,
  delta and p-values are None. `n` counts the seeds of a method, `n_done` + `n_failed` = `n`.
- Mean and spread. `std` is the sample std (ddof=1), None for n < 2. The 95% CI of the mean is a
  percentile bootstrap (`scipy.stats.bootstrap`, rng `np.random.default_rng(0)`, so results are
  reproducible); None for n < 2, (mean, mean) when all values are identical.
- Baseline test. `delta` = mean(method) - mean(baseline). The paired test (scipy's `ttest_rel`,
  two-sided) uses the seeds present for both methods; it needs 2 pairs (else p is None); when the
  differences are constant, p = 1.0 if they are all zero else 0.0. p-values are Holm-Bonferroni
  adjusted across the group's non-baseline methods that have one, and `p_value` is the adjusted one.
  Verdict: adjusted p < alpha gives "better" or "worse" by the sign of the mean paired difference
  and the metric's direction; otherwise "tie"; the baseline gets "baseline"; None where no test
  was possible (no baseline, the baseline absent from the group, or fewer than 2 pairs).
- Win rate (HELM mean win rate). In a group, a method scores 1 against each other method it beats
  and 1/2 against each it ties, divided by the number of other methods (None if it is alone). Two
  methods are compared by an uncorrected paired t-test (same failed-seed rule): p >= alpha is a
  tie, else the sign of the mean paired difference decides; with fewer than 2 pairs, their means
  are compared (equal means tie).
- Rank. In a group, methods with no done seed rank last; then by win rate (higher first), mean
  (better first), fewer failed seeds, name. `MethodSummary.mean_win_rate` and `mean_rank` average
  over the groups a method appears in; the summary is sorted by mean win rate, then mean rank.
- Time to target (when a `Target` is given). A trial reaches the target at the first evaluation of
  its series where the target metric is at least as good as the target value, whatever its final
  status; its steps and train time (evaluation excluded) at that point are its steps and time to
  target. Per method and group: `n_reached` of its `n` seeds reach it; the mean and the bootstrap
  CI (as above) are over the seeds that reach it, None when none does (shown as "never").
- Performance profile (AlgoPerf, Dahl et al., 2023). A workload is a (task, model) group; a
  method's time on it is the median over its seeds, a seed that never reaches the target counting
  as infinite. r = time / the best method's time on the workload (infinite if the method never
  reaches it or has no trial there). The score integrates the performance profile
  rho(tau) = (1/n) #{workloads with r <= tau} over tau in [1, r_max = 4], normalized:
  B = 1/(r_max - 1) integral_1^r_max rho = 1/(3n) sum_w max(0, 4 - r_w), in [0, 1] (1: the fastest
  on every workload). It is computed for steps and for train time to target.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import numpy as np

from harness.registry import METRICS

if TYPE_CHECKING:
    from rich.table import Table

Direction = Literal["min", "max"]
Verdict = Literal["better", "worse", "tie", "baseline"]
Format = Literal["table", "json", "csv", "md", "latex"]

DONE = "done"
CONFIDENCE_LEVEL = 0.95
# Largest number of floats one bootstrap batch resamples at once (keeps memory near 16 MB).
BOOTSTRAP_BATCH_FLOATS = 2_000_000
R_MAX = 4.0
"""AlgoPerf's largest performance ratio: a method slower than 4x the best scores 0 there."""


class EvalPoint(NamedTuple):
    """A trial's metric at one evaluation."""

    step: int
    train_time_s: float
    value: float | None


@dataclass(frozen=True)
class Target:
    """A value of a metric to reach (`rank.target`)."""

    metric: str
    value: float


@dataclass(frozen=True)
class TrialOutcome:
    """The final result of one trial."""

    method: str
    model: str
    task: str
    seed: int
    status: str
    metrics: Mapping[str, float]
    sweep: Mapping[str, Any] = field(default_factory=dict)
    key: str = ""
    series: Sequence[EvalPoint] = ()
    """The target metric at each evaluation (empty when there is no target)."""


@dataclass(frozen=True)
class RankRow:
    """Statistics of one method in one (task, model, metric) group; None where undefined."""

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
    verdict: Verdict | None
    win_rate: float | None
    rank: int
    n_reached: int | None = None
    steps_to_target: float | None = None
    steps_ci_low: float | None = None
    steps_ci_high: float | None = None
    time_to_target: float | None = None
    time_ci_low: float | None = None
    time_ci_high: float | None = None


@dataclass(frozen=True)
class MethodSummary:
    """A method's standing over all groups."""

    method: str
    mean_win_rate: float | None
    mean_rank: float
    n_trials: int
    n_failed: int
    profile_steps: float | None = None
    profile_time: float | None = None


@dataclass(frozen=True)
class Ranking:
    """Rows grouped by (task, model) in rank order, and the summary sorted best first."""

    metric: str
    direction: Direction
    baseline: str | None
    rows: list[RankRow]
    summary: list[MethodSummary]
    target: Target | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "metric": self.metric,
            "direction": self.direction,
            "baseline": self.baseline,
            "target": asdict(self.target) if self.target else None,
            "rows": [asdict(row) for row in self.rows],
            "summary": [asdict(summary) for summary in self.summary],
        }


@dataclass(frozen=True)
class _Group:
    """One (task, model) group as method x seed matrices."""

    task: str
    model: str
    methods: list[str]
    values: np.ndarray  # (methods, seeds); failed seeds hold the worst value, absent ones NaN
    present: np.ndarray  # (methods, seeds) bool: the method has this seed
    failed: np.ndarray  # (methods, seeds) bool: the seed failed
    steps: np.ndarray  # (methods, seeds) steps to target: inf if never reached, NaN if absent
    times: np.ndarray  # (methods, seeds) train time to target, the same way


# --- selection -------------------------------------------------------------------------------


def metric_value(outcome: TrialOutcome, metric: str) -> float | None:
    """The finite value of `metric` of a done trial, else None (the seed counts as failed)."""
    value = outcome.metrics.get(metric) if outcome.status == DONE else None
    if value is None or not math.isfinite(value):
        return None
    return float(value)


def _better(a: float, b: float, direction: Direction) -> bool:
    return a < b if direction == "min" else a > b


def select_tuned(
    outcomes: Iterable[TrialOutcome], metric: str, direction: Direction
) -> list[TrialOutcome]:
    """Per (method, model, task, seed), the sweep point with the best value of `metric`.

    Only done trials with a finite value compete; if there is none, the first outcome is kept (a
    failed seed). Ties keep the first outcome in input order.
    """
    best: dict[tuple[str, str, str, int], tuple[TrialOutcome, float | None]] = {}
    for outcome in outcomes:
        key = (outcome.method, outcome.model, outcome.task, outcome.seed)
        value = metric_value(outcome, metric)
        kept = best.get(key)
        if kept is None or (
            value is not None and (kept[1] is None or _better(value, kept[1], direction))
        ):
            best[key] = (outcome, value)
    return [outcome for outcome, _ in best.values()]


def point_label(method: str, sweep: Mapping[str, Any]) -> str:
    """A sweep point's name: `method[field=value,...]`, the method alone without a sweep."""
    point = ",".join(f"{field}={value}" for field, value in sweep.items())
    return f"{method}[{point}]" if point else method


def each_point(outcomes: Iterable[TrialOutcome]) -> list[TrialOutcome]:
    """The outcomes with every sweep point named as a method of its own."""
    return [replace(o, method=point_label(o.method, o.sweep)) for o in outcomes]


def target_hit(outcome: TrialOutcome, value: float, direction: Direction) -> EvalPoint | None:
    """The first evaluation at which the outcome's series reaches `value`, if any."""
    for step, train_time_s, observed in outcome.series:
        finite = observed is not None and math.isfinite(observed)
        if finite and not _better(value, observed, direction):
            return EvalPoint(step, train_time_s, observed)
    return None


# --- statistics ------------------------------------------------------------------------------


def holm(p_values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm-Bonferroni step-down adjusted p-values, in input order."""
    p = np.asarray(p_values, dtype=float)
    order = np.argsort(p, kind="stable")
    steps = (p.size - np.arange(p.size)) * p[order]
    adjusted = np.empty_like(p)
    adjusted[order] = np.minimum(1.0, np.maximum.accumulate(steps))
    return adjusted


def paired_test(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided paired t-tests of a vs b along the last axis; NaN marks a missing seed.

    Returns (p, mean difference a - b over the pairs); p is NaN with fewer than 2 pairs, and 1.0
    or 0.0 when the differences are constant (all zero or not).
    """
    from scipy import stats

    a, b = np.broadcast_arrays(a, b)
    paired = ~np.isnan(a) & ~np.isnan(b)
    n_pairs = paired.sum(axis=-1)
    diff = np.where(paired, a - b, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_diff = diff.sum(axis=-1) / n_pairs
    highest = np.where(paired, diff, -np.inf).max(axis=-1)
    lowest = np.where(paired, diff, np.inf).min(axis=-1)
    p = np.full(n_pairs.shape, np.nan)
    constant = (n_pairs >= 2) & (highest == lowest)
    p[constant] = np.where(mean_diff[constant] == 0, 1.0, 0.0)
    tested = (n_pairs >= 2) & ~constant
    if tested.any():
        policy = "propagate" if paired[tested].all() else "omit"
        p[tested] = stats.ttest_rel(a[tested], b[tested], axis=-1, nan_policy=policy).pvalue
    return p, mean_diff


def bootstrap_ci(values: np.ndarray, n_resamples: int) -> tuple[np.ndarray, np.ndarray]:
    """Percentile-bootstrap 95% CIs of the mean of each row (NaN = missing seed).

    Rows with fewer than 2 values get NaN; rows of identical values get (mean, mean). Rows of
    equal length are resampled together with the same indices, so a row's CI does not depend on
    the other rows.
    """
    low, high = np.full(len(values), np.nan), np.full(len(values), np.nan)
    samples = [row[~np.isnan(row)] for row in values]
    by_size: dict[int, list[int]] = {}
    for i, sample in enumerate(samples):
        if sample.size >= 2 and sample.min() == sample.max():
            low[i] = high[i] = sample[0]
        elif sample.size >= 2:
            by_size.setdefault(sample.size, []).append(i)
    for rows in by_size.values():
        low[rows], high[rows] = _percentile_ci(np.stack([samples[i] for i in rows]), n_resamples)
    return low, high


def _percentile_ci(data: np.ndarray, n_resamples: int) -> tuple[np.ndarray, np.ndarray]:
    from scipy import stats

    batch = max(1, min(n_resamples, BOOTSTRAP_BATCH_FLOATS // data.size))
    result = stats.bootstrap(
        (data,),
        np.mean,
        axis=-1,
        vectorized=True,
        method="percentile",
        confidence_level=CONFIDENCE_LEVEL,
        n_resamples=n_resamples,
        batch=batch,
        rng=np.random.default_rng(0),
    )
    return result.confidence_interval.low, result.confidence_interval.high


def _sign(x: np.ndarray, direction: Direction) -> np.ndarray:
    """+1 where x (a difference a - b) favours a, -1 where it favours b, 0 where equal or NaN."""
    return np.nan_to_num(np.sign(-x if direction == "min" else x))


def win_rates(group: _Group, alpha: float, direction: Direction) -> np.ndarray:
    """HELM win rate of each method of the group (NaN for a method alone in its group)."""
    m = len(group.methods)
    i, j = np.triu_indices(m, k=1)
    p, mean_diff = paired_test(group.values[i], group.values[j])
    means = _row_means(group.values)
    by_mean = _sign(means[i] - means[j], direction)
    by_test = np.where(p >= alpha, 0.0, _sign(mean_diff, direction))
    score = (1.0 + np.where(np.isnan(p), by_mean, by_test)) / 2
    scores = np.zeros((m, m))
    scores[i, j], scores[j, i] = score, 1.0 - score
    with np.errstate(invalid="ignore", divide="ignore"):
        return scores.sum(axis=1) / (m - 1)


def _row_means(values: np.ndarray) -> np.ndarray:
    counts = (~np.isnan(values)).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.nansum(values, axis=1) / counts


def _row_stds(values: np.ndarray, means: np.ndarray) -> np.ndarray:
    counts = (~np.isnan(values)).sum(axis=1)
    squares = np.nansum((values - means[:, None]) ** 2, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts >= 2, np.sqrt(squares / (counts - 1)), np.nan)


def baseline_tests(
    group: _Group, baseline: str | None, alpha: float, direction: Direction
) -> tuple[np.ndarray, np.ndarray, list[Verdict | None]]:
    """Holm-adjusted p-values and verdicts of each method vs the baseline, and the deltas."""
    m = len(group.methods)
    if baseline not in group.methods:
        return np.full(m, np.nan), np.full(m, np.nan), [None] * m
    b = group.methods.index(baseline)
    means = _row_means(group.values)
    p, mean_diff = paired_test(group.values, group.values[b])
    p[b] = np.nan
    tested = ~np.isnan(p)
    p[tested] = holm(p[tested])
    signs = _sign(mean_diff, direction)
    verdicts: list[Verdict | None] = [
        _verdict(p_i, sign, alpha) for p_i, sign in zip(p.tolist(), signs.tolist(), strict=True)
    ]
    verdicts[b] = "baseline"
    return means - means[b], p, verdicts


def _verdict(p: float, sign: float, alpha: float) -> Verdict | None:
    if math.isnan(p):
        return None
    if p >= alpha:
        return "tie"
    return "better" if sign > 0 else "worse"


# --- ranking ---------------------------------------------------------------------------------


def _groups(
    outcomes: list[TrialOutcome], metric: str, direction: Direction, target: Target | None
) -> list[_Group]:
    """The outcomes as (task, model) groups, sorted, with the failed-seed rule applied.

    A group whose done trials all lack the metric is left out: its task does not report it
    (a perplexity task has no `acc`). A group where nothing finished is kept, as all failed.
    """
    by_group: dict[tuple[str, str], list[TrialOutcome]] = {}
    for outcome in outcomes:
        by_group.setdefault((outcome.task, outcome.model), []).append(outcome)
    return [
        _build_group(task, model, members, metric, direction, target)
        for (task, model), members in sorted(by_group.items())
        if _reports(members, metric)
    ]


def _reports(members: list[TrialOutcome], metric: str) -> bool:
    done = [outcome for outcome in members if outcome.status == "done"]
    return not done or any(metric in outcome.metrics for outcome in done)


def _build_group(
    task: str,
    model: str,
    outcomes: list[TrialOutcome],
    metric: str,
    direction: Direction,
    target: Target | None,
) -> _Group:
    methods = sorted({o.method for o in outcomes})
    seeds = sorted({o.seed for o in outcomes})
    row, col = {m: i for i, m in enumerate(methods)}, {s: j for j, s in enumerate(seeds)}
    raw = np.full((len(methods), len(seeds)), np.nan)
    steps, times = raw.copy(), raw.copy()
    present = np.zeros(raw.shape, dtype=bool)
    target_direction = METRICS.get(target.metric).direction if target else direction
    for outcome in outcomes:
        i, j = row[outcome.method], col[outcome.seed]
        value = metric_value(outcome, metric)
        raw[i, j] = np.nan if value is None else value
        present[i, j] = True
        hit = target_hit(outcome, target.value, target_direction) if target else None
        steps[i, j], times[i, j] = (hit.step, hit.train_time_s) if hit else (np.inf, np.inf)
    failed = present & np.isnan(raw)
    done = raw[~np.isnan(raw)]
    worst = (done.max() if direction == "min" else done.min()) if done.size else np.nan
    values = np.where(failed, worst, raw)
    return _Group(task, model, methods, values, present, failed, steps, times)


def _rank_group(
    group: _Group,
    metric: str,
    direction: Direction,
    baseline: str | None,
    alpha: float,
    n_bootstrap: int,
    target: Target | None,
) -> list[RankRow]:
    """The rows of one group, best first."""
    means = _row_means(group.values)
    stds = _row_stds(group.values, means)
    ci_low, ci_high = bootstrap_ci(group.values, n_bootstrap)
    deltas, p_values, verdicts = baseline_tests(group, baseline, alpha, direction)
    rates = win_rates(group, alpha, direction)
    n, n_failed = group.present.sum(axis=1), group.failed.sum(axis=1)
    to_target = _to_target(group, n_bootstrap) if target else None
    order = sorted(
        range(len(group.methods)),
        key=lambda i: (
            n[i] == n_failed[i],
            -np.nan_to_num(rates[i]),
            _mean_key(means[i], direction),
            n_failed[i],
            group.methods[i],
        ),
    )
    return [
        RankRow(
            task=group.task,
            model=group.model,
            metric=metric,
            method=group.methods[i],
            mean=_opt(means[i]),
            std=_opt(stds[i]),
            n=int(n[i]),
            n_done=int(n[i] - n_failed[i]),
            n_failed=int(n_failed[i]),
            ci_low=_opt(ci_low[i]),
            ci_high=_opt(ci_high[i]),
            delta=_opt(deltas[i]),
            p_value=_opt(p_values[i]),
            verdict=verdicts[i],
            win_rate=_opt(rates[i]),
            rank=position,
            **(to_target[i] if to_target else {}),
        )
        for position, i in enumerate(order, start=1)
    ]


def _to_target(group: _Group, n_bootstrap: int) -> list[dict[str, Any]]:
    """Per method: how many seeds reach the target, and the mean and CI of their steps and
    train time to it."""
    reached = np.isfinite(group.steps)
    columns: dict[str, Any] = {"n_reached": reached.sum(axis=1).tolist()}
    for name, values in (("steps", group.steps), ("time", group.times)):
        kept = np.where(reached, values, np.nan)
        low, high = bootstrap_ci(kept, n_bootstrap)
        mean_name = "steps_to_target" if name == "steps" else "time_to_target"
        columns[mean_name] = [_opt(x) for x in _row_means(kept)]
        columns[f"{name}_ci_low"] = [_opt(x) for x in low]
        columns[f"{name}_ci_high"] = [_opt(x) for x in high]
    return [dict(zip(columns, cells, strict=True)) for cells in zip(*columns.values(), strict=True)]


def _median_times(group: _Group, times: np.ndarray) -> dict[str, float]:
    """Each method's median over its seeds (a seed that never reaches the target is infinite)."""
    return {
        method: float(np.median(row[present]))
        for method, row, present in zip(group.methods, times, group.present, strict=True)
    }


def profile_scores(workloads: list[dict[str, float]], methods: Iterable[str]) -> dict[str, float]:
    """AlgoPerf benchmark score of each method: 1/(3n) sum over the n workloads of
    max(0, 4 - r), r = the method's time / the best time there (infinite when it has none)."""
    totals = dict.fromkeys(methods, 0.0)
    for times in workloads:
        best = min(times.values(), default=math.inf)
        if math.isfinite(best):
            for method, time in times.items():
                totals[method] += max(0.0, R_MAX - time / best)
    return {method: total / ((R_MAX - 1) * len(workloads)) for method, total in totals.items()}


def _mean_key(mean: float, direction: Direction) -> float:
    """Sort key putting better means first and undefined ones last."""
    if math.isnan(mean):
        return math.inf
    return mean if direction == "min" else -mean


def _opt(x: float | np.floating) -> float | None:
    """A plain float, or None for NaN."""
    return None if math.isnan(x) else float(x)


def _summarize(rows: list[RankRow], profiles: dict[str, dict[str, float]]) -> list[MethodSummary]:
    by_method: dict[str, list[RankRow]] = {}
    for row in rows:
        by_method.setdefault(row.method, []).append(row)
    summaries = []
    for method, method_rows in by_method.items():
        rates = [row.win_rate for row in method_rows if row.win_rate is not None]
        summaries.append(
            MethodSummary(
                method=method,
                mean_win_rate=sum(rates) / len(rates) if rates else None,
                mean_rank=sum(row.rank for row in method_rows) / len(method_rows),
                n_trials=sum(row.n for row in method_rows),
                n_failed=sum(row.n_failed for row in method_rows),
                profile_steps=profiles.get("steps", {}).get(method),
                profile_time=profiles.get("time", {}).get(method),
            )
        )
    return sorted(
        summaries,
        key=lambda s: (s.mean_win_rate is None, -(s.mean_win_rate or 0.0), s.mean_rank, s.method),
    )


def rank(
    outcomes: Iterable[TrialOutcome],
    metric: str,
    baseline: str | None,
    alpha: float = 0.05,
    n_bootstrap: int = 2000,
    target: Target | None = None,
) -> Ranking:
    """Rank the methods on `metric` per (task, model) group and overall (see the module doc),
    with steps and time to `target` and the performance profiles when one is given.

    Raises `UnknownNameError` for an unknown metric and `ValueError` for a baseline that has no
    outcome.
    """
    direction = METRICS.get(metric).direction
    tuned = select_tuned(outcomes, metric, direction)
    if baseline is not None and all(o.method != baseline for o in tuned):
        known = ", ".join(sorted({o.method for o in tuned}))
        raise ValueError(f"baseline '{baseline}' has no outcomes (methods: {known})")
    groups = _groups(tuned, metric, direction, target)
    rows = [
        row
        for group in groups
        for row in _rank_group(group, metric, direction, baseline, alpha, n_bootstrap, target)
    ]
    methods = sorted({o.method for o in tuned})
    profiles = (
        {
            "steps": profile_scores([_median_times(g, g.steps) for g in groups], methods),
            "time": profile_scores([_median_times(g, g.times) for g in groups], methods),
        }
        if target
        else {}
    )
    return Ranking(metric, direction, baseline, rows, _summarize(rows, profiles), target)


# --- formats ---------------------------------------------------------------------------------

COLUMNS = [
    "rank",
    "method",
    "mean ± 95% CI",
    "Δ vs baseline",
    "p (Holm)",
    "verdict",
    "win rate",
    "failed",
]
TARGET_COLUMNS = ["steps to target ± 95% CI", "time to target (s) ± 95% CI", "reached"]
MISSING = "n/a"
NEVER = "never"
SUMMARY_COLUMNS = ["rank", "method", "mean win rate", "mean rank", "trials", "failed"]
PROFILE_COLUMNS = ["profile score (steps)", "profile score (time)"]


def _columns(ranking: Ranking) -> list[str]:
    return COLUMNS + (TARGET_COLUMNS if ranking.target else [])


def _summary_columns(ranking: Ranking) -> list[str]:
    return SUMMARY_COLUMNS + (PROFILE_COLUMNS if ranking.target else [])


def _num(x: float | None, spec: str = ".4g") -> str:
    return MISSING if x is None else format(x, spec)


def _with_ci(mean: float | None, low: float | None, high: float | None) -> str:
    if low is None or high is None:
        return _num(mean)
    return f"{_num(mean)} ± {(high - low) / 2:.2g}"


def _target_cells(row: RankRow) -> list[str]:
    reached = f"{row.n_reached}/{row.n}"
    if not row.n_reached:
        return [NEVER, NEVER, reached]
    return [
        _with_ci(row.steps_to_target, row.steps_ci_low, row.steps_ci_high),
        _with_ci(row.time_to_target, row.time_ci_low, row.time_ci_high),
        reached,
    ]


def _cells(row: RankRow, ranking: Ranking) -> list[str]:
    """A row's cells, in the order of `_columns(ranking)`."""
    cells = [
        str(row.rank),
        row.method,
        _with_ci(row.mean, row.ci_low, row.ci_high),
        _num(row.delta, "+.3g"),
        _num(row.p_value, ".3g"),
        row.verdict or MISSING,
        _num(row.win_rate, ".3f"),
        f"{row.n_failed}/{row.n}",
    ]
    return cells + (_target_cells(row) if ranking.target else [])


def _summary_cells(position: int, summary: MethodSummary, ranking: Ranking) -> list[str]:
    """A summary's cells, in the order of `_summary_columns(ranking)`."""
    cells = [
        str(position),
        summary.method,
        _num(summary.mean_win_rate, ".3f"),
        f"{summary.mean_rank:.2f}",
        str(summary.n_trials),
        str(summary.n_failed),
    ]
    profiles = [_num(summary.profile_steps, ".3f"), _num(summary.profile_time, ".3f")]
    return cells + (profiles if ranking.target else [])


def _summary_rows(ranking: Ranking) -> list[list[str]]:
    return [_summary_cells(i, s, ranking) for i, s in enumerate(ranking.summary, start=1)]


def _by_group(ranking: Ranking) -> dict[tuple[str, str], list[RankRow]]:
    groups: dict[tuple[str, str], list[RankRow]] = {}
    for row in ranking.rows:
        groups.setdefault((row.task, row.model), []).append(row)
    return groups


def _title(ranking: Ranking) -> str:
    better = "lower" if ranking.direction == "min" else "higher"
    target = ranking.target
    goal = f"; target: {target.metric} = {target.value:g}" if target else ""
    return f"{ranking.metric} ({better} is better; baseline: {ranking.baseline or 'none'}{goal})"


def _to_json(ranking: Ranking) -> str:
    return json.dumps(ranking.to_dict(), indent=2)


def _to_csv(ranking: Ranking) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, [f.name for f in fields(RankRow)], lineterminator="\n")
    writer.writeheader()
    writer.writerows(asdict(row) for row in ranking.rows)
    return out.getvalue()


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

    return "\n".join([line(header), line(["---"] * len(header)), *map(line, rows)])


def _to_markdown(ranking: Ranking) -> str:
    parts = [f"## {_title(ranking)}"]
    for (task, model), rows in _by_group(ranking).items():
        cells = [_cells(row, ranking) for row in rows]
        parts += [f"### {task} / {model}", _md_table(_columns(ranking), cells)]
    parts += ["### Overall", _md_table(_summary_columns(ranking), _summary_rows(ranking))]
    return "\n\n".join(parts) + "\n"


LATEX_SPECIAL = {c: "\\" + c for c in "&%$#_{}"} | {
    "\\": r"\textbackslash{}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "±": r"$\pm$",
    "Δ": r"$\Delta$",
}


def _tex(text: str) -> str:
    return "".join(LATEX_SPECIAL.get(c, c) for c in text)


def _latex_tabular(header: list[str], sections: list[list[list[str]]]) -> str:
    def line(cells: list[str]) -> str:
        return " & ".join(map(_tex, cells)) + r" \\"

    body = "\n\\midrule\n".join("\n".join(map(line, rows)) for rows in sections)
    return "\n".join(
        [
            rf"\begin{{tabular}}{{{'l' * len(header)}}}",
            r"\toprule",
            line(header),
            r"\midrule",
            body,
            r"\bottomrule",
            r"\end{tabular}",
        ]
    )


def _to_latex(ranking: Ranking) -> str:
    sections = [
        [[task, model, *_cells(row, ranking)] for row in rows]
        for (task, model), rows in _by_group(ranking).items()
    ]
    return (
        f"% {_tex(_title(ranking))}\n"
        + _latex_tabular(["task", "model", *_columns(ranking)], sections)
        + "\n\n"
        + _latex_tabular(_summary_columns(ranking), [_summary_rows(ranking)])
        + "\n"
    )


VERDICT_STYLES = {"better": "green", "worse": "red"}


def rich_table(ranking: Ranking) -> Table:
    """The per-group rows as a rich Table, one section per (task, model)."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=_title(ranking))
    for column in ["task", "model", *_columns(ranking)]:
        table.add_column(column)
    for rows in _by_group(ranking).values():
        for row in rows:
            style = VERDICT_STYLES.get(row.verdict or "")
            cells = [row.task, row.model, *_cells(row, ranking)]
            table.add_row(*map(escape, cells), style=style)
        table.add_section()
    return table


def rich_summary_table(ranking: Ranking) -> Table:
    """The overall summary as a rich Table."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="Overall")
    for column in _summary_columns(ranking):
        table.add_column(column)
    for cells in _summary_rows(ranking):
        table.add_row(*map(escape, cells))
    return table


def _to_text(ranking: Ranking) -> str:
    from rich.console import Console

    out = io.StringIO()
    console = Console(file=out, width=160, color_system=None)
    console.print(rich_table(ranking))
    console.print(rich_summary_table(ranking))
    return out.getvalue()


FORMATTERS: dict[str, Callable[[Ranking], str]] = {
    "table": _to_text,
    "json": _to_json,
    "csv": _to_csv,
    "md": _to_markdown,
    "latex": _to_latex,
}


def format_ranking(ranking: Ranking, fmt: Format) -> str:
    """The ranking as text: a rendered rich table, JSON, CSV, markdown or a LaTeX tabular."""
    if fmt not in FORMATTERS:
        raise ValueError(f"unknown format '{fmt}' (known: {', '.join(FORMATTERS)})")
    return FORMATTERS[fmt](ranking)
