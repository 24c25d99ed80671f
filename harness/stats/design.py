"""Operating characteristics of a sequential schedule by simulation (docs/sequential.md): the
family-wise false-decision rate under null families that match this benchmark's failure modes,
power, and seeds used, for the decision rules of `harness.claims.sequential`. Vectorised numpy:
`layerbench plan SUITE --design` and `benchmarks/sequential.py --design-tables` both run it.

Rules (`Rule`):

- `planned`: the default of a schedule: the robust per-look p-value (t and exact sign test must
  agree, `harness.stats.planned.robust_p`) spent over the planned looks by O'Brien-Fleming
  shares, Holm over the family;
- `anytime`: `looks: unplanned`: the anytime t-mixture and the sign e-process must agree;
- `planned_t`: the planned split with the t-test alone (valid under normality only: shown for
  the power it would buy);
- `anytime_t`: the rule before issue 42 (the anytime t-mixture alone), for comparison.

Null families (`NULLS`), each scaled to about unit sd and centred where the null of the
estimand puts it: by default at the median (P(win) = 1/2: the null of "better on most seeds"),
or at the mean (`centre="mean"`: the null of the mean difference). `failure p`: a fraction p of
the seeds fails by -(10 + N(0, 1)) paired sd (the method does not train on that seed), the rest
are N(mu, 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from harness.stats.paired import holm
from harness.stats.planned import (
    anytime_majority,
    robust_p,
    sign_log_e,
    sign_majority,
    spending_weights,
    t_half_factor,
    t_p,
    tie_look,
)
from harness.stats.sequential import (
    FUTILITY,
    FUTILITY_FROM_LOOK,
    conditional_power,
    half_width_factor,
    log_mixture,
    look_sizes,
    running_bounds,
)

Rule = Literal["planned", "anytime", "planned_t", "anytime_t"]
Centre = Literal["median", "mean"]
NULLS = (
    "normal",
    "t3",
    "exponential",
    "lognormal",
    "failure 10%",
    "failure 20%",
    "failure 30%",
)
MEAN_CENTRED = " (mean-centred)"
FAILURE_SIZE = 10.0
EFFECTS = (0.5, 1.0, 1.5, 2.0, 3.0)


@dataclass(frozen=True)
class Schedule:
    """A suite's looks: `seeds: {initial, max, step}` and alpha."""

    initial: int
    max: int
    step: int
    alpha: float = 0.05

    @property
    def sizes(self) -> list[int]:
        return look_sizes(self.max, self.initial, self.step)


def null_draws(
    rng: np.random.Generator, shape: tuple[int, ...], family: str, centre: Centre = "median"
) -> np.ndarray:
    """Paired differences of about unit sd from a null family (module doc)."""
    if family == "normal":
        return rng.standard_normal(shape)
    if family == "t3":
        return rng.standard_t(3, shape) / math.sqrt(3.0)
    if family == "exponential":
        return rng.standard_exponential(shape) - (math.log(2.0) if centre == "median" else 1.0)
    if family == "lognormal":
        scale = math.sqrt((math.e - 1.0) * math.e)
        shift = 1.0 if centre == "median" else math.exp(0.5)
        return (np.exp(rng.standard_normal(shape)) - shift) / scale
    if family.startswith("failure"):
        from scipy import stats

        p = float(family.split()[1].rstrip("%")) / 100.0
        median_mu = float(stats.norm.ppf(0.5 / (1.0 - p)))
        mu = median_mu if centre == "median" else FAILURE_SIZE * p / (1.0 - p)
        ok = rng.standard_normal(shape) + mu
        failed = -(FAILURE_SIZE + rng.standard_normal(shape))
        return np.where(rng.random(shape) < p, failed, ok)
    raise ValueError(f"unknown null family {family!r}")


def running(x: np.ndarray, sizes: list[int]) -> dict[str, np.ndarray]:
    """Means, sds (ddof 1), wins (> 0) and losses (< 0) of the first n values along the last
    axis, for each n in sizes (a new last axis)."""
    index = np.array(sizes) - 1
    n = np.array(sizes, dtype=float)
    total, squares = np.cumsum(x, axis=-1), np.cumsum(x**2, axis=-1)
    means = total[..., index] / n
    variances = (squares[..., index] - n * means**2) / np.maximum(n - 1, 1)
    return {
        "mean": means,
        "sd": np.sqrt(np.maximum(variances, 0.0)),
        "wins": np.cumsum(x > 0, axis=-1)[..., index],
        "losses": np.cumsum(x < 0, axis=-1)[..., index],
    }


def directional(
    x: np.ndarray, schedule: Schedule, rule: Rule, futility: bool = True
) -> dict[str, np.ndarray]:
    """Directional checks; x is (reps, claims, max), the claims of a rep one Holm family.
    Returns per (rep, claim) the decided sign (+1, -1, 0) and the seeds used."""
    sizes, alpha = schedule.sizes, schedule.alpha
    stats = running(x, sizes)
    reps, claims = x.shape[:2]
    weights = spending_weights(sizes, schedule.max, alpha)
    best_p = np.ones((reps, claims))
    log_t, log_s = np.zeros((reps, claims)), np.zeros((reps, claims))
    active = np.ones((reps, claims), dtype=bool)
    sign = np.zeros((reps, claims), dtype=int)
    used = np.full((reps, claims), schedule.max)
    final = float(
        t_half_factor(schedule.max, alpha * weights[-1] / claims)
        if rule.startswith("planned")
        else half_width_factor(schedule.max, alpha / claims)
    )
    for look, n in enumerate(sizes):
        mean, sd = stats["mean"][..., look], stats["sd"][..., look]
        wins, losses = stats["wins"][..., look], stats["losses"][..., look]
        if rule.startswith("planned"):
            p = robust_p(n, mean, sd, wins, losses) if rule == "planned" else t_p(n, mean, sd)
            best_p = np.where(active, np.minimum(best_p, p / weights[look]), best_p)
        else:
            log_t = np.where(active, np.maximum(log_t, log_mixture(np.array(n), mean, sd)), log_t)
            log_s = np.where(active, np.maximum(log_s, sign_log_e(wins, losses)), log_s)
            agree = np.sign(mean) == np.sign(wins - losses)
            both = np.exp(-(log_t if rule == "anytime_t" else np.minimum(log_t, log_s)))
            current = np.where(agree | (rule == "anytime_t"), np.minimum(1.0, both), 1.0)
            best_p = np.where(active, np.minimum(best_p, current), best_p)
        decided = active & (holm(best_p) < alpha)
        sign = np.where(decided, np.sign(mean).astype(int), sign)
        stop = decided
        if futility and look + 1 >= FUTILITY_FROM_LOOK and n < schedule.max:
            power = conditional_power("directional", n, mean, sd, schedule.max, alpha, None, final)
            stop = stop | (active & (power < FUTILITY))
        used = np.where(active & stop, n, used)
        active &= ~stop
    return {"sign": sign, "used": used}


def tie(x: np.ndarray, margin: float, schedule: Schedule, rule: Rule) -> np.ndarray:
    """Tie checks (reps, max): +1 reproduced (inside the margin), -1 contradicted, 0 neither.
    Planned rules: per look the t interval at 2 alpha w_k (each side alpha w_k) inside the
    margin, and (`planned`) both one-sided sign tests of d - margin < 0 and d + margin > 0 at
    alpha w_k; anytime rules: the running t confidence sequence at alpha."""
    sizes, alpha = schedule.sizes, schedule.alpha
    weights = spending_weights(sizes, schedule.max, alpha)
    stats = running(x, sizes)
    outcome = np.zeros(x.shape[0], dtype=int)
    index = np.array(sizes) - 1
    below = np.cumsum(x < margin, axis=-1)[..., index]
    above = np.cumsum(x > -margin, axis=-1)[..., index]
    factors = (
        t_half_factor(np.array(sizes), 2 * alpha * weights)
        if rule.startswith("planned")
        else half_width_factor(np.array(sizes), alpha)
    )
    lows, highs = running_bounds(stats["mean"], stats["sd"], factors)
    for look, n in enumerate(sizes):
        level = alpha * weights[look]
        majority = {"planned": sign_majority(level), "anytime": anytime_majority(alpha)}
        inside, outside = tie_look(
            n,
            (below[:, look], above[:, look]),
            (lows[:, look], highs[:, look]),
            margin,
            majority.get(rule),
        )
        outcome = np.where(outcome == 0, np.where(inside, 1, np.where(outside, -1, 0)), outcome)
    return outcome


def rate(hits: np.ndarray) -> tuple[float, float]:
    """A proportion and its Monte Carlo standard error."""
    p = float(hits.mean())
    return p, math.sqrt(p * (1 - p) / hits.size) if hits.size else 0.0


def null_rate(
    reps: int,
    schedule: Schedule,
    family_size: int,
    null: str,
    rule: Rule,
    rng: np.random.Generator,
) -> tuple[float, float]:
    """The family-wise false-decision rate of `family_size` null directional checks (a look at
    every planned look: no futility stop, the worst case) and its Monte Carlo se; a `null`
    ending in `MEAN_CENTRED` is centred at the mean instead of the median."""
    mean = null.endswith(MEAN_CENTRED)
    centre: Centre = "mean" if mean else "median"
    family = null.removesuffix(MEAN_CENTRED)
    x = null_draws(rng, (reps, max(1, family_size), schedule.max), family, centre)
    found = directional(x, schedule, rule, futility=False)
    return rate((found["sign"] != 0).any(axis=1))


def power(
    reps: int,
    schedule: Schedule,
    family_size: int,
    effect: float,
    rule: Rule,
    rng: np.random.Generator,
) -> tuple[float, float]:
    """(power, mean seeds) of one directional check of `effect` paired sd (normal noise), the
    rest of its Holm family null, with futility stops as `run` takes them."""
    x = rng.standard_normal((reps, max(1, family_size), schedule.max))
    x[:, 0, :] += effect
    found = directional(x, schedule, rule)
    return float((found["sign"][:, 0] == 1).mean()), float(found["used"][:, 0].mean())
