"""Paired tests of per-seed values, Holm, power. Rows of NaN-padded matrices are methods,
columns seeds; NaN marks a seed without a value (absent or failed).

- Paired t-test (`paired_test`), vectorised over rows, with Holm's step-down adjustment (`holm`).
- Sign test. `sign_test`: the exact two-sided binomial test of the positive paired differences
  among the nonzero ones (Dixon and Mood, 1946), beside the t-test so one catastrophic seed
  that drives the mean is visible.
- Power. `seeds_needed`: the smallest n at which a two-sided paired t-test at level alpha
  detects the observed mean difference with the observed sd of the differences with
  probability 0.8 (noncentral t, Cohen, 1988, "Statistical Power Analysis", ch. 2).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

ROUNDING = 1e-9
"""Paired differences whose spread is below this fraction of their size count as constant."""

POWER = 0.8

MAX_SEEDS = 10_000
"""`seeds_needed` gives up (None) beyond this."""


def holm(p_values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm-Bonferroni step-down adjusted p-values, in input order (Holm, 1979); each row of the
    last axis is one family."""
    p = np.asarray(p_values, dtype=float)
    order = np.argsort(p, axis=-1, kind="stable")
    size = p.shape[-1] if p.ndim else 0
    steps = (size - np.arange(size)) * np.take_along_axis(p, order, axis=-1)
    adjusted = np.empty_like(p)
    np.put_along_axis(
        adjusted, order, np.minimum(1.0, np.maximum.accumulate(steps, axis=-1)), axis=-1
    )
    return adjusted


def paired_test(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided paired t-tests of a vs b along the last axis; NaN marks a missing seed.

    Returns (p, mean difference a - b over the pairs); p is NaN with fewer than 2 pairs, and 1.0
    or 0.0 when the differences are constant up to float rounding (all zero or not): a rerun
    that reproduces its numbers to the last bits has no spread to test against.
    """

    a, b = np.broadcast_arrays(a, b)
    paired = ~np.isnan(a) & ~np.isnan(b)
    n_pairs = paired.sum(axis=-1)
    diff = np.where(paired, a - b, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_diff = diff.sum(axis=-1) / n_pairs
    highest = np.where(paired, diff, -np.inf).max(axis=-1)
    lowest = np.where(paired, diff, np.inf).min(axis=-1)
    p = np.full(n_pairs.shape, np.nan)
    scale = np.maximum(np.maximum(np.abs(highest), np.abs(lowest)), np.finfo(float).tiny)
    constant = (n_pairs >= 2) & (highest - lowest <= ROUNDING * scale)
    p[constant] = np.where(mean_diff[constant] == 0, 1.0, 0.0)
    tested = (n_pairs >= 2) & ~constant
    p[tested] = _ttest_rel_pairs(a[tested], b[tested], paired[tested])
    return p, mean_diff


def _ttest_rel_pairs(a: np.ndarray, b: np.ndarray, paired: np.ndarray) -> np.ndarray:
    """`scipy.stats.ttest_rel` p-values of each row's pairs (rows of `a`, `b`; `paired` marks
    the pairs). Rows with as many pairs are tested in one vectorised call on those pairs alone,
    which gives scipy's `nan_policy="omit"` result without its row-by-row loop."""
    from scipy import stats

    p = np.empty(len(a))
    n_pairs = paired.sum(axis=-1)
    for size in np.unique(n_pairs):
        rows = np.flatnonzero(n_pairs == size)
        mask = paired[rows]
        pairs_a, pairs_b = (x[rows][mask].reshape(len(rows), size) for x in (a, b))
        p[rows] = stats.ttest_rel(pairs_a, pairs_b, axis=-1).pvalue
    return p


def sign_p(wins: np.ndarray | int, losses: np.ndarray | int) -> np.ndarray:
    """Exact two-sided sign-test p-values (binomial, p = 1/2) of `wins` positive among `wins`
    + `losses` nonzero differences, vectorised: min(1, 2 P(Binomial <= min(wins, losses))), 1
    when the counts differ by at most one or there are no signs."""
    from scipy import stats

    wins, losses = np.asarray(wins), np.asarray(losses)
    total = wins + losses
    p = np.minimum(1.0, 2.0 * stats.binom.cdf(np.minimum(wins, losses), total, 0.5))
    return np.asarray(np.where((total > 0) & (np.abs(wins - losses) > 1), p, 1.0), dtype=float)


def sign_test(diffs: np.ndarray) -> tuple[float | None, tuple[int, int]]:
    """(exact two-sided sign-test p, (differences above 0, below 0)) of 1-d paired
    differences (`sign_p`); p is None when every difference is 0 or there are none."""
    above, below = int((diffs > 0).sum()), int((diffs < 0).sum())
    if above + below == 0:
        return None, (above, below)
    return float(sign_p(above, below)), (above, below)


def paired_power(effect: np.ndarray, n: np.ndarray, alpha: float) -> np.ndarray:
    """Power of a two-sided paired t-test at `alpha` with n pairs for a standardized effect
    (mean / sd of the differences): the noncentral t (Cohen, 1988, ch. 2). Where scipy's
    noncentral t gives NaN (large n and noncentrality) its normal limit is used."""
    from scipy import stats

    critical = stats.t.ppf(1 - alpha / 2, n - 1)
    noncentrality = effect * np.sqrt(n)
    exact = stats.nct.sf(critical, n - 1, noncentrality) + stats.nct.cdf(
        -critical, n - 1, noncentrality
    )
    normal = stats.norm.sf(critical - noncentrality) + stats.norm.cdf(-critical - noncentrality)
    return np.asarray(np.where(np.isnan(exact), normal, exact), dtype=float)


def seeds_needed(
    mean_diff: np.ndarray | float, sd_diff: np.ndarray | float, alpha: float, power: float = POWER
) -> np.ndarray:
    """Seeds a two-sided paired t-test at `alpha` needs to detect each `mean_diff` with `power`,
    given the sd of the paired differences (vectorised). NaN where there is no effect to detect
    or more than `MAX_SEEDS` would be needed."""
    mean_diff, sd_diff = np.broadcast_arrays(np.atleast_1d(mean_diff), np.atleast_1d(sd_diff))
    with np.errstate(invalid="ignore", divide="ignore"):
        effect = np.abs(mean_diff) / sd_diff
    needed = np.full(effect.shape, np.nan)
    todo = np.flatnonzero(np.isfinite(effect) & (effect > 0) & (sd_diff > 0))
    # power grows with n: the smallest n that has enough, by bisection over every row at once
    low, high = np.full(todo.size, 2), np.full(todo.size, MAX_SEEDS)
    reachable = paired_power(effect[todo], high, alpha) >= power
    todo, low, high = todo[reachable], low[reachable], high[reachable]
    while (low < high).any():
        middle = (low + high) // 2
        enough = paired_power(effect[todo], middle, alpha) >= power
        low, high = np.where(enough, low, middle + 1), np.where(enough, middle, high)
    needed[todo] = high
    return needed
