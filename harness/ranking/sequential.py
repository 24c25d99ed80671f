"""Sequential seeds: anytime-valid verdicts on paired differences, futility, and which methods
need more seeds (`seeds: {initial, max, step}`, docs/sequential.md).

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

Verdicts per (claim, recipe), at the looks n = initial, initial + step, ..., max:

- directional (`better` / `worse`): the anytime p-values of 0 of the suite's directional checks
  are Holm-adjusted together (Holm, 1979: valid for any valid p-values, and these are valid at
  any stopping time); adjusted p < alpha decides the sign: **reproduced** or **contradicted**.
  The interval shown is the confidence sequence at alpha / m (m = the directional checks; a
  Bonferroni-level simultaneous interval: it excludes 0 only where the claim is decided);
- `tie` (the sequential analogue of two one-sided tests): the confidence sequence at alpha
  (each side's miss probability is at most alpha) **reproduced** when it lies inside (-margin,
  margin), **contradicted** when it lies wholly above margin or below -margin; a tie whose true
  difference equals the margin is called reproduced at most alpha of the time;
- futility: a check not yet decided stops when its conditional power is below `FUTILITY`: the
  probability, under the current mean and sd as the truth, that the interval at `max` seeds
  decides (normal approximation of the remaining seeds' mean), from its second look on. Stopping
  for futility never decides anything, so it cannot raise the error rates. The smallest effect
  `max` seeds could detect is s * (h(max) + z_0.8 / sqrt(max)): the effect at which the interval
  at max excludes 0 with probability about 0.8.

`benchmarks/sequential.py` checks the error rates and reports power and seeds used by simulation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Literal

import numpy as np

MIXTURE_CS = (0.01, 1.0)
"""The mixture precisions c, averaged with equal weights (an average of e-processes is one): 1
aims at effects of 0.5-2 paired sd within 24 seeds; 0.01 lets a difference of many sds (a method
that fails to train) be decided at 3 seeds, which c = 1 alone never can (its mixture stays below
20 before n = 5). Power and seeds used: docs/sequential.md."""
FUTILITY = 0.1
"""Below this conditional power a check gets no further seeds..."""
FUTILITY_FROM_LOOK = 2
"""...from its second look on: the sd of the initial seeds alone is too noisy to give up on."""
DETECT_POWER = 0.8

Stopped = Literal["decided", "futile", "max"]
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


@dataclass(frozen=True)
class Looks:
    """A check's paired differences (seed order) at each look: the running statistics."""

    sizes: list[int]
    means: np.ndarray
    sds: np.ndarray

    @classmethod
    def of(cls, diffs: np.ndarray, initial: int, step: int) -> Looks:
        sizes = look_sizes(diffs.size, initial, step)
        means = np.array([diffs[:k].mean() for k in sizes])
        sds = np.array([diffs[:k].std(ddof=1) if k >= 2 else np.nan for k in sizes])
        return cls(sizes, means, sds)

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
        h = half_width_factor(np.array(self.sizes), alpha)
        sds = np.nan_to_num(self.sds, nan=0.0)
        half = np.where(np.isinf(h), np.inf, np.where(np.isinf(h), 0.0, h) * sds)
        return float(np.max(self.means - half)), float(np.min(self.means + half))


@dataclass(frozen=True)
class SequentialCheck:
    """What the sequential design says of one (claim, recipe): recorded in rank JSON."""

    n: int
    looks: int
    level: float
    """The level of `interval` (alpha / m for a directional check, alpha for a tie)."""
    interval: tuple[float | None, float | None]
    p_anytime: float | None
    """Holm-adjusted anytime-valid p-value of 0 (directional checks)."""
    stopped: Stopped | None
    """decided, futile, max, or None while seeds may still be added."""
    conditional_power: float | None
    detectable: float | None
    """The smallest |difference| max seeds could detect (module doc), in the metric's units."""
    cpu_s: float = 0.0
    """Wall seconds of the two methods' trials of this recipe (one worker each), every sweep
    point."""


def conditional_power(
    kind: Kind,
    n: np.ndarray | int,
    mean: np.ndarray | float,
    sd: np.ndarray | float,
    max_n: int,
    level: float,
    margin: float | None = None,
) -> np.ndarray:
    """P(the interval at `max_n` seeds decides | the mean and sd after n seeds are the truth),
    by the normal approximation of the remaining seeds' mean (module doc); vectorised."""
    from scipy import stats

    n, mean = np.asarray(n, dtype=float), np.asarray(mean, dtype=float)
    sd = np.nan_to_num(np.asarray(sd, dtype=float), nan=0.0)
    half = float(half_width_factor(max_n, level)) * sd
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


def detectable_effect(sd: float, max_n: int, level: float) -> float | None:
    """The smallest |difference| max seeds detect with probability about `DETECT_POWER`."""
    from scipy import stats

    h = float(half_width_factor(max_n, level))
    if not np.isfinite(h) or not np.isfinite(sd):
        return None
    return float(sd * (h + float(stats.norm.ppf(DETECT_POWER)) / np.sqrt(max_n)))


@dataclass(frozen=True)
class CheckInput:
    """One (claim, recipe) for the sequential rule: its kind, margin and paired differences
    (method - than, in seed order, pairs both methods finished)."""

    kind: Kind
    diffs: np.ndarray
    margin: float | None = None
    cpu_s: float = 0.0


Outcome = Literal["positive", "negative", "inside", "outside"]
"""A decided check: the difference is above / below 0 (directional), or inside / outside the
margin (tie)."""


@dataclass(frozen=True)
class CheckDecision:
    """The sequential rule's outcome of one check (None: undecided) and its record."""

    outcome: Outcome | None
    record: SequentialCheck


def decide(
    checks: Sequence[CheckInput], alpha: float, initial: int, step: int, max_n: int
) -> list[CheckDecision]:
    """The sequential verdicts of a suite's checks together (Holm over the directional ones)."""
    from harness.ranking.stats import holm

    looks = [Looks.of(c.diffs, initial, step) for c in checks]
    directional = [i for i, c in enumerate(checks) if c.kind == "directional"]
    raw = [looks[i].anytime_p() for i in directional]
    adjusted = dict(zip(directional, map(float, holm(raw)), strict=True)) if raw else {}
    m = max(1, len(directional))
    return [
        _decision(check, look, adjusted.get(i), alpha, alpha / m, max_n)
        for i, (check, look) in enumerate(zip(checks, looks, strict=True))
    ]


def _decision(
    check: CheckInput, looks: Looks, p: float | None, alpha: float, each: float, max_n: int
) -> CheckDecision:
    level = alpha if check.kind == "tie" else each
    low, high = looks.interval(level)
    decided: Outcome | None = None
    if check.kind == "tie" and looks.sizes:
        margin = check.margin or 0.0
        if -margin < low and high < margin:
            decided = "inside"
        elif low > margin or high < -margin:
            decided = "outside"
    elif p is not None and p < alpha and looks.sizes:
        decided = "positive" if looks.means[-1] > 0 else "negative"
    power = (
        float(
            conditional_power(
                check.kind, looks.n, looks.means[-1], looks.sds[-1], max_n, level, check.margin
            )
        )
        if looks.sizes and decided is None
        else None
    )
    stopped: Stopped | None = None
    if decided is not None:
        stopped = "decided"
    elif looks.n >= max_n:
        stopped = "max"
    elif power is not None and power < FUTILITY and len(looks.sizes) >= FUTILITY_FROM_LOOK:
        stopped = "futile"
    sd = float(looks.sds[-1]) if looks.sizes else np.nan
    record = SequentialCheck(
        looks.n,
        len(looks.sizes),
        level,
        (_finite(low), _finite(high)),
        p,
        stopped,
        power,
        detectable_effect(sd, max_n, level),
        check.cpu_s,
    )
    return CheckDecision(decided, record)


def _finite(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def describe(record: SequentialCheck) -> str:
    """How a check's seeds ended, for tables and the Findings page: "n = 6, 2 looks, futile,
    120 CPU-s"."""
    looks = f"{record.looks} look{'s' if record.looks != 1 else ''}"
    state = {
        "decided": "decided",
        "max": "at max",
        "futile": "futile",
        None: "open (more seeds would be added)",
    }[record.stopped]
    return f"n = {record.n}, {looks}, {state}, {record.cpu_s:.0f} CPU-s"


def verdict_note(record: SequentialCheck | None) -> str:
    """What an inconclusive verdict adds under sequential seeds: "futile at n = 6; the smallest
    effect max seeds could detect: 0.031", or "at max (n = 6); ..." where the seeds ran out
    (empty while seeds would still be added)."""
    if record is None or record.stopped not in ("futile", "max"):
        return ""
    shown = "unknown" if record.detectable is None else f"{record.detectable:.3g}"
    state = (
        f"futile at n = {record.n}" if record.stopped == "futile" else f"at max (n = {record.n})"
    )
    return f"{state}; the smallest effect max seeds could detect: {shown}"


def summary(records: Sequence[SequentialCheck]) -> dict[str, object] | None:
    """A claim's sequential record over its recipes: the most seeds and looks any used, how
    they stopped (one state, or each), the CPU seconds of all; None without records."""
    if not records:
        return None
    states = sorted({str(r.stopped) for r in records})
    return {
        "n": max(r.n for r in records),
        "looks": max(r.looks for r in records),
        "stopped": states[0] if len(states) == 1 else states,
        "cpu_s": sum(r.cpu_s for r in records),
    }


SEQUENTIAL_HEADER = (
    "sequential seeds: anytime-valid t confidence sequences (Lai, 1976; Wang & Ramdas, 2023), "
    "Holm over the directional claims' anytime p-values, intervals at alpha / (directional "
    "checks), ties at alpha; docs/sequential.md"
)
