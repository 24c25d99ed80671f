"""Planned looks and distribution-free companions for sequential seeds (docs/sequential.md).

A schedule `seeds: {initial, max, step}` fixes its looks in advance (n = initial, initial +
step, ..., max), so alpha can be spent over them instead of over every possible n:

- **spending** (`spending_weights`): look k of K gets the share w_k = (f(t_k) - f(t_{k-1})) /
  alpha of alpha, t_k = n_k / max the information fraction and f the Lan-DeMets
  O'Brien-Fleming-type spending function f(t) = 2 - 2 Phi(z_{1 - alpha/2} / sqrt(t)) (Lan &
  DeMets, 1983, "Discrete sequential boundaries for clinical trials", Biometrika 70(3)). The
  shares are used as a weighted Bonferroni split (a test at look k runs at level alpha w_k), so
  the family-wise rate is at most sum_k alpha w_k = alpha for any dependence between the looks
  and any test valid at a fixed n: the planned p-value of a check is min_k p_k / w_k.
- **the robust rule** (`robust_p`): the per-look p-value is the larger of the paired t-test's
  and the exact sign test's (both two-sided; `harness.stats.paired.sign_p`), and 1 when they
  point different ways. A check is decided only where both agree, so the rule inherits the sign
  test's validity for "the method wins on most seeds" (P(difference > 0) = 1/2 under the null,
  any distribution: skewed, heavy-tailed, methods that fail on some seeds) and the t-test's for
  the mean under normality.
- **unplanned looks** (`looks: unplanned`): the anytime t-mixture of `harness.stats.sequential`
  paired with the sign e-process `sign_log_e`, the Krichevsky-Trofimov (Beta(1/2, 1/2)) mixture
  of the likelihood ratios of the wins' Bernoulli sequence against p = 1/2: a nonnegative
  martingale under the null (Ville's inequality; Ramdas, Grünwald, Vovk & Shafer, 2023,
  "Game-theoretic statistics and safe anytime-valid inference", Statist. Sci. 38(4)).

Ties (zero differences) carry no sign and are dropped, as in the exact sign test.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from harness.stats.paired import sign_p


def spending_weights(sizes: Sequence[int], max_n: int, alpha: float) -> np.ndarray:
    """The shares of alpha of the looks at `sizes` (increasing, up to `max_n`): O'Brien-Fleming
    spending increments over alpha; they sum to 1 when the last size is `max_n`."""
    from scipy import stats

    fraction = np.minimum(np.asarray(sizes, dtype=float) / max_n, 1.0)
    z = float(stats.norm.isf(alpha / 2))
    spent = 2.0 * stats.norm.sf(z / np.sqrt(fraction))
    return np.asarray(np.diff(np.concatenate([[0.0], spent])) / alpha, dtype=float)


def t_p(n: np.ndarray | int, mean: np.ndarray | float, sd: np.ndarray | float) -> np.ndarray:
    """Two-sided paired t-test p-values of mean 0 from n, mean, sd (vectorised); 1 for n < 2,
    0 for a constant nonzero difference."""
    from scipy import stats

    n = np.asarray(n, dtype=float)
    mean, sd = np.asarray(mean, dtype=float), np.nan_to_num(np.asarray(sd, dtype=float))
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.abs(mean) * np.sqrt(n) / sd
    p = 2.0 * stats.t.sf(np.nan_to_num(t, nan=0.0, posinf=np.inf), np.maximum(n - 1.0, 1.0))
    p = np.where(sd > 0, p, np.where(mean != 0, 0.0, 1.0))
    return np.asarray(np.where(n >= 2, p, 1.0), dtype=float)


def sign_above_p(above: np.ndarray | int, total: np.ndarray | int) -> np.ndarray:
    """One-sided exact sign-test p-value that more than half the signs are positive:
    P(Binomial(total, 1/2) >= above); 1 without signs."""
    from scipy import stats

    above, total = np.asarray(above), np.asarray(total)
    p = stats.binom.sf(above - 1, total, 0.5)
    return np.asarray(np.where(total > 0, p, 1.0), dtype=float)


def robust_p(
    n: np.ndarray | int,
    mean: np.ndarray | float,
    sd: np.ndarray | float,
    wins: np.ndarray | int,
    losses: np.ndarray | int,
) -> np.ndarray:
    """The per-look p-value of the robust rule (module doc): max(t, sign), 1 where the mean and
    the majority of signs disagree."""
    agree = np.sign(np.asarray(mean)) == np.sign(np.asarray(wins) - np.asarray(losses))
    p = np.maximum(t_p(n, mean, sd), sign_p(wins, losses))
    return np.asarray(np.where(agree, p, 1.0), dtype=float)


def planned_p(per_look: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The weighted-Bonferroni p-value over the looks taken (last axis): min_k p_k / w_k."""
    k = per_look.shape[-1]
    with np.errstate(divide="ignore"):
        return np.asarray(np.minimum(1.0, np.min(per_look / weights[:k], axis=-1)), dtype=float)


def sign_log_e(wins: np.ndarray | int, losses: np.ndarray | int) -> np.ndarray:
    """log of the sign e-process (module doc): 2^n B(W + 1/2, L + 1/2) / B(1/2, 1/2)."""
    from scipy.special import betaln

    wins, losses = np.asarray(wins, dtype=float), np.asarray(losses, dtype=float)
    return np.asarray(
        (wins + losses) * np.log(2.0) + betaln(wins + 0.5, losses + 0.5) - betaln(0.5, 0.5),
        dtype=float,
    )


def t_half_factor(n: np.ndarray | int, level: np.ndarray | float) -> np.ndarray:
    """h with x̄ ± s h the two-sided fixed-n t interval at `level` (error rate); inf for n < 2."""
    from scipy import stats

    n = np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        h = stats.t.isf(np.asarray(level) / 2.0, np.maximum(n - 1.0, 1.0)) / np.sqrt(n)
    return np.asarray(np.where(n >= 2, h, np.inf), dtype=float)


Majority = Callable[[np.ndarray, np.ndarray | int], np.ndarray]
"""Whether k of n seeds show that most seeds lie on one side (one-sided, at some level)."""


def sign_majority(level: float) -> Majority:
    """The one-sided exact sign test at a fixed look, at `level`."""
    return lambda k, n: np.asarray(sign_above_p(k, n) <= level)


def anytime_majority(alpha: float) -> Majority:
    """The one-sided sign e-process (`sign_above_log_e`) reaching 1/alpha: valid at any look."""
    return lambda k, n: np.asarray(sign_above_log_e(k, n) >= np.log(1.0 / alpha))


def sign_above_log_e(above: np.ndarray | int, total: np.ndarray | int) -> np.ndarray:
    """log of the one-sided sign e-process against P(positive) <= 1/2: the uniform mixture over
    q in [1/2, 1] of the likelihood ratios (2q)^k (2(1 - q))^(n - k), each a supermartingale
    under any p <= 1/2, so their mixture is one: 2^(n + 1) B(k + 1, n - k + 1) P(Beta(k + 1,
    n - k + 1) > 1/2)."""
    from scipy.special import betainc, betaln

    k, n = np.asarray(above, dtype=float), np.asarray(total, dtype=float)
    upper = 1.0 - betainc(k + 1.0, n - k + 1.0, 0.5)
    with np.errstate(divide="ignore"):
        return np.asarray(
            (n + 1.0) * np.log(2.0) + betaln(k + 1.0, n - k + 1.0) + np.log(upper), dtype=float
        )


def tie_look(
    n: np.ndarray | int,
    counts: tuple[np.ndarray, np.ndarray],
    bounds: tuple[np.ndarray, np.ndarray],
    margin: float,
    majority: Majority | None,
) -> tuple[np.ndarray, np.ndarray]:
    """(inside, outside) of a tie at one look from its running interval `bounds` and the
    counts (below, above) of differences below `margin` and above `-margin`: inside when the
    interval lies in (-margin, margin) and (`majority` given) most seeds are shown to lie below
    margin and above -margin; outside when it lies wholly beyond a margin and most seeds are
    shown beyond it."""
    low, high = bounds
    below, above = counts
    inside = (-margin < low) & (high < margin)
    outside = (low > margin) | (high < -margin)
    if majority is not None:
        inside &= majority(below, n) & majority(above, n)
        outside &= majority(np.where(low > margin, n - below, n - above), n)
    return np.asarray(inside), np.asarray(outside)


def final_sign_test(level: float, tie: bool, planned: bool) -> Majority:
    """The rule's sign test at a check's last look, at `level` (the look's share of alpha for
    planned looks): each side one-sided for a tie; two-sided for a directional check (one side
    at level / 2 planned, the two-sided sign e-process unplanned)."""
    if planned:
        return sign_majority(level if tie else level / 2.0)
    if tie:
        return anytime_majority(level)
    return lambda k, n: np.asarray(sign_log_e(k, n - k) >= np.log(1.0 / level))


def sign_detectable(n: int, passes: Majority, power: float) -> float:
    """The standardised effect delta at which n seeds pass a sign test (`passes`: k of n shown
    on one side) with probability `power`, for normal differences (a seed's difference is on
    the effect's side with probability Phi(delta)): the smallest count k that passes, then q
    with P(Binomial(n, q) >= k) = power, delta = Phi^-1(q); inf where not even n of n passes
    (the exact test's smallest p, 2^-n one-sided, exceeds its level)."""
    from scipy import optimize, stats

    counts = np.arange(n + 1)
    passing = np.flatnonzero(passes(counts, n))
    if passing.size == 0:
        return float("inf")
    k = int(passing[0])
    q = optimize.brentq(lambda q: stats.binom.sf(k - 1, n, q) - power, 1e-12, 1.0 - 1e-12)
    return float(stats.norm.ppf(q))
