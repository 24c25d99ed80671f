"""`layerbench plan SUITE --design`: the operating characteristics of a suite's seed schedule
per claim before it runs (`harness.claims.design`, docs/sequential.md)."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from harness.claims.design import DesignRow, operating_characteristics, rule_of, schedule_of
from harness.console import console
from harness.stats.design import EFFECTS

if TYPE_CHECKING:
    from harness.core import TrialOutcome
    from harness.spec import Suite

RULE_NAMES = {
    "planned": "planned looks: t-test and exact sign test must agree, alpha spent by "
    "O'Brien-Fleming shares",
    "anytime": "unplanned looks: anytime t-mixture and sign e-process must agree",
    "planned_t": "fixed seeds: paired t-test",
}


def trial_seconds(outcomes: list[TrialOutcome], pilot_s: float | None) -> tuple[float | None, str]:
    """Seconds a trial takes: the pilot figure if given, else the median wall time of the
    suite's stored trials; and where it came from."""
    if pilot_s is not None:
        return pilot_s, "pilot figure (--pilot-s)"
    walls = [o.wall_time_s for o in outcomes if o.wall_time_s]
    if walls:
        return float(statistics.median(walls)), f"median of {len(walls)} stored trials"
    return None, "no stored trial and no --pilot-s: CPU-minutes unknown"


def design_lines(
    suite: Suite, outcomes: list[TrialOutcome], reps: int, pilot_s: float | None
) -> list[str]:
    """The design report: the schedule, the rule, the Holm family, then one block per claim."""
    schedule = schedule_of(suite)
    seconds, source = trial_seconds(outcomes, pilot_s)
    rows = operating_characteristics(suite, reps)
    family = sum(r.claim.recipes for r in rows if r.claim.kind == "directional")
    lines = [
        f"design of {suite.suite}: looks at n = {schedule.sizes} (max {schedule.max}), "
        f"alpha {schedule.alpha}; {RULE_NAMES[rule_of(suite)]}",
        f"Holm family: {family} directional check(s) (every claim x recipe); a tie claim's "
        f"recipes at alpha / recipes each; {reps} simulated families a row; trial time: {source}",
    ]
    if not rows:
        lines.append("no claims and no baseline: nothing is compared (initial seeds only)")
    for row in rows:
        lines += claim_lines(row, seconds)
    return lines


def claim_lines(row: DesignRow, seconds: float | None) -> list[str]:
    """One claim: its worst false-decision rate over the null families, power and seeds."""
    claim = row.claim
    worst = max(row.false_rate, key=lambda name: row.false_rate[name])
    what = "false reproduced at the margin" if claim.kind == "tie" else "family-wise false decision"
    lines = [
        f"{claim.label} ({claim.recipes} recipe(s)): {what} at most "
        f"{row.false_rate[worst]:.3f} (worst null: {worst}; normal {row.false_rate['normal']:.3f})"
    ]
    header = "margin (sd)" if claim.kind == "tie" else "effect (sd)"
    lines.append(f"  {header:>12} {'power':>7} {'seeds':>6} {'CPU-min':>8}")
    for effect, (hit, seeds) in row.power.items():
        cpu = "?" if seconds is None else f"{seeds * 2 * claim.recipes * seconds / 60:.0f}"
        mark = "" if effect in EFFECTS else "  (paper's effect)"
        lines.append(f"  {effect:>12g} {hit:>7.2f} {seeds:>6.1f} {cpu:>8}{mark}")
    return lines


def print_design(
    suite: Suite, outcomes: list[TrialOutcome], reps: int, pilot_s: float | None
) -> None:
    """Print `design_lines`."""
    console.print(
        "\n".join(design_lines(suite, outcomes, reps, pilot_s)),
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
