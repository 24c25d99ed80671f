"""Intervals of per-seed (or per-example) values. Rows of NaN-padded matrices are methods, columns
seeds; NaN marks a seed without a value (absent or failed).

- Intervals (`rank.ci`). `t` (default): mean +- t(0.975, n-1) s / sqrt(n), the Student-t
  interval, exact for normal data at any n >= 2. `bootstrap` (percentile) and `bca` (Efron,
  1987, "Better Bootstrap Confidence Intervals") use `scipy.stats.bootstrap` with rng 0; with
  fewer than 10 values their coverage is far below 95% (n = 3: the percentile interval is about
  [min, max], ~74%), so `rank` warns.
- Medians (steps and time to target): the distribution-free order-statistic interval of
  `scipy.stats.quantile_test`; None where n is too small for 95% (n < 6).
"""

from __future__ import annotations

import numpy as np

CONFIDENCE_LEVEL = 0.95

BOOTSTRAP_MIN_N = 10
"""Below this many values a bootstrap interval under-covers; `rank` warns."""

BOOTSTRAP_BATCH_FLOATS = 2_000_000
"""Largest number of floats one bootstrap batch resamples at once (keeps memory near 16 MB)."""


def finite_or_none(x: float | np.ndarray) -> float | None:
    """A scalar statistic as a float, or None where it is undefined (nan or infinite)."""
    return float(x) if np.isfinite(x) else None


def row_means(values: np.ndarray) -> np.ndarray:
    counts = (~np.isnan(values)).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(np.nansum(values, axis=-1) / counts, dtype=float)


def row_stds(values: np.ndarray) -> np.ndarray:
    """Sample standard deviations (ddof=1); NaN below 2 values."""
    counts = (~np.isnan(values)).sum(axis=-1)
    squares = np.nansum((values - row_means(values)[..., None]) ** 2, axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts >= 2, np.sqrt(squares / (counts - 1)), np.nan)


def mean_ci(
    values: np.ndarray, method: str = "t", n_resamples: int = 2000
) -> tuple[np.ndarray, np.ndarray]:
    """95% CIs of the mean of each row (see the module doc); NaN below 2 values, (mean, mean)
    for identical values."""
    if method == "t":
        return t_ci(values)
    return bootstrap_ci(values, n_resamples, "percentile" if method == "bootstrap" else "BCa")


def t_ci(values: np.ndarray, level: float = CONFIDENCE_LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """Student-t CIs (95% unless `level` says) of the mean of each row (vectorised over any
    leading axes); NaN below 2 values."""
    from scipy import stats

    n = (~np.isnan(values)).sum(axis=-1)
    means = row_means(values)
    sizes = np.unique(n[n >= 2])
    quantile = np.full(n.shape, np.nan)
    for size, q in zip(sizes, stats.t.ppf((1 + level) / 2, sizes - 1), strict=True):
        quantile[n == size] = q  # one ppf per sample size: the t quantile is slow to invert
    with np.errstate(invalid="ignore", divide="ignore"):
        half = quantile * row_stds(values) / np.sqrt(n)
    return means - half, means + half


def bootstrap_ci(
    values: np.ndarray, n_resamples: int, method: str = "percentile"
) -> tuple[np.ndarray, np.ndarray]:
    """Bootstrap 95% CIs of the mean of each row (`scipy.stats.bootstrap`, rng 0). Rows of equal
    length are resampled together with the same indices, so a row's CI does not depend on the
    other rows."""
    low, high = np.full(len(values), np.nan), np.full(len(values), np.nan)
    samples = [row[~np.isnan(row)] for row in values]
    by_size: dict[int, list[int]] = {}
    for i, sample in enumerate(samples):
        if sample.size >= 2 and sample.min() == sample.max():
            low[i] = high[i] = sample[0]
        elif sample.size >= 2:
            by_size.setdefault(sample.size, []).append(i)
    for rows in by_size.values():
        data = np.stack([samples[i] for i in rows])
        low[rows], high[rows] = _scipy_bootstrap(data, n_resamples, method)
    return low, high


def _scipy_bootstrap(
    data: np.ndarray, n_resamples: int, method: str
) -> tuple[np.ndarray, np.ndarray]:
    from scipy import stats

    batch = max(1, min(n_resamples, BOOTSTRAP_BATCH_FLOATS // data.size))
    result = stats.bootstrap(
        (data,),
        np.mean,
        axis=-1,
        vectorized=True,
        method=method,
        confidence_level=CONFIDENCE_LEVEL,
        n_resamples=n_resamples,
        batch=batch,
        rng=np.random.default_rng(0),
    )
    return result.confidence_interval.low, result.confidence_interval.high


def median_ci(values: np.ndarray) -> tuple[float, float, float]:
    """(median, low, high) of a 1-d sample that may hold inf (never reached); NaN where
    undefined (an empty sample, or too few values for a 95% order-statistic interval)."""
    from scipy import stats

    if values.size == 0:
        return np.nan, np.nan, np.nan
    median = float(np.median(values))
    if values.size < 2 or np.isinf(median):
        return median, np.nan, np.nan
    interval = stats.quantile_test(values, q=median, p=0.5).confidence_interval(CONFIDENCE_LEVEL)
    return median, float(interval.low), float(interval.high)
