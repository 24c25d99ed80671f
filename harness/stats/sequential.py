"""Sequential boundaries: anytime-valid confidence sequences of a mean paired difference over
looks at a growing number of seeds, and the conditional power of the seeds still to come
(`seeds: {initial, max, step}`, docs/sequential.md). The verdicts they lead to are
`harness.claims.sequential`'s.


The statistic is the scale-invariant mixture likelihood ratio of the t-test (Lai, 1976, "On
confidence sequences", Ann. Statist. 4(2); restated as the closed-form t confidence sequence by
Wang & Ramdas, 2023, "Anytime-valid t-tests and confidence sequences for Gaussian means with
unknown variance", arXiv:2310.03722). For n paired differences x_i with mean x̄ and sd s, and a
hypothesised mean m (d = x̄ - m, S = n d, V = sum (x_i - m)^2 = (n - 1) s^2 + n d^2), mixing the
standardized effect over N(0, 1/c) and the scale over its right Haar measure gives

    M_n(m) = sqrt(c / (n + c)) * (1 - S^2 / ((n + c) V)) ** (-n / 2),

a nonnegative martingale with M_1 = 1 under mean m (with respect to the scale-invariant
filtration; Pérez-Ortiz, Lardy, de Heide & Grünwald, 2024, "E-statistics, group invariance and
anytime-valid testing", Ann. Statist.). An average of such martingales over several c
(`MIXTURE_CS`) is one too. By Ville's inequality P(exists n: M_n(m) >= 1/alpha) <= alpha, so
after any number of looks, stopped by any rule:

- the anytime-valid p-value of m is min(1, 1 / max over looks of M_n(m));
- the confidence sequence is {m: M_n(m) < 1/alpha} = x̄ +- s h(n): M_n grows with |d| / s, so
  h(n) is where the mixture reaches 1/alpha, found by root finding (`half_width_factor`). For a
  single c it is Lai's closed form: with b = (alpha^2 c / (n + c))^(1/n) and k = (1 - b)(n + c),
  h(n)^2 = k (n - 1) / (n (n - k)) when n > k, else the whole line (the test checks both agree).
  The reported interval is the running intersection over the looks.


`benchmarks/sequential.py` checks the error rates and reports power and seeds used by simulation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Literal

import numpy as np

from harness.stats.planned import Majority, sign_detectable

MIXTURE_CS = (0.01, 1.0)
"""The mixture precisions c, averaged with equal weights (an average of e-processes is one): 1
aims at effects of 0.5-2 paired sd within 24 seeds; 0.01 lets a difference of many sds (a method
that fails to train) be decided at 3 seeds, which c = 1 alone never can (its mixture stays below
20 before n = 5). Power and seeds used: docs/sequential.md."""
DETECT_POWER = 0.8
FUTILITY = 0.1
"""Below this conditional power a check gets no further seeds..."""
FUTILITY_FROM_LOOK = 2
"""...from its second look on: the sd of the initial seeds alone is too noisy to give up on."""

Kind = Literal["directional", "tie"]


def log_mixture(
    n: np.ndarray | int,
    mean: np.ndarray | float,
    sd: np.ndarray | float,
    m: float | np.ndarray = 0.0,
    cs: tuple[float, ...] | None = None,
) -> np.ndarray:
    """log of the average over `cs` (default `MIXTURE_CS`) of M_n(m) (module doc), vectorised;
    0 for n < 2 (no evidence yet)."""
    from scipy.special import logsumexp

    cs = cs or MIXTURE_CS
    n = np.asarray(n, dtype=float)
    d = np.asarray(mean, dtype=float) - m
    v = np.maximum(n - 1.0, 0.0) * np.asarray(sd, dtype=float) ** 2 + n * d**2
    each = []
    for c in cs:
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.where(v > 0, n**2 * d**2 / ((n + c) * v), 0.0)
            each.append(0.5 * np.log(c / (n + c)) - 0.5 * n * np.log1p(-r))
    log_m = logsumexp(np.stack(each), axis=0) - np.log(len(cs))
    return np.asarray(np.where(n >= 2, log_m, 0.0), dtype=float)


def half_width_factor(
    n: np.ndarray | int, alpha: np.ndarray | float, cs: tuple[float, ...] | None = None
) -> np.ndarray:
    """h(n) of the confidence sequence x̄ +- s h(n) at level alpha: the standardized distance
    at which the mixture reaches 1/alpha (module doc; it depends on n and alpha only); inf
    where the mixture cannot reach it (always for n < 2)."""
    h = np.vectorize(lambda k, a: _half_width(int(k), float(a), cs), otypes=[float])
    return np.asarray(h(np.asarray(n), np.asarray(alpha)), dtype=float)


@cache
def _half_width(n: int, alpha: float, cs: tuple[float, ...] | None) -> float:
    from scipy.optimize import brentq

    target = float(np.log(1.0 / alpha))

    def excess(t: float) -> float:
        return float(log_mixture(n, t, 1.0, 0.0, cs)) - target

    # the mixture grows with t towards its value at sd -> 0 (a finite limit)
    if n < 2 or float(log_mixture(n, 1.0, 0.0, 0.0, cs)) <= target:
        return np.inf
    high = 1.0
    while excess(high) <= 0:
        high *= 2.0
    return float(brentq(excess, 0.0, high, xtol=1e-10))


def look_sizes(n: int, initial: int, step: int) -> list[int]:
    """The looks at n values: initial, initial + step, ... up to n, and n itself (seeds lost to
    failures can leave it between two looks); empty below `initial`."""
    sizes = list(range(initial, n + 1, step))
    return [*sizes, n] if sizes and sizes[-1] != n else sizes


def rounds_begun(extent: int, initial: int, step: int, max_n: int) -> list[int]:
    """The planned rounds (seeds below n_k, n_k in `look_sizes(max_n, initial, step)`; past
    `max_n`, seeds added by hand, on by `step` up to `extent`) that seeds 0 .. extent - 1 have
    reached: every n_k with n_(k-1) < extent, none before the initial round is run."""
    if extent < initial:
        return []
    plan = look_sizes(max_n, initial, step)
    plan += look_sizes(extent, max_n, step)[1:] if extent > max_n else []
    return [n for k, n in enumerate(plan) if (plan[k - 1] if k else 0) < extent]


@dataclass(frozen=True)
class Looks:
    """A check's paired differences at each look: the running statistics. Look k belongs to a
    planned round (`rounds`: the pairs among seeds below n_k), so a missing pair (a trial that
    crashed or timed out) leaves every look at its own round."""

    sizes: list[int]
    """Pairs at each look."""
    means: np.ndarray
    sds: np.ndarray
    wins: np.ndarray
    losses: np.ndarray
    rounds: list[int]
    """The round n_k of each look (`rounds_begun`): its alpha share is that round's."""

    @classmethod
    def of(cls, diffs: np.ndarray, rounds: Sequence[int], seeds: np.ndarray | None = None) -> Looks:
        """The looks at `rounds` over the pairs `diffs` whose seeds (default 0, 1, ...: no pair
        missing) lie below each round's n_k; a round without a pair has no look."""
        seeds = np.arange(diffs.size) if seeds is None else np.asarray(seeds)
        kept = [(n, diffs[seeds < n]) for n in rounds]
        kept = [(n, pairs) for n, pairs in kept if pairs.size]
        each = [pairs for _, pairs in kept]
        return cls(
            [pairs.size for pairs in each],
            np.array([pairs.mean() for pairs in each]),
            np.array([pairs.std(ddof=1) if pairs.size >= 2 else np.nan for pairs in each]),
            np.array([int((pairs > 0).sum()) for pairs in each], dtype=int),
            np.array([int((pairs < 0).sum()) for pairs in each], dtype=int),
            [n for n, _ in kept],
        )

    @property
    def n(self) -> int:
        return self.sizes[-1] if self.sizes else 0

    def anytime_p(self, m: float = 0.0) -> float:
        """min(1, 1 / max over the looks of M_n(m)); 1 without a look."""
        if not self.sizes:
            return 1.0
        best = float(np.max(log_mixture(np.array(self.sizes), self.means, self.sds, m)))
        return float(min(1.0, np.exp(-best)))

    def interval(self, alpha: float) -> tuple[float, float]:
        """The running intersection of the confidence sequence at level alpha over the looks."""
        if not self.sizes:
            return -np.inf, np.inf
        return self.intersection(half_width_factor(np.array(self.sizes), alpha))

    def intersection(self, factors: np.ndarray) -> tuple[float, float]:
        """The running intersection of x̄ ± s h over the looks, h = `factors` (one a look)."""
        low, high = running_bounds(self.means, self.sds, factors)
        return float(low[-1]), float(high[-1])


def running_bounds(
    means: np.ndarray, sds: np.ndarray, factors: np.ndarray | float
) -> tuple[np.ndarray, np.ndarray]:
    """The running intersection of the intervals x̄ ± s h over the looks (last axis): at each
    look the largest lower and the smallest upper bound so far. h = `factors` (inf: no bound);
    an sd of NaN (below 2 pairs) counts as 0."""
    sds = np.nan_to_num(np.asarray(sds, dtype=float), nan=0.0)
    factors = np.broadcast_to(np.asarray(factors, dtype=float), sds.shape)
    finite = np.isfinite(factors)
    half = np.where(finite, np.where(finite, factors, 0.0) * sds, np.inf)
    return (
        np.maximum.accumulate(means - half, axis=-1),
        np.minimum.accumulate(means + half, axis=-1),
    )


def conditional_power(
    kind: Kind,
    n: np.ndarray | int,
    mean: np.ndarray | float,
    sd: np.ndarray | float,
    max_n: int,
    level: float,
    margin: float | None = None,
    factor: float | None = None,
) -> np.ndarray:
    """P(the interval at `max_n` seeds decides | the mean and sd after n seeds are the truth),
    by the normal approximation of the remaining seeds' mean (futility:
    `harness.claims.sequential`); vectorised. `factor`: the interval's half-width in sds at
    `max_n` (default: the anytime confidence sequence's at `level`)."""
    from scipy import stats

    n, mean = np.asarray(n, dtype=float), np.asarray(mean, dtype=float)
    sd = np.nan_to_num(np.asarray(sd, dtype=float), nan=0.0)
    h = float(half_width_factor(max_n, level)) if factor is None else float(factor)
    half = h * sd
    spread = np.maximum(sd * np.sqrt(np.maximum(max_n - n, 0.0)) / max_n, 1e-300)
    if kind == "tie":
        room = (margin or 0.0) - half
        power = stats.norm.cdf((room - mean) / spread) - stats.norm.cdf((-room - mean) / spread)
        power = np.where(room > 0, power, 0.0)
    else:
        power = stats.norm.sf((half - mean) / spread) + stats.norm.cdf((-half - mean) / spread)
    exact = (np.abs(mean) < (margin or 0.0) - half) if kind == "tie" else (np.abs(mean) > half)
    power = np.where(sd > 0, power, exact)  # no spread: the remaining seeds change nothing
    return np.asarray(np.where(n >= max_n, 0.0, power), dtype=float)


def detectable_effect(
    sd: float,
    max_n: int,
    level: float,
    factor: float | None = None,
    kind: Kind = "directional",
    passes: Majority | None = None,
) -> float | None:
    """The smallest |difference| max seeds detect with probability about `DETECT_POWER`
    (`factor` as in `conditional_power`); for a tie, the narrowest margin max seeds confirm
    with that probability when the true difference is 0: |mean| + half-width < margin needs
    the margin s (h + z_((1 + power) / 2) / sqrt(max)). With the rule's sign test at the last
    look (`passes`), the larger of that and the sign test's own (`sign_detectable`, normal
    differences): inf where no outcome of max seeds passes the sign test."""
    from scipy import stats

    h = float(half_width_factor(max_n, level)) if factor is None else float(factor)
    if not np.isfinite(h) or not np.isfinite(sd):
        return None
    power = (1 + DETECT_POWER) / 2 if kind == "tie" else DETECT_POWER
    sign = sign_detectable(max_n, passes, power) if passes is not None else 0.0
    return float(sd * max(h + float(stats.norm.ppf(power)) / np.sqrt(max_n), sign))
