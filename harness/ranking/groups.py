"""One (task, model) group: its method x seed matrices, comparisons, and rows.

A diverged seed (or one done without a finite value) is infinitely bad: it loses to any finite
value. Comparing two methods over their common seeds: if one has more seeds that diverged where
the other's finished, it loses, whatever the finished seeds say (`decided_by = "failures"`);
otherwise the paired test runs on the seeds both finished. A method with a diverged seed has no
mean, std or CI (shown as diverged). A crashed or timed-out seed (an infrastructure failure,
`Status.loses` is false) is never a loss: it is left out like an absent seed, and the row counts
it (`n_excluded`).

With `unit = "examples"` (one seed per method, per-example outcomes given), the columns are
examples instead of seeds and the intervals and tests are those of `harness.stats.examples`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from operator import itemgetter
from typing import Any

import numpy as np

from harness.core import Direction, SeedKey, Status, TrialOutcome
from harness.core.status import FAILURE_ORDER
from harness.ranking.records import (
    NOT_SIGNIFICANT,
    BaselineTest,
    RankRow,
    RankVerdict,
    SeedStats,
    TimeToTarget,
    Unit,
)
from harness.spec.rank import CIMethod
from harness.stats.examples import (
    ExampleOutcomes,
    example_ci,
    example_matrix,
    example_test,
    is_binary,
    weight_name,
    weighted_means,
)
from harness.stats.intervals import mean_ci, median_ci, row_means, row_stds
from harness.stats.outcomes import (
    counts_in_comparisons,
    failure_label,
    metric_value,
    seed_matrix,
)
from harness.stats.paired import holm, paired_test, seeds_needed

Hits = Mapping[SeedKey, tuple[float, float]]
Test = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class Group:
    """One (task, model) group as method x column matrices (columns: seeds or examples)."""

    task: str
    model: str
    methods: list[str]
    values: np.ndarray  # finite values; NaN where absent or failed
    present: np.ndarray  # bool: the method has this column
    failed: np.ndarray  # bool: the column failed
    failures: list[str | None]  # per method: why some of its seeds have no value
    sweeps: list[dict[str, Any] | None]
    trials: list[list[dict[str, Any]]]  # per method: seed, sweep point, key, status of each
    steps: np.ndarray | None  # (methods, seeds) fewest steps to target, inf never, NaN absent
    times: np.ndarray | None
    unit: Unit = "seeds"
    binary: bool = False
    weights: np.ndarray | None = None  # per-example weights of a ratio metric (examples only)
    excluded: np.ndarray | None = None  # bool: the column crashed or timed out (not present)

    def excluded_counts(self) -> np.ndarray:
        """Per method: columns left out as infrastructure failures."""
        if self.excluded is None:
            return np.zeros(len(self.methods), dtype=int)
        return np.asarray(self.excluded.sum(axis=1), dtype=int)

    def test(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.unit == "examples":
            return example_test(a, b, self.binary)
        return paired_test(a, b)

    @cached_property
    def pair_tests(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(i, j, p, mean difference i - j) of the test of every pair of methods i < j, run once
        per group: the win rates and the tie groups read the same tests (read-only arrays)."""
        i, j = np.triu_indices(len(self.methods), k=1)
        p, mean_diff = self.test(self.values[i], self.values[j])
        for found in (i, j, p, mean_diff):
            found.setflags(write=False)
        return i, j, p, mean_diff


def build_group(
    task: str,
    model: str,
    outcomes: list[TrialOutcome],
    metric: str,
    hits: Hits | None,
    examples: ExampleOutcomes | None,
    per_method_points: bool,
) -> Group:
    matrix = seed_matrix(outcomes, metric)
    methods, at = matrix.methods, matrix.at
    labels: list[set[Status]] = [set() for _ in methods]
    sweeps: list[dict[str, Any] | None] = [None] * len(methods)
    trials: list[list[dict[str, Any]]] = [[] for _ in methods]
    for outcome, i in zip(outcomes, at[0], strict=True):
        value = metric_value(outcome, metric)
        if value is None and counts_in_comparisons(outcome, value):
            labels[i].add(failure_label(outcome))
        trials[i].append(
            {
                "seed": outcome.seed,
                "sweep": dict(outcome.sweep),
                "key": outcome.key,
                "status": outcome.status,
                "value": value,
            }
        )
        if per_method_points and outcome.sweep:
            sweeps[i] = dict(outcome.sweep)
    steps = times = None
    if hits is not None:
        steps, times = np.full(matrix.values.shape, np.nan), np.full(matrix.values.shape, np.nan)
        reached = [hits[SeedKey(o.method, model, task, o.seed)] for o in outcomes]
        steps[at], times[at] = np.array(reached, dtype=float).reshape(-1, 2).T
    group = Group(
        task=task,
        model=model,
        methods=methods,
        values=matrix.values,
        present=matrix.present,
        failed=matrix.failed,
        failures=[_failure_name(found) for found in labels],
        sweeps=sweeps,
        trials=trials,
        steps=steps,
        times=times,
        excluded=matrix.excluded,
    )
    if examples is not None and len(matrix.seeds) == 1:
        row = {method: i for i, method in enumerate(methods)}
        return _by_example(group, outcomes, metric, examples, row) or group
    return group


def _failure_name(labels: set[Status]) -> str | None:
    return next((str(status) for status in FAILURE_ORDER if status in labels), None)


def _by_example(
    group: Group,
    outcomes: list[TrialOutcome],
    metric: str,
    examples: ExampleOutcomes,
    row: dict[str, int],
) -> Group | None:
    """The group with examples as columns, if every finished trial has example outcomes."""
    keys: list[str | None] = [None] * len(group.methods)
    for outcome in outcomes:
        keys[row[outcome.method]] = (
            outcome.key if metric_value(outcome, metric) is not None else None
        )
    matrix = example_matrix(keys, examples, metric)
    if matrix is None:
        return None
    weights = example_matrix(keys, examples, weight_name(metric))
    if weights is not None and weights.shape != matrix.shape:
        weights = None
    failed_rows = np.array([key is None for key in keys])[:, None] & np.ones_like(matrix, bool)
    present = np.ones_like(matrix, dtype=bool)
    return replace(
        group,
        values=matrix,
        present=present,
        failed=failed_rows,
        unit="examples",
        binary=is_binary(matrix),
        weights=weights,
    )


def _sign(x: np.ndarray, direction: Direction) -> np.ndarray:
    """+1 where x (a difference a - b) favours a, -1 where it favours b, 0 where equal or NaN."""
    return np.asarray(np.nan_to_num(np.sign(direction.gain(x))), dtype=float)


def group_means(group: Group) -> np.ndarray:
    """Each method's mean over its columns (weighted for a ratio metric over examples)."""
    if group.weights is not None:
        return weighted_means(group.values, group.weights)
    return row_means(group.values)


def effective_means(group: Group) -> np.ndarray:
    """Means for comparisons: a method with a failed column is infinitely bad."""
    return np.where(group.failed.any(axis=1), np.nan, group_means(group))


def compare(
    group: Group, i: np.ndarray, j: np.ndarray, direction: Direction
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Methods i vs j (index arrays): (failure sign, decided by failures, p, paired mean diff).

    The failure sign is +1 where i has fewer failed columns that j finished, -1 where more."""
    return _compared(group, i, j, group.test(group.values[i], group.values[j]), direction)


def compare_pairs(
    group: Group, direction: Direction
) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """(i, j, `compare` of i vs j) for every pair of methods i < j (`Group.pair_tests`)."""
    i, j, p, mean_diff = group.pair_tests
    return i, j, _compared(group, i, j, (p, mean_diff), direction)


def _compared(
    group: Group,
    i: np.ndarray,
    j: np.ndarray,
    tests: tuple[np.ndarray, np.ndarray],
    direction: Direction,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    paired = group.present[i] & group.present[j]
    only_i = (group.failed[i] & ~group.failed[j] & paired).sum(axis=-1)
    only_j = (group.failed[j] & ~group.failed[i] & paired).sum(axis=-1)
    p, mean_diff = tests
    return np.sign(only_j - only_i).astype(float), only_i != only_j, p, _sign(mean_diff, direction)


def win_rates(group: Group, alpha: float, direction: Direction) -> np.ndarray:
    """HELM mean win rate of each method of the group (NaN for a method alone in its group):
    1 per method it beats, 1/2 per undecided pair (a test with p >= alpha), over the others."""
    m = len(group.methods)
    i, j, (by_failure, decisive, p, by_diff) = compare_pairs(group, direction)
    means = effective_means(group)
    by_mean = _sign(means[i] - means[j], direction)
    by_test = np.where(np.isnan(p), by_mean, np.where(p >= alpha, 0.0, by_diff))
    score = (1.0 + np.where(decisive, by_failure, by_test)) / 2
    scores = np.zeros((m, m))
    scores[i, j], scores[j, i] = score, 1.0 - score
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(scores.sum(axis=1) / (m - 1), dtype=float)


@dataclass(frozen=True)
class BaselineTests:
    p: np.ndarray
    verdicts: list[RankVerdict | None]
    decided_by: list[str | None]
    needed: list[int | None]


def baseline_tests(
    group: Group, baseline: str | None, alpha: float, direction: Direction
) -> BaselineTests:
    """Each method vs the baseline: Holm-adjusted p-values, verdicts ("n.s." where the test is
    not significant: no margin is given, so no difference is not evidence of a tie), and the
    seeds needed where it is not significant.

    Seeds needed are for a paired t-test at alpha / (the comparisons Holm adjusts over): the
    level the first of them must pass, so that many seeds suffice wherever it falls in Holm's
    order (at the bare alpha, a group of 16 methods would name a number of seeds that is
    already there and still not significant)."""
    m = len(group.methods)
    if baseline not in group.methods:
        return BaselineTests(np.full(m, np.nan), [None] * m, [None] * m, [None] * m)
    b = group.methods.index(baseline)
    others = np.arange(m)
    by_failure, decisive, p, by_diff = compare(group, others, np.full(m, b), direction)
    p[b] = np.nan
    p[decisive] = np.nan
    tested = ~np.isnan(p)
    p[tested] = holm(p[tested])
    verdicts: list[RankVerdict | None] = []
    decided: list[str | None] = []
    for k in range(m):
        verdict, how = _verdict(k == b, decisive[k], by_failure[k], p[k], by_diff[k], alpha)
        verdicts.append(verdict)
        decided.append(how)
    ties = np.array([v == NOT_SIGNIFICANT for v in verdicts]) & (group.unit == "seeds")
    diffs = group.values - group.values[b]
    counts = (~np.isnan(diffs)).sum(axis=1)
    each = alpha / max(1, int(tested.sum()))
    sizes = seeds_needed(
        row_means(diffs), np.where(ties & (counts >= 2), row_stds(diffs), np.nan), each
    )
    needed = [int(x) if np.isfinite(x) else None for x in sizes]
    return BaselineTests(p, verdicts, decided, needed)


def _verdict(
    is_baseline: bool, decisive: bool, by_failure: float, p: float, sign: float, alpha: float
) -> tuple[RankVerdict | None, str | None]:
    if is_baseline:
        return "baseline", None
    if decisive:
        return ("better" if by_failure > 0 else "worse"), "failures"
    if math.isnan(p):
        return None, None
    if p >= alpha:
        return NOT_SIGNIFICANT, "test"
    return ("better" if sign > 0 else "worse"), "test"


@dataclass(frozen=True)
class GroupRules:
    """How a group's rows are computed: the metric and its direction, the baseline, the level
    of the tests, the interval method and its bootstrap resamples."""

    metric: str
    direction: Direction
    baseline: str | None
    alpha: float
    ci: CIMethod
    n_bootstrap: int


def group_rows(group: Group, rules: GroupRules) -> list[RankRow]:
    """The rows of one group, best first."""
    metric, direction, baseline = rules.metric, rules.direction, rules.baseline
    alpha, ci, n_bootstrap = rules.alpha, rules.ci, rules.n_bootstrap
    any_failed = group.failed.any(axis=1)
    means = np.where(any_failed, np.nan, group_means(group))
    stds = np.where(any_failed, np.nan, row_stds(group.values))
    if group.unit == "examples":
        low, high = example_ci(group.values, group.weights, n_bootstrap)
    else:
        low, high = mean_ci(group.values, ci, n_bootstrap)
    low, high = np.where(any_failed, np.nan, low), np.where(any_failed, np.nan, high)
    tests = baseline_tests(group, baseline, alpha, direction)
    base = group.methods.index(baseline) if baseline in group.methods else None
    deltas = means - means[base] if base is not None else np.full(len(means), np.nan)
    rates = win_rates(group, alpha, direction)
    if group.unit == "examples":  # one trial per method
        n, n_failed = group.present.any(axis=1).astype(int), group.failed.any(axis=1).astype(int)
    else:
        n, n_failed = group.present.sum(axis=1), group.failed.sum(axis=1)
    excluded = group.excluded_counts()
    to_target = _to_target(group)
    order = sorted(
        range(len(group.methods)),
        key=lambda i: (
            n[i] == n_failed[i],
            -np.nan_to_num(rates[i]),
            n_failed[i] / max(n[i], 1),
            direction.sort_key(float(row_means(group.values[i : i + 1])[0])),
            group.methods[i],
        ),
    )
    return [
        RankRow(
            task=group.task,
            model=group.model,
            metric=metric,
            method=group.methods[i],
            rank=position,
            win_rate=_opt(rates[i]),
            seeds=SeedStats(
                mean=_opt(means[i]),
                std=_opt(stds[i]),
                n=int(n[i]),
                n_done=int(n[i] - n_failed[i]),
                n_failed=int(n_failed[i]),
                ci_low=_opt(low[i]),
                ci_high=_opt(high[i]),
                failure=group.failures[i],
                n_excluded=int(excluded[i]),
            ),
            versus=BaselineTest(
                delta=_opt(deltas[i]),
                p_value=_opt(tests.p[i]),
                verdict=tests.verdicts[i],
                decided_by=tests.decided_by[i],  # type: ignore[arg-type]
                seeds_needed=tests.needed[i],
            ),
            to_target=to_target[i] if to_target else TimeToTarget(),
            sweep=group.sweeps[i],
            trials=sorted(group.trials[i], key=itemgetter("seed")),
            unit=group.unit,
        )
        for position, i in enumerate(order, start=1)
    ]


def _to_target(group: Group) -> list[TimeToTarget] | None:
    """Per method: seeds that reach the target, and the median and CI over seeds of the fewest
    steps and least train time to it (a seed that never reaches it is infinite)."""
    if group.steps is None or group.times is None:
        return None
    result = []
    for i in range(len(group.methods)):
        present = group.present[i] if group.unit == "seeds" else ~np.isnan(group.steps[i])
        steps, times = group.steps[i][present], group.times[i][present]
        (steps_median, steps_low, steps_high), (time_median, time_low, time_high) = (
            median_ci(values) for values in (steps, times)
        )
        result.append(
            TimeToTarget(
                n_reached=int(np.isfinite(steps).sum()),
                steps_to_target=_opt(steps_median),
                steps_ci_low=_opt(steps_low),
                steps_ci_high=_opt(steps_high),
                time_to_target=_opt(time_median),
                time_ci_low=_opt(time_low),
                time_ci_high=_opt(time_high),
            )
        )
    return result


def median_times(group: Group, times: np.ndarray) -> dict[str, float]:
    """Each method's median over its seeds (a seed that never reaches the target is infinite)."""
    return {
        method: float(np.median(row[~np.isnan(row)])) if (~np.isnan(row)).any() else math.inf
        for method, row in zip(group.methods, times, strict=True)
    }


def _opt(x: float | np.floating) -> float | None:
    """A plain float, or None for NaN or an infinity."""
    return None if not math.isfinite(x) else float(x)
