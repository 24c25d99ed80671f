"""Error rates and power of sequential seeds at every findings suite's own schedule and Holm
family (harness.stats.design, harness.claims.design), the tables of docs/sequential.md:

    python -m benchmarks.sequential --design-tables [--reps 10000] [--seed 0]

Per suite in suites/findings/ (its `seeds: {initial, max, step}`, its directional checks = the
Holm family, its ties):

1. the family-wise false-decision rate of the directional family under null families centred at
   the median (P(win) = 1/2, the null of the default estimand "better on most seeds"): normal,
   t3, centred exponential, centred lognormal, and 10/20/30% of seeds failing (docs); a look at
   every planned look, no futility stop (the worst case); for a tie-only suite, the rate of a
   false "reproduced" of a tie whose median difference sits at its margin. The default rule
   (planned looks) and `looks: unplanned` (anytime), each against alpha + 2 Monte Carlo se;
2. power at 1.5 paired sd (normal differences, one check, the rest of its family null, futility
   as `run` takes it) at the suite's max under the rule before issue 42 (anytime t-mixture),
   the default, unplanned looks, and planned looks with the t-test alone (not robust);
3. the same null families centred at the mean (the mean difference's null): how the rule before
   issue 42 and the default behave when the estimand is the mean (no assertion: no test of a
   mean is valid there without bounds on the differences; docs/sequential.md).

Prints markdown. tests/test_sequential.py runs table 1 with fewer families.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from harness.claims.design import TIE_MARGIN_SD, design_claims, schedule_of, tie_rate
from harness.spec.check import load_suite
from harness.spec.schema import Suite
from harness.stats.design import MEAN_CENTRED, NULLS, Rule, null_rate, power

ROOT = Path(__file__).resolve().parents[1]
FINDINGS = ROOT / "suites" / "findings"
RULES: dict[Rule, str] = {
    "planned": "planned (default)",
    "anytime": "unplanned (anytime)",
    "anytime_t": "before issue 42 (anytime t)",
    "planned_t": "planned, t alone",
}


def findings_suites() -> list[Suite]:
    """The suites of suites/findings/, in name order."""
    return [load_suite(path) for path in sorted(FINDINGS.glob("*.yaml"))]


def family_size(suite: Suite) -> int:
    """The suite's directional checks (claims x recipes): one Holm family."""
    return sum(c.recipes for c in design_claims(suite) if c.kind == "directional")


def null_row(
    suite: Suite, rule: Rule, reps: int, rng: np.random.Generator, centre: str = "median"
) -> dict[str, tuple[float, float]]:
    """Null family -> (false-decision rate, MC se): the directional family's, or (no
    directional claim) a tie's false "reproduced" at its margin."""
    schedule, family = schedule_of(suite), family_size(suite)
    if family == 0:
        rates = {n: tie_rate(reps, schedule, n, rule, rng) for n in NULLS}
        return {n: (p, math.sqrt(p * (1 - p) / reps)) for n, p in rates.items()}
    suffix = MEAN_CENTRED if centre == "mean" else ""
    return {n: null_rate(reps, schedule, family, n + suffix, rule, rng) for n in NULLS}


def bound(alpha: float, reps: int) -> float:
    """alpha + 2 Monte Carlo standard errors of a rate at alpha over `reps` families."""
    return alpha + 2 * math.sqrt(alpha * (1 - alpha) / reps)


def null_table(suites: list[Suite], reps: int, rng: np.random.Generator, centre: str) -> str:
    """Table 1 (median-centred) or 3 (mean-centred)."""
    rules: tuple[Rule, ...] = (
        ("planned", "anytime") if centre == "median" else ("anytime_t", "planned")
    )
    lines = [
        "| suite | looks (max) | Holm family | rule | " + " | ".join(NULLS) + " | alpha + 2 se |",
        "|---|---|---:|---|" + "---:|" * (len(NULLS) + 1),
    ]
    for suite in suites:
        schedule, family = schedule_of(suite), family_size(suite)
        what = f"{family} checks" if family else f"1 tie (margin {TIE_MARGIN_SD:g} sd)"
        for rule in rules:
            row = null_row(suite, rule, reps, rng, centre)
            cells = " | ".join(f"{p:.4f}" for p, _ in row.values())
            lines.append(
                f"| {suite.suite.removeprefix('findings-')} | {schedule.sizes} | {what} "
                f"| {RULES[rule]} | {cells} | {bound(schedule.alpha, reps):.4f} |"
            )
    return "\n".join(lines)


def power_table(suites: list[Suite], reps: int, rng: np.random.Generator) -> str:
    """Table 2: power (mean seeds) at 1.5 paired sd at each suite's max, per rule."""
    rules = tuple(RULES)
    lines = [
        "| suite | max | Holm family | " + " | ".join(RULES[r] for r in rules) + " |",
        "|---|---:|---:|" + "---:|" * len(rules),
    ]
    for suite in suites:
        schedule, family = schedule_of(suite), family_size(suite)
        if family == 0:
            continue
        cells = []
        for rule in rules:
            hit, seeds = power(reps, schedule, family, 1.5, rule, rng)
            cells.append(f"{hit:.3f} ({seeds:.1f})")
        lines.append(
            f"| {suite.suite.removeprefix('findings-')} | {schedule.max} | {family} | "
            + " | ".join(cells)
            + " |"
        )
    return "\n".join(lines)


POWER_GOAL = 0.8
"""Issue 42's acceptance: power at 1.5 paired sd at least 0.8."""


def seeds_table(suites: list[Suite], reps: int, rng: np.random.Generator) -> str:
    """Table 4: for each suite below `POWER_GOAL` at 1.5 sd under the default rule, the smallest
    `max` (same initial and step, the same Holm family) that reaches it."""
    lines = [
        "| suite | max | power at max | smallest max reaching 0.8 | its power (mean seeds) |",
        "|---|---:|---:|---:|---:|",
    ]
    for suite in suites:
        schedule, family = schedule_of(suite), family_size(suite)
        if family == 0:
            continue
        now = power(reps, schedule, family, 1.5, "planned", rng)[0]
        if now >= POWER_GOAL:
            continue
        for larger in range(schedule.max + 1, 31):
            hit, seeds = power(reps, replace(schedule, max=larger), family, 1.5, "planned", rng)
            if hit >= POWER_GOAL:
                break
        lines.append(
            f"| {suite.suite.removeprefix('findings-')} | {schedule.max} | {now:.3f} | "
            f"{larger} | {hit:.3f} ({seeds:.1f}) |"
        )
    return "\n".join(lines)


def design_tables(reps: int, seed: int) -> str:
    """The four tables of docs/sequential.md, with how they were made."""
    rng, start = np.random.default_rng(seed), time.perf_counter()
    suites = findings_suites()
    parts = [
        "Table 1: family-wise false-decision rate, nulls centred at the median "
        f"({reps} families a row)",
        null_table(suites, reps, rng, "median"),
        "",
        "Table 2: power at 1.5 paired sd at the suite's max (mean seeds), normal differences",
        power_table(suites, reps, rng),
        "",
        "Table 3: the same nulls centred at the mean (the mean difference's null)",
        null_table(suites, reps, rng, "mean"),
        "",
        "Table 4: the seeds that would reach power 0.8 at 1.5 paired sd under the default rule",
        seeds_table(suites, reps, rng),
        "",
        f"({time.perf_counter() - start:.0f} s, seed {seed})",
    ]
    return "\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--design-tables", action="store_true", help="The tables (default).")
    parser.add_argument("--reps", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(design_tables(args.reps, args.seed))


if __name__ == "__main__":
    main()
