"""A suite's design before it runs (`layerbench plan SUITE --design`, docs/sequential.md): per
claim, the operating characteristics of its seed schedule and Holm family by simulation
(`harness.stats.design`): the family-wise false-decision rate under every null family, power at
0.5-3 paired sd (and at the paper's effect in sds when a pilot sd is known), expected seeds and
CPU-minutes."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from harness.spec.rank import Claim
from harness.spec.resolve import matrix_cells
from harness.spec.schema import Suite
from harness.stats.design import EFFECTS, NULLS, Rule, Schedule, null_rate, power, tie

DEFAULT_REPS = 2_000
TIE_MARGIN_SD = 1.0
"""A tie's margin in paired sds when no pilot sd converts its margin (design tables)."""


@dataclass(frozen=True)
class ClaimDesign:
    """One claim of a suite as the design sees it: its label, kind and recipes (checks)."""

    label: str
    kind: str
    recipes: int
    margin: float | None = None


def design_claims(suite: Suite) -> list[ClaimDesign]:
    """The suite's `expect` claims, or (none) each method against the baseline, with the number
    of recipes (model, task) each is checked under."""
    cells = matrix_cells(suite)
    claims = list(suite.expect) or [
        Claim(method=m, than=suite.baseline, direction="better", source="baseline comparison")
        for m in dict.fromkeys(c[0] for c in cells)
        if suite.baseline is not None and m != suite.baseline
    ]
    found = []
    for claim in claims:
        than = claim.than or suite.baseline
        shared = {(mo, t) for me, mo, t in cells if me == claim.method} & {
            (mo, t) for me, mo, t in cells if me == than
        }
        if claim.recipes is not None:
            shared = {(mo, t) for mo, t in shared if mo in claim.recipes}
        label = f"{claim.method} {claim.direction} than {than}"
        kind = "tie" if claim.direction == "tie" else "directional"
        found.append(ClaimDesign(label, kind, max(1, len(shared)), claim.margin))
    return found


def schedule_of(suite: Suite) -> Schedule:
    """The suite's looks: its schedule, or one look at all its listed seeds (fixed design)."""
    alpha = suite.rank.alpha
    if suite.schedule is not None:
        s = suite.schedule
        return Schedule(s.initial, s.max, s.step, alpha)
    n = len(suite.seeds) if isinstance(suite.seeds, list) else 1
    return Schedule(max(2, n), max(2, n), 1, alpha)


def rule_of(suite: Suite) -> Rule:
    """The rule `rank` applies: planned looks unless the schedule says `looks: unplanned`; a
    seed list's fixed-n paired t-test (one look, `planned_t`)."""
    if suite.schedule is None:
        return "planned_t"
    return "anytime" if suite.schedule.looks == "unplanned" else "planned"


@dataclass(frozen=True)
class DesignRow:
    """The operating characteristics of one claim (rates over `reps` simulated families)."""

    claim: ClaimDesign
    false_rate: dict[str, float]
    """Null family -> family-wise false-decision rate (directional) or false "reproduced" (tie)."""
    power: dict[float, tuple[float, float]]
    """Effect (paired sd) -> (power, mean seeds) of one check."""


def operating_characteristics(
    suite: Suite, reps: int = DEFAULT_REPS, seed: int = 0, extra: tuple[float, ...] = ()
) -> list[DesignRow]:
    """Per claim of the suite, by simulation (module doc); `extra`: more effects in sds."""
    rng = np.random.default_rng(seed)
    schedule, rule = schedule_of(suite), rule_of(suite)
    claims = design_claims(suite)
    family = sum(c.recipes for c in claims if c.kind == "directional")
    effects = tuple(sorted({*EFFECTS, *extra}))
    rows = []
    for claim in claims:
        if claim.kind == "directional":
            false = {n: null_rate(reps, schedule, family, n, rule, rng)[0] for n in NULLS}
            shown = {e: power(reps, schedule, family, e, rule, rng) for e in effects}
        else:  # the claim's recipes are one Bonferroni family (`harness.claims.sequential`)
            each = replace(schedule, alpha=schedule.alpha / claim.recipes)
            false = {n: tie_rate(reps, each, n, rule, rng) for n in NULLS}
            shown = {e: tie_power(reps, each, e, rule, rng) for e in effects}
        rows.append(DesignRow(claim, false, shown))
    return rows


def tie_rate(
    reps: int, schedule: Schedule, null: str, rule: Rule, rng: np.random.Generator
) -> float:
    """A tie at its margin (the null's median there): the rate of a false "reproduced"."""
    from harness.stats.design import null_draws

    x = TIE_MARGIN_SD + null_draws(rng, (reps, schedule.max), null)
    return float((tie(x, TIE_MARGIN_SD, schedule, rule) == 1).mean())


def tie_power(
    reps: int, schedule: Schedule, margin_sd: float, rule: Rule, rng: np.random.Generator
) -> tuple[float, float]:
    """(P(reproduced), max seeds) of a tie whose true difference is 0 and margin `margin_sd`."""
    x = rng.standard_normal((reps, schedule.max))
    return float((tie(x, margin_sd, schedule, rule) == 1).mean()), float(schedule.max)
