"""Error rates, power and seeds used of sequential seeds (harness.stats.sequential,
harness.claims.sequential), by simulation: docs/sequential.md.

    python benchmarks/sequential.py --reps 20000 --initial 3 --step 3 --max 24 [--markdown]

Each simulated claim draws `max` paired differences (effect + noise, noise normal or t with 3 df
scaled to sd 1, so effects are in paired-sd units) and looks after `initial`, `initial + step`,
..., `max` seeds exactly as `layerbench run` does: a directional claim stops when its anytime
p-value (Holm-adjusted over the claims of a family) is below alpha, or for futility, or at
`max`; a tie stops when its confidence sequence lies inside or wholly outside the margin. The
fixed design beside it is today's rule at `max` seeds (two-sided paired t-test at alpha; a tie
reproduced when the 95% t-interval lies inside the margin). Prints one JSON object, or with
`--markdown` the tables of docs/sequential.md.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
from scipy import stats

from harness.claims.sequential import FUTILITY, FUTILITY_FROM_LOOK
from harness.stats.paired import holm
from harness.stats.sequential import conditional_power, half_width_factor, log_mixture, look_sizes

Noise = Literal["normal", "t3"]


@dataclass(frozen=True)
class Design:
    initial: int = 3
    step: int = 3
    max: int = 24
    alpha: float = 0.05
    futility: bool = True
    """False: look at every step up to max whatever the conditional power (the null checks)."""


def draws(rng: np.random.Generator, shape: tuple[int, ...], noise: Noise) -> np.ndarray:
    """Noise of sd 1: standard normal, or Student t with 3 df divided by sqrt(3)."""
    if noise == "normal":
        return rng.standard_normal(shape)
    return rng.standard_t(3, shape) / math.sqrt(3.0)


def running(x: np.ndarray, sizes: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Means and sds (ddof 1) of the first n values along the last axis, for each n in sizes."""
    total, squares = np.cumsum(x, axis=-1), np.cumsum(x**2, axis=-1)
    n = np.array(sizes, dtype=float)
    means = total[..., np.array(sizes) - 1] / n
    variances = (squares[..., np.array(sizes) - 1] - n * means**2) / (n - 1)
    return means, np.sqrt(np.maximum(variances, 0.0))


def directional(x: np.ndarray, design: Design) -> dict[str, np.ndarray]:
    """Sequential directional claims; x is (reps, claims, max): the claims of a rep form one
    Holm family. Returns per (rep, claim) the outcome sign (+1, -1, 0 undecided), seeds used,
    and whether it stopped for futility."""
    sizes = look_sizes(design.max, design.initial, design.step)
    means, sds = running(x, sizes)
    reps, claims = x.shape[:2]
    best = np.full((reps, claims), -np.inf)
    active = np.ones((reps, claims), dtype=bool)
    sign = np.zeros((reps, claims), dtype=int)
    used = np.full((reps, claims), design.max)
    futile = np.zeros((reps, claims), dtype=bool)
    level = design.alpha / claims
    for look, n in enumerate(sizes):
        mean, sd = means[..., look], sds[..., look]
        best = np.where(active, np.maximum(best, log_mixture(np.array(n), mean, sd)), best)
        adjusted = holm(np.minimum(1.0, np.exp(-best)))
        decided = active & (adjusted < design.alpha)
        sign = np.where(decided, np.sign(mean).astype(int), sign)
        power = conditional_power("directional", n, mean, sd, design.max, level)
        stop_futile = active & ~decided & (power < FUTILITY) & (n < design.max)
        stop_futile &= design.futility and look + 1 >= FUTILITY_FROM_LOOK
        futile |= stop_futile
        used = np.where(decided | stop_futile, n, used)
        active &= ~(decided | stop_futile)
    return {"sign": sign, "used": used, "futile": futile}


def tie(x: np.ndarray, margin: float, design: Design) -> dict[str, np.ndarray]:
    """Sequential tie claims (reps, max): outcome +1 inside the margin, -1 outside, 0 neither."""
    sizes = look_sizes(design.max, design.initial, design.step)
    means, sds = running(x, sizes)
    reps = x.shape[0]
    low, high = np.full(reps, -np.inf), np.full(reps, np.inf)
    active = np.ones(reps, dtype=bool)
    outcome = np.zeros(reps, dtype=int)
    used = np.full(reps, design.max)
    futile = np.zeros(reps, dtype=bool)
    for look, n in enumerate(sizes):
        mean, sd = means[:, look], sds[:, look]
        half = half_width_factor(n, design.alpha) * sd
        low = np.where(active, np.maximum(low, mean - half), low)
        high = np.where(active, np.minimum(high, mean + half), high)
        inside = active & (-margin < low) & (high < margin)
        outside = active & ((low > margin) | (high < -margin))
        outcome = np.where(inside, 1, np.where(outside, -1, outcome))
        power = conditional_power("tie", n, mean, sd, design.max, design.alpha, margin)
        stop_futile = active & ~inside & ~outside & (power < FUTILITY) & (n < design.max)
        stop_futile &= design.futility and look + 1 >= FUTILITY_FROM_LOOK
        futile |= stop_futile
        used = np.where(inside | outside | stop_futile, n, used)
        active &= ~(inside | outside | stop_futile)
    return {"outcome": outcome, "used": used, "futile": futile}


def fixed_directional(x: np.ndarray, alpha: float) -> np.ndarray:
    """Today's rule at all `max` seeds: the sign where the paired t-test has p < alpha."""
    test = stats.ttest_1samp(x, 0.0, axis=-1)
    return np.where(test.pvalue < alpha, np.sign(x.mean(axis=-1)), 0).astype(int)


def fixed_tie(x: np.ndarray, margin: float) -> np.ndarray:
    """Today's tie rule at all `max` seeds: +1 when the 95% t-interval lies inside the margin."""
    n = x.shape[-1]
    half = stats.t.ppf(0.975, n - 1) * x.std(axis=-1, ddof=1) / math.sqrt(n)
    mean = x.mean(axis=-1)
    return np.where((-margin < mean - half) & (mean + half < margin), 1, 0)


def rate(hits: np.ndarray) -> dict[str, float]:
    """A proportion with its Monte Carlo standard error."""
    p = float(hits.mean())
    return {"rate": p, "mc_se": math.sqrt(p * (1 - p) / hits.size) if hits.size else 0.0}


def null_checks(
    reps: int, design: Design, rng: np.random.Generator, families: tuple[int, ...] = (1, 3)
) -> list[dict[str, Any]]:
    """False decisions under the null, with a look after every step up to max (no futility
    stop): directional claims with no effect (one claim, and Holm families of several: the
    family-wise rate), a tie whose true difference equals its margin (false "reproduced") or is
    0 (false "contradicted"). `reps` claims each (families: reps families)."""
    design = replace(design, futility=False)
    rows = []
    for noise in ("normal", "t3"):
        for claims in families:
            found = directional(draws(rng, (reps, claims, design.max), noise), design)
            rows.append(
                {
                    "noise": noise,
                    "check": f"no effect, {claims} claim(s): any false decision",
                    "claims": reps * claims,
                    "runs": reps,
                    **rate((found["sign"] != 0).any(axis=1)),
                }
            )
        margin = 0.5
        at_margin = tie(margin + draws(rng, (reps, design.max), noise), margin, design)
        rows.append(
            {
                "noise": noise,
                "check": f"tie, difference = margin = {margin}: reproduced",
                "claims": reps,
                "runs": reps,
                **rate(at_margin["outcome"] == 1),
            }
        )
        inside = tie(draws(rng, (reps, design.max), noise), margin, design)
        rows.append(
            {
                "noise": noise,
                "check": f"tie, difference 0, margin {margin}: contradicted",
                "claims": reps,
                "runs": reps,
                **rate(inside["outcome"] == -1),
            }
        )
    return rows


def power_table(
    reps: int, design: Design, rng: np.random.Generator, effects: tuple[float, ...]
) -> list[dict[str, Any]]:
    """Per effect (paired-sd units, one directional claim): the sequential design's rate of the
    right decision, of the wrong sign, of futility and its mean seeds, beside the fixed design."""
    rows = []
    for noise in ("normal", "t3"):
        for effect in effects:
            x = effect + draws(rng, (reps, 1, design.max), noise)
            found = directional(x, design)
            sign = found["sign"][:, 0]
            fixed = fixed_directional(x[:, 0], design.alpha)
            always = directional(x, replace(design, futility=False))
            rows.append(
                {
                    "noise": noise,
                    "effect": effect,
                    "power": float((sign == 1).mean()),
                    "wrong_sign": float((sign == -1).mean()),
                    "futile": float(found["futile"].mean()),
                    "mean_seeds": float(found["used"].mean()),
                    "no_futility_power": float((always["sign"][:, 0] == 1).mean()),
                    "no_futility_seeds": float(always["used"].mean()),
                    "fixed_power": float((fixed == 1).mean()),
                    "fixed_seeds": design.max,
                }
            )
    return rows


def markdown(result: dict[str, Any]) -> str:
    """The null checks and the power table as markdown tables."""
    lines = [
        "| noise | check | claims | false-decision rate | MC se | alpha + 2 se |",
        "|---|---|---:|---:|---:|---:|",
    ]
    alpha = result["design"]["alpha"]
    for row in result["null"]:
        bound = alpha + 2 * math.sqrt(alpha * (1 - alpha) / row["runs"])
        lines.append(
            f"| {row['noise']} | {row['check']} | {row['claims']} | {row['rate']:.4f} "
            f"| {row['mc_se']:.4f} | {bound:.4f} |"
        )
    lines += [
        "",
        "| noise | effect (sd) | sequential: power | wrong sign | futile | mean seeds "
        "| without futility: power | mean seeds | fixed: power | seeds |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["power"]:
        lines.append(
            f"| {row['noise']} | {row['effect']:g} | {row['power']:.3f} | {row['wrong_sign']:.4f} "
            f"| {row['futile']:.3f} | {row['mean_seeds']:.1f} | {row['no_futility_power']:.3f} "
            f"| {row['no_futility_seeds']:.1f} | {row['fixed_power']:.3f} | {row['fixed_seeds']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20_000)
    parser.add_argument("--initial", type=int, default=3)
    parser.add_argument("--step", type=int, default=3)
    parser.add_argument("--max", type=int, default=24)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--markdown", action="store_true", help="Print markdown tables.")
    args = parser.parse_args()
    design = Design(args.initial, args.step, args.max, args.alpha)
    rng = np.random.default_rng(args.seed)
    result = {
        "design": vars(args),
        "null": null_checks(args.reps, design, rng),
        "power": power_table(args.reps, design, rng, (0.0, 0.5, 1.0, 2.0, 5.0)),
    }
    print(markdown(result) if args.markdown else json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
