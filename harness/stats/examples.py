"""Example-level statistics for evaluation-only trials (pretrained, pruned or quantized models
evaluated once): their uncertainty lives in the examples, not in seeds.

- Accuracy-like metrics (every example value 0 or 1): the Wilson score interval of the mean
  (Wilson, 1927; `scipy.stats.binomtest(...).proportion_ci(method="wilson")`), and the exact
  McNemar test of a method vs another paired by example: a two-sided binomial test with p = 1/2
  on the discordant pairs (McNemar, 1947; Dietterich, 1998, "Approximate Statistical Tests for
  Comparing Supervised Classification Learning Algorithms").
- Other metrics (bits per byte per window): the percentile bootstrap over windows, and the
  paired t-test over windows.

- Ratio metrics stored with per-example weights (bits per byte: the bytes of each window, under
  `weight_name(metric)`) are weighted means, sum(w x) / sum(w), as the trial's own value is; their
  interval is the paired (x, w) percentile bootstrap of that ratio. The paired t-test runs on the
  unweighted per-window differences.

`ExampleOutcomes` is what `harness.store.queries.example_outcomes` returns: trial key -> metric
-> example id -> value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from harness.stats.intervals import CONFIDENCE_LEVEL, bootstrap_ci
from harness.stats.paired import paired_test

ExampleOutcomes = Mapping[str, Mapping[str, Mapping[str, float]]]


def weight_name(metric: str) -> str:
    """Where the per-example weights of a ratio metric are stored (as `harness.tasks.base` of
    the evaluation-only work names them)."""
    return f"{metric}:weight"


def example_matrix(
    keys: Sequence[str | None], examples: ExampleOutcomes, metric: str
) -> np.ndarray | None:
    """(methods, examples) values of `metric` for the trials `keys` (None: a failed trial, all
    NaN), over the union of their example ids in sorted order; None when a finished trial has
    no example outcomes for the metric."""
    per_key = [examples.get(key, {}).get(metric) if key else {} for key in keys]
    if any(found is None for found in per_key):
        return None
    ids = sorted({example for found in per_key for example in found or {}})
    if not ids:
        return None
    return np.array([[(found or {}).get(i, np.nan) for i in ids] for found in per_key], float)


def is_binary(values: np.ndarray) -> bool:
    finite = values[~np.isnan(values)]
    return finite.size > 0 and bool(np.isin(finite, (0.0, 1.0)).all())


def wilson_ci(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score 95% intervals of the proportion of ones in each row (NaN = missing)."""
    from scipy import stats

    low, high = np.full(len(values), np.nan), np.full(len(values), np.nan)
    for i, row in enumerate(values):
        row = row[~np.isnan(row)]
        if row.size:
            interval = stats.binomtest(int(row.sum()), row.size).proportion_ci(
                CONFIDENCE_LEVEL, method="wilson"
            )
            low[i], high[i] = interval.low, interval.high
    return low, high


def mcnemar_test(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact McNemar tests of a vs b (0/1 values) along the last axis, paired by example (NaN:
    missing). Returns (p, mean difference a - b over the pairs); p is 1.0 without discordant
    pairs and NaN without pairs."""
    from scipy import stats

    a, b = np.broadcast_arrays(np.atleast_2d(a), np.atleast_2d(b))
    p, mean_diff = np.full(len(a), np.nan), np.full(len(a), np.nan)
    for i, (row_a, row_b) in enumerate(zip(a, b, strict=True)):
        paired = ~np.isnan(row_a) & ~np.isnan(row_b)
        if not paired.any():
            continue
        only_a = int(((row_a == 1) & (row_b == 0) & paired).sum())
        only_b = int(((row_a == 0) & (row_b == 1) & paired).sum())
        discordant = only_a + only_b
        p[i] = stats.binomtest(only_a, discordant, 0.5).pvalue if discordant else 1.0
        mean_diff[i] = (only_a - only_b) / paired.sum()
    return p, mean_diff


def weighted_means(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """sum(w x) / sum(w) of each row over its non-missing examples."""
    kept = ~np.isnan(values) & ~np.isnan(weights)
    with np.errstate(invalid="ignore", divide="ignore"):
        total = np.where(kept, values * weights, 0).sum(-1)
        return np.asarray(total / np.where(kept, weights, 0).sum(-1), dtype=float)


def weighted_bootstrap_ci(
    values: np.ndarray, weights: np.ndarray, n_resamples: int
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile-bootstrap 95% intervals of each row's weighted mean, resampling (x, w) pairs."""
    from scipy import stats

    low, high = np.full(len(values), np.nan), np.full(len(values), np.nan)
    for i, (x, w) in enumerate(zip(values, weights, strict=True)):
        kept = ~np.isnan(x) & ~np.isnan(w)
        if kept.sum() < 2:
            continue
        result = stats.bootstrap(
            (x[kept], w[kept]),
            lambda x, w, axis: np.sum(x * w, axis=axis) / np.sum(w, axis=axis),
            paired=True,
            vectorized=True,
            method="percentile",
            confidence_level=CONFIDENCE_LEVEL,
            n_resamples=n_resamples,
            rng=np.random.default_rng(0),
        )
        low[i], high[i] = result.confidence_interval.low, result.confidence_interval.high
    return low, high


def example_ci(
    values: np.ndarray, weights: np.ndarray | None, n_resamples: int
) -> tuple[np.ndarray, np.ndarray]:
    """Wilson intervals for 0/1 outcomes, else percentile-bootstrap intervals over examples (of
    the weighted mean when there are weights)."""
    if is_binary(values):
        return wilson_ci(values)
    if weights is not None:
        return weighted_bootstrap_ci(values, weights, n_resamples)
    return bootstrap_ci(values, n_resamples, "percentile")


def example_test(a: np.ndarray, b: np.ndarray, binary: bool) -> tuple[np.ndarray, np.ndarray]:
    """McNemar for 0/1 outcomes, else the paired t-test over examples (windows)."""
    return mcnemar_test(a, b) if binary else paired_test(a, b)
