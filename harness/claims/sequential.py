"""The sequential decision of a suite's claims (`seeds: {initial, max, step}`,
docs/sequential.md): anytime-valid verdicts on paired differences, futility, and the record of
each check, from the confidence sequences of `harness.stats.sequential`.

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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from harness.stats.paired import holm
from harness.stats.sequential import Kind, Looks, conditional_power, detectable_effect

FUTILITY = 0.1
"""Below this conditional power a check gets no further seeds..."""
FUTILITY_FROM_LOOK = 2
"""...from its second look on: the sd of the initial seeds alone is too noisy to give up on."""
Stopped = Literal["decided", "futile", "max"]


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
