"""The sequential decision of a suite's claims (`seeds: {initial, max, step}`,
docs/sequential.md): verdicts on paired differences over the looks, futility, and the record of
each check, from `harness.stats.planned` and `harness.stats.sequential`.

The estimand of a directional claim is "the method is better on most seeds" (P(win) > 1/2),
and its error control holds for any distribution of the differences (skewed, heavy-tailed,
methods that fail on some seeds): a check is decided only where the paired t-test and the exact
sign test agree (the sign test alone carries the guarantee; the t-test, valid for the mean under
normality, keeps a decision from resting on signs alone). Per (claim, recipe):

- planned looks (a schedule's default, `looks: planned`): look k of the schedule's n = initial,
  initial + step, ..., max gets the O'Brien-Fleming share w_k of alpha (Lan & DeMets, 1983) as a
  weighted Bonferroni split; the check's p-value is min_k max(p_t, p_sign)_k / w_k. Look k is
  round k's: the pairs among seeds below n_k, so a missing pair (a trial that crashed or timed
  out) leaves each look at its round and share rather than pulling a later round's seed in;
- unplanned looks (`looks: unplanned`, seeds added by hand): the anytime t-mixture confidence
  sequence (Lai, 1976; Wang & Ramdas, 2023) and the sign e-process must both reach 1/alpha;
- directional (`better` / `worse`): the p-values of the suite's directional checks are
  Holm-adjusted together; adjusted p < alpha decides the sign: **reproduced** or
  **contradicted**. The interval shown is the mean difference's at alpha / m (m = directional
  checks; the running intersection of the looks' t intervals at alpha w_k / m, or the
  confidence sequence at alpha / m for unplanned looks);
- `tie` (two one-sided tests): the interval at each look (each side at alpha' w_k, or the
  confidence sequence at alpha') inside (-margin, margin) and, for planned looks, both one-sided
  sign tests (d < margin and d > -margin on most seeds) at alpha' w_k: **reproduced**; wholly
  beyond a margin with its sign test: **contradicted**. A tie claim checked in r recipes is one
  family: alpha' = alpha / r (Bonferroni: the claim "ties in every recipe" needs each), in its
  intervals, sign tests and the narrowest margin `max` seeds could confirm (`detectable`);
- futility: a check not yet decided stops when its conditional power is below `FUTILITY`: the
  probability, under the current mean and sd as the truth, that the interval at `max` seeds
  decides (normal approximation of the remaining seeds' mean), from its second look on.
  Stopping for futility never decides anything, so it cannot raise the error rates. The
  smallest effect `max` seeds could detect is s * max(h(max) + z_0.8 / sqrt(max), d_sign), h(max)
  the final look's half-width in sds, d_sign the effect at which the last look's sign test
  passes with probability 0.8 (normal differences; infinite where even max of max seeds of one
  sign cannot pass it: the check is not `decidable`).

Error rates and power at every findings suite's schedule: `benchmarks/sequential.py
--design-tables`, `layerbench plan SUITE --design`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from harness.stats.paired import holm
from harness.stats.planned import (
    anytime_majority,
    final_sign_test,
    planned_p,
    robust_p,
    sign_log_e,
    sign_majority,
    spending_weights,
    t_half_factor,
    tie_look,
)
from harness.stats.sequential import (
    FUTILITY,
    FUTILITY_FROM_LOOK,
    Kind,
    Looks,
    conditional_power,
    detectable_effect,
    half_width_factor,
    look_sizes,
    rounds_begun,
    running_bounds,
)

Stopped = Literal["decided", "futile", "max"]
LookPlan = Literal["planned", "unplanned"]


@dataclass(frozen=True)
class SequentialCheck:
    """What the sequential design says of one (claim, recipe): recorded in rank JSON."""

    n: int
    looks: int
    level: float
    """The level of `interval` (`check_levels`: alpha / m for a directional check, alpha / r
    for a tie of a claim checked in r recipes)."""
    interval: tuple[float | None, float | None]
    p_adjusted: float | None
    """The rule's p-value of 0, Holm-adjusted over the suite's directional checks (None for a
    tie): under planned looks min_k p_k / w_k, valid for the schedule's looks only, not an
    anytime p-value; under unplanned looks the anytime-valid one (module doc)."""
    stopped: Stopped | None
    """decided, futile, max, or None while seeds may still be added."""
    conditional_power: float | None
    detectable: float | None
    """The smallest |difference| max seeds could detect (module doc), in the metric's units."""
    cpu_s: float = 0.0
    """Wall seconds of the two methods' trials of this recipe (one worker each), every sweep
    point."""
    looks_plan: LookPlan = "planned"
    """planned: the schedule's looks with O'Brien-Fleming alpha shares; unplanned: anytime."""
    kind: Kind = "directional"
    """A tie's `detectable` is the narrowest margin max seeds could confirm."""
    p_raw: float | None = None
    """The rule's p-value of 0 before Holm (directional checks): what a wider family, such as
    every claim of a findings page (`harness.claims.page`), adjusts."""
    missing: int = 0
    """Seeds run without a pair (a trial of either method crashed or timed out): infrastructure,
    so a check whose schedule is run to `max` is at max however many pairs it lacks."""
    max_n: int = 0
    sd: float | None = None
    """The schedule's max and the paired sd at the last look: what `detectable` is computed
    from, the reason an undecided check that stopped is untestable at this scale."""
    margin: float | None = None
    """A tie's margin."""
    decidable: bool = True
    """Whether some outcome of max seeds passes the rule's sign test at the last look's level
    (`harness.stats.planned.sign_detectable`): False, max seeds cannot decide the check."""


@dataclass(frozen=True)
class CheckInput:
    """One (claim, recipe) for the sequential rule: its kind, margin and paired differences
    (method - than, in seed order, pairs both methods finished)."""

    kind: Kind
    diffs: np.ndarray
    margin: float | None = None
    cpu_s: float = 0.0
    seeds: np.ndarray | None = None
    """The seed of each pair (its place in the schedule); None: 0, 1, ... (no pair missing)."""
    claim: int | None = None
    """The claim the check belongs to: the tie checks of one claim over its recipes form one
    family (None: a family of its own)."""
    ran: int | None = None
    """Seeds 0 .. ran - 1 have a stored trial of both methods, finished or not (crashed, timed
    out): the rounds run, whatever pairs they left; None: up to the last pair."""

    @property
    def seed_index(self) -> np.ndarray:
        return np.arange(self.diffs.size) if self.seeds is None else np.asarray(self.seeds)

    @property
    def extent(self) -> int:
        """The seeds the looks reach: `ran`, and at least every seed up to the last pair's."""
        last = int(self.seed_index.max()) + 1 if self.diffs.size else 0
        return max(self.ran or 0, last)

    @property
    def run(self) -> int:
        """Seeds 0 .. run - 1 are run for both methods (`ran`, default `extent`)."""
        return self.extent if self.ran is None else self.ran

    @property
    def missing(self) -> int:
        """Seeds the looks reach that have no pair (a trial crashed or timed out)."""
        return max(0, self.extent - self.diffs.size)


Outcome = Literal["positive", "negative", "inside", "outside"]
"""A decided check: the difference is above / below 0 (directional), or inside / outside the
margin (tie)."""


@dataclass(frozen=True)
class CheckDecision:
    """The sequential rule's outcome of one check (None: undecided) and its record."""

    outcome: Outcome | None
    record: SequentialCheck


def decide(
    checks: Sequence[CheckInput],
    alpha: float,
    initial: int,
    step: int,
    max_n: int,
    looks: LookPlan = "planned",
) -> list[CheckDecision]:
    """The sequential verdicts of a suite's checks together (Holm over the directional ones).
    Each look is a planned round's: over the pairs among its seeds, with its alpha share."""
    observed = [
        Looks.of(c.diffs, rounds_begun(c.extent, initial, step, max_n), c.seed_index)
        for c in checks
    ]
    plan = look_sizes(max_n, initial, step)
    rule = Rule(looks, spending_weights(plan, max_n, alpha), max_n, tuple(plan))
    directional = [i for i, c in enumerate(checks) if c.kind == "directional"]
    raw = [rule.p(observed[i]) for i in directional]
    adjusted = dict(zip(directional, map(float, holm(raw)), strict=True)) if raw else {}
    unadjusted = dict(zip(directional, raw, strict=True))
    levels = check_levels(checks, alpha)
    return [
        _decision(check, look, (adjusted.get(i), unadjusted.get(i)), alpha, level, rule)
        for i, (check, look, level) in enumerate(zip(checks, observed, levels, strict=True))
    ]


def check_levels(checks: Sequence[CheckInput], alpha: float) -> list[float]:
    """The level of each check's interval (module doc): alpha / m for a directional check (m
    directional checks: Holm's strictest), alpha / r for a tie of a claim checked in r recipes
    (Bonferroni: "ties in every recipe" needs each)."""
    m = max(1, sum(c.kind == "directional" for c in checks))
    recipes = Counter(c.claim for c in checks if c.kind == "tie")
    return [
        alpha / m
        if c.kind == "directional"
        else alpha / (recipes[c.claim] if c.claim is not None else 1)
        for c in checks
    ]


@dataclass(frozen=True)
class Rule:
    """The decision rule of a schedule (module doc): planned looks with their alpha shares, or
    anytime-valid looks."""

    looks: LookPlan
    weights: np.ndarray
    max_n: int
    plan: tuple[int, ...]
    """The planned rounds n_k, one a weight."""

    def shares(self, looks: Looks) -> np.ndarray:
        """The alpha share of each look: its planned round's (0 past the plan)."""
        share = dict(zip(self.plan, self.weights, strict=True))
        return np.array([share.get(n, 0.0) for n in looks.rounds], dtype=float)

    def per_look(self, looks: Looks) -> np.ndarray:
        """Planned looks: each look's p-value of 0 (t and sign must agree,
        `harness.stats.planned`)."""
        sizes = np.array(looks.sizes)
        return robust_p(sizes, looks.means, looks.sds, looks.wins, looks.losses)

    def p(self, looks: Looks) -> float:
        """The check's p-value of 0: t and sign must agree (`harness.stats.planned`)."""
        if not looks.sizes:
            return 1.0
        if self.looks == "planned":
            return float(planned_p(self.per_look(looks), self.shares(looks)))
        wins, losses = looks.wins[-1], looks.losses[-1]
        if np.sign(looks.means[-1]) != np.sign(wins - losses):
            return 1.0
        sign = float(min(1.0, np.exp(-np.max(sign_log_e(looks.wins, looks.losses)))))
        return max(looks.anytime_p(), sign)

    def direction(self, looks: Looks, low: float, high: float) -> Outcome:
        """The side of 0 a decided directional check is on: planned, that of the look whose
        p_k / w_k decided it (a later look may go the other way, not undoing the decision);
        unplanned, that of its running interval, which excludes 0."""
        if self.looks == "planned":
            with np.errstate(divide="ignore"):
                ratios = self.per_look(looks) / self.shares(looks)
            mean = looks.means[int(np.argmin(ratios))]
        else:
            mean = 1.0 if low > 0 else -1.0 if high < 0 else looks.means[-1]
        return "positive" if mean > 0 else "negative"

    def factors(self, looks: Looks, level: float, tie: bool) -> np.ndarray:
        """Half-widths in sds of the check's interval at each look (each side at `level` for
        a tie, two-sided `level` otherwise)."""
        sizes = np.array(looks.sizes)
        if self.looks == "unplanned":
            return half_width_factor(sizes, level)
        return t_half_factor(sizes, (2 if tie else 1) * level * self.shares(looks))

    def final_level(self, level: float) -> float:
        """The level of the last look: `level` times its share (planned), `level` (unplanned)."""
        planned = self.looks == "planned" and self.weights.size
        return level * float(self.weights[-1]) if planned else level

    def final_factor(self, level: float, tie: bool) -> float:
        """The half-width factor at `max_n` (conditional power and detectable effects)."""
        if self.looks == "unplanned":
            return float(half_width_factor(self.max_n, level))
        return float(t_half_factor(self.max_n, (2 if tie else 1) * self.final_level(level)))


def _tie_outcome(
    check: CheckInput, looks: Looks, rule: Rule, alpha: float
) -> tuple[Outcome | None, tuple[float, float]]:
    """A tie's outcome and its running interval at `alpha` (the claim's alpha / recipes): per
    look (`harness.stats.planned.tie_look`), the first look that decides."""
    margin = check.margin or 0.0
    factors = rule.factors(looks, alpha, tie=True)
    shares = rule.shares(looks) if rule.looks == "planned" else None
    seeds = check.seed_index
    lows, highs = running_bounds(looks.means, looks.sds, factors)
    outcome: Outcome | None = None
    for k, n in enumerate(looks.sizes):
        first = check.diffs[seeds < looks.rounds[k]]
        inside, outside = tie_look(
            n,
            (np.array((first < margin).sum()), np.array((first > -margin).sum())),
            (lows[k], highs[k]),
            margin,
            sign_majority(alpha * float(shares[k]))
            if shares is not None
            else anytime_majority(alpha),
        )
        if outcome is None and bool(inside):
            outcome = "inside"
        elif outcome is None and bool(outside):
            outcome = "outside"
    return outcome, (float(lows[-1]), float(highs[-1]))


def _decision(
    check: CheckInput,
    looks: Looks,
    ps: tuple[float | None, float | None],
    alpha: float,
    level: float,
    rule: Rule,
) -> CheckDecision:
    """One check's outcome and record; `ps`: its Holm-adjusted and raw p (directional);
    `level`: its interval's (`check_levels`)."""
    p, p_raw = ps
    tie = check.kind == "tie"
    decided: Outcome | None = None
    if tie and looks.sizes:
        decided, (low, high) = _tie_outcome(check, looks, rule, level)
    else:
        low, high = (
            looks.intersection(rule.factors(looks, level, tie=False))
            if looks.sizes
            else (-np.inf, np.inf)
        )
        if p is not None and p < alpha and looks.sizes:
            decided = rule.direction(looks, low, high)
    final = rule.final_factor(level, tie)
    power = (
        float(
            conditional_power(
                check.kind,
                check.run,
                looks.means[-1],
                looks.sds[-1],
                rule.max_n,
                level,
                check.margin,
                final,
            )
        )
        if looks.sizes and decided is None
        else None
    )
    stopped: Stopped | None = None
    if decided is not None:
        stopped = "decided"
    elif check.run >= rule.max_n:  # the last planned round is run, whatever pairs it left
        stopped = "max"
    elif power is not None and power < FUTILITY and len(looks.sizes) >= FUTILITY_FROM_LOOK:
        stopped = "futile"
    sd = float(looks.sds[-1]) if looks.sizes else np.nan
    last_sign = final_sign_test(rule.final_level(level), tie, rule.looks == "planned")
    detectable = detectable_effect(sd, rule.max_n, level, final, check.kind, last_sign)
    record = SequentialCheck(
        looks.n,
        len(looks.sizes),
        level,
        (_finite(low), _finite(high)),
        p,
        stopped,
        power,
        _finite(detectable) if detectable is not None else None,
        check.cpu_s,
        rule.looks,
        check.kind,
        p_raw,
        check.missing,
        rule.max_n,
        _finite(sd),
        check.margin,
        detectable is None or bool(np.isfinite(detectable)),
    )
    return CheckDecision(decided, record)


def _finite(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def describe(record: SequentialCheck) -> str:
    """How a check's seeds ended, for tables and the Findings page: "n = 6, 2 looks, futile,
    120 CPU-s", "n = 8, 3 looks, at max (1 pair missing), 240 CPU-s"."""
    looks = f"{record.looks} look{'s' if record.looks != 1 else ''}"
    state = {
        "decided": "decided",
        "max": "at max",
        "futile": "futile",
        None: "open (more seeds would be added)",
    }[record.stopped]
    missing = f" ({missing_pairs(record)})" if record.missing else ""
    return f"n = {record.n}, {looks}, {state}{missing}, {record.cpu_s:.0f} CPU-s"


def missing_pairs(record: SequentialCheck) -> str:
    """ "2 pairs missing" (trials crashed or timed out), empty without."""
    if not record.missing:
        return ""
    return f"{record.missing} pair{'s' if record.missing != 1 else ''} missing"


def verdict_note(record: SequentialCheck | None, detectable: bool = True) -> str:
    """What an inconclusive verdict adds under sequential seeds: "futile at n = 6; the smallest
    effect max seeds could detect: 0.031", or "at max (n = 6); ..." where the seeds ran out
    ("at max (n = 8, 1 pair missing)" where trials crashed or timed out; without `detectable`,
    the state alone: the verdict states it; empty while seeds would still be added)."""
    if record is None or record.stopped not in ("futile", "max"):
        return ""
    shown = "unknown" if record.detectable is None else f"{record.detectable:.3g}"
    counted = ", ".join(filter(None, [f"n = {record.n}", missing_pairs(record)]))
    state = f"futile at {counted}" if record.stopped == "futile" else f"at max ({counted})"
    if not detectable:
        return state
    what = (
        "the narrowest margin max seeds could confirm"
        if record.kind == "tie"
        else "the smallest effect max seeds could detect"
    )
    return f"{state}; {what}: {shown}"


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
    "sequential seeds: t-test and exact sign test must agree, alpha spent over the planned "
    "looks (O'Brien-Fleming shares; anytime-valid t and sign e-processes for unplanned looks), "
    "Holm over the directional claims, intervals at alpha / (directional checks), a tie "
    "claim's recipes one Bonferroni family (each at alpha / recipes); docs/sequential.md"
)
