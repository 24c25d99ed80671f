"""What a claim's checks found: the record of each recipe's check (`RecipeCheck`), the claim's
`Finding`, and the words of their verdicts. How a check is decided: `harness.claims.checks`.

A claim's verdict over its tested recipes: their common verdict; **flipped** when one recipe
reproduces it and another contradicts it (significant in opposite directions); **recipe-
dependent** when it is decided in one recipe and inconclusive in another (`differs_on` names
the recipes whose verdict differs from the first's, the paper's, listed first); **not tested**
when every recipe is degenerate.

An undecided check whose seeds stopped (futile or at max) says why: **untestable at this scale**
where the suite's max seeds could not have decided it (the paper's effect, or with none declared
any effect, below the smallest they detect; a tie's margin narrower than the narrowest they
confirm), else "undecided (futile)" with what its interval shows (`RecipeCheck.excludes`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from harness.claims.sequential import SequentialCheck, summary, verdict_note
from harness.spec.rank import ClaimDirection

CheckVerdict = Literal["reproduced", "contradicted", "inconclusive", "not tested"]
ClaimVerdict = Literal[
    "reproduced",
    "contradicted",
    "inconclusive",
    "flipped",
    "recipe-dependent",
    "compatible",
    "not tested",
    "no data",
]
NOT_TESTED: CheckVerdict = "not tested"
DEGENERATE = "degenerate: both stay at the trivial predictor"
OTHER_WAY = "the observed difference points the other way"
IMPLICIT_SOURCE = "each method against the baseline (sequential seeds, no `expect` claims)"
"""The source of the comparisons a sequential suite without claims steers its seeds by: each
method against the baseline, decided either way, so its verdicts read better / worse."""
IMPLICIT_WORDS = {"reproduced": "better", "contradicted": "worse"}
OUTSIDE_MARGIN = "the observed difference lies outside the margin"
NOT_AT_SCALE = "not reproduced at this scale"
UNTESTABLE = "untestable at this scale"
"""An undecided check whose seeds stopped (futile or at max) where the suite's max seeds could
not have decided the claim: the paper's effect (or, none declared, any effect) is below what
max seeds detect, or a tie's margin below the narrowest they confirm."""
UNDECIDED = "undecided"
"""An undecided check whose seeds stopped with no such reason (`RecipeCheck.excludes`)."""
STOPPED_WORDS = {"futile": "futile", "max": "at max"}
UNTRAINED = "an arm does not train"
"""A decided check one of whose methods stays at the trivial predictor: counted apart from
decisions between two trained models."""


@dataclass(frozen=True)
class RecipeCheck:
    """A claim on one (model, task): the paired difference method - than and its verdict."""

    model: str
    task: str
    n: int
    """Seeds both methods finished."""
    delta: float | None
    ci_low: float | None
    ci_high: float | None
    """The unadjusted interval at `ci_level` (95%; a tie's 1 - 2 alpha, 90%)."""
    p_value: float | None
    """Holm-adjusted over the suite's directional checks; None for a tie or without a test."""
    seeds_needed: int | None
    verdict: CheckVerdict
    decided_by: Literal["test", "interval", "failures", "sequential"] | None = None
    failed: tuple[int, int] = (0, 0)
    """Seeds (of method, of than) that diverged where the other finished."""
    sequential: SequentialCheck | None = None
    """With sequential seeds: n, looks, how it stopped, the interval's level, CPU seconds."""
    ci_level: float = 0.95
    p_raw: float | None = None
    """The unadjusted two-sided p-value."""
    holm_ci: tuple[float | None, float | None] | None = None
    holm_level: float | None = None
    """The interval matching the Holm-adjusted p, and its level (`harness.claims.checks`)."""
    median_delta: float | None = None
    sign_p: float | None = None
    """Exact two-sided sign test of the paired differences."""
    signs: tuple[int, int] = (0, 0)
    """Paired differences (above 0, below 0)."""
    excluded: int = 0
    """Seeds left out because either method crashed or timed out there."""
    trivial: float | None = None
    """The task's trivial predictor's value of the metric (None: unknown)."""
    at_trivial: tuple[int, int] = (0, 0)
    finished: tuple[int, int] = (0, 0)
    """Finished seeds (of method, of than) that stay at the trivial predictor, and of how many."""
    needed_note: str | None = None
    """Why an inconclusive check has no seeds needed (e.g. `OTHER_WAY`)."""
    names: tuple[str, str] = ("", "")
    """The compared methods (method, than)."""
    implicit: bool = False
    """A comparison with the baseline, not a claim (`IMPLICIT_SOURCE`): verdicts read
    better / worse."""
    paper_effect: float | None = None
    """The paper's effect as a difference method - than (`expect[].paper_effect`)."""

    @property
    def excludes(self) -> str:
        """What an undecided check's interval rules out: "not reproduced at this scale: the
        interval excludes the paper's effect (-0.05)" where it lies short of it, "the interval
        lies beyond the paper's effect" where every value in it is larger in the claimed
        direction, else the mean's interval against 0 or "rules out differences outside
        [-0.01, +0.02]"; once its seeds stopped (futile or at max), why they could not decide
        (`_stopped_text`, `tie_stopped_text`); empty when decided or without an interval."""
        low, high = self.ci_low, self.ci_high
        if self.verdict != "inconclusive" or low is None or high is None:
            return ""
        shown, record = f"[{low:+.3g}, {high:+.3g}]", self.sequential
        stopped = STOPPED_WORDS.get(str(record.stopped), "") if record else ""
        if record is not None and stopped and record.kind == "tie":
            return tie_stopped_text(record, stopped, (low, high))
        signs = f"the sign test ({self.signs[0]}/{self.signs[1]}) does not decide"
        signs += "" if stopped else " yet: more seeds of one sign"
        effect = self.paper_effect
        if effect is not None and not low <= effect <= high:
            paper = f"the paper's effect ({effect:+.3g})"
            if (low > effect) == (effect < 0):  # the interval is on 0's side of the effect
                return f"{NOT_AT_SCALE}: the interval {shown} excludes {paper}"
            return _stopped(stopped, f"the interval {shown} lies beyond {paper}, {signs}")
        if record is not None and stopped and not record.decidable:
            return f"{undecidable(record)}; the interval rules out differences outside {shown}"
        if low > 0 or high < 0:
            also = "" if stopped else self._contains_effect("")
            text = f"the mean's interval {shown} excludes 0, {signs}{also}"
            if record is not None and stopped and self._below_detectable(record):
                return f"{self._detects(record)}; {text}"
            return _stopped(stopped, text)
        if record is not None and stopped:
            return self._stopped_text(record, stopped, shown)
        return f"rules out differences outside {shown}" + self._contains_effect("0 and ")

    def _stopped_text(self, record: SequentialCheck, stopped: str, shown: str) -> str:
        """A directional check whose seeds stopped with an interval around 0: "untestable at
        this scale: max 9 seeds detect effects of 0.08 or more (paired sd 0.05), the paper's
        effect is -0.03" where the paper's effect (or, none declared, any) is below what max
        seeds detect (`SequentialCheck.detectable`); else "undecided (futile): the interval
        [-0.2, +0.1] contains the paper's effect -0.15"."""
        effect, detectable, sd = self.paper_effect, record.detectable, record.sd
        if detectable is None or sd is None:
            return _stopped(stopped, f"rules out differences outside {shown}")
        detects = self._detects(record)
        if effect is None:  # a comparison with the baseline has no paper
            stated = "no claim states" if self.implicit else "the paper states no"
            return (
                f"{detects} and {stated} effect size; the interval rules out differences "
                f"outside {shown}"
            )
        if abs(effect) < detectable:
            return f"{detects}, the paper's effect is {effect:+.3g}"
        return _stopped(stopped, f"the interval {shown} contains the paper's effect {effect:+.3g}")

    def _below_detectable(self, record: SequentialCheck) -> bool:
        """Is the observed difference smaller than what max seeds detect (`detectable`)?"""
        detectable, delta = record.detectable, self.delta
        if detectable is None or delta is None or record.sd is None:
            return False
        return abs(delta) < detectable

    @staticmethod
    def _detects(record: SequentialCheck) -> str:
        """ "untestable at this scale: max 9 seeds detect effects of 0.08 or more (paired sd
        0.05)"."""
        return (
            f"{UNTESTABLE}: max {record.max_n} seeds detect effects of {record.detectable:.3g} "
            f"or more (paired sd {record.sd:.3g})"
        )

    def _contains_effect(self, also: str) -> str:
        """ " (it contains 0 and the paper's effect, +0.03)" where the claim declares one."""
        if self.paper_effect is None:
            return ""
        return f" (it contains {also}the paper's effect, {self.paper_effect:+.3g})"

    @property
    def sequential_note(self) -> str:
        """`verdict_note` of the check's sequential record (how its seeds stopped, what max
        seeds detect), without what the verdict already states (untestable at this scale)."""
        return verdict_note(self.sequential, not self.excludes.startswith(UNTESTABLE))

    @property
    def undecided_kind(self) -> str:
        """An undecided check's kind, as its label says: not reproduced or untestable at this
        scale, else undecided."""
        text = self.excludes
        return next((k for k in (NOT_AT_SCALE, UNTESTABLE) if text.startswith(k)), UNDECIDED)

    @property
    def degenerate(self) -> bool:
        return self.verdict == NOT_TESTED

    @property
    def annotation(self) -> str:
        """ "X stays at the trivial predictor on k of n seeds" for each method that does; plus
        the excluded seeds. Empty when there is nothing to add."""
        notes = [
            f"{name} stays at the trivial predictor on {k} of {n} seeds"
            for name, k, n in zip(self.names, self.at_trivial, self.finished, strict=True)
            if k and not self.degenerate
        ]
        if self.excluded:
            notes.append(f"{self.excluded} seeds excluded (crashed or timed out)")
        return "; ".join(notes)

    @property
    def verdict_text(self) -> str:
        if self.degenerate:
            return f"{NOT_TESTED} ({DEGENERATE})"
        word = IMPLICIT_WORDS.get(self.verdict, self.verdict) if self.implicit else self.verdict
        if self.excludes.startswith((NOT_AT_SCALE, UNTESTABLE, UNDECIDED)):
            return self.excludes
        if self.excludes:
            return f"{word}: {self.excludes}"
        if self.untrained_arm:
            word += f" ({UNTRAINED})"
        return word + (" (failures)" if self.decided_by == "failures" else "")

    @property
    def untrained_arm(self) -> str:
        """The arm of a decided check that stays at the trivial predictor on most seeds (a
        decision against a model that does not train, counted apart), or ""."""
        if self.verdict not in ("reproduced", "contradicted") or self.degenerate:
            return ""
        stuck = [
            name
            for name, k, n in zip(self.names, self.at_trivial, self.finished, strict=True)
            if n and 2 * k > n
        ]
        return stuck[0] if len(stuck) == 1 else ""


@dataclass(frozen=True)
class Finding:
    """A claim, its checks per recipe and its verdict."""

    index: int
    method: str
    than: str
    metric: str
    direction: ClaimDirection
    margin: float | None
    source: str
    note: str
    checks: list[RecipeCheck]
    verdict: ClaimVerdict
    differs_on: list[str] = field(default_factory=list)
    """Recipes whose verdict differs from the first tested recipe's."""
    scope: str = ""
    """The claim's `scope:` note, shown with the verdict."""
    exploratory: str = ""
    """Why the claim is exploratory (registered after trials it uses were stored,
    `harness.claims.exploratory`); empty for a confirmatory claim."""

    @property
    def implicit(self) -> bool:
        """A comparison with the baseline that no claim states (`IMPLICIT_SOURCE`)."""
        return self.source == IMPLICIT_SOURCE

    @property
    def claim(self) -> str:
        """The claim in words, e.g. "post-ln worse than pre-ln on val_loss", "rmsnorm ties
        layernorm (+-0.03) on val_loss"; a comparison no claim states: "lion against adamw on
        val_loss"."""
        if self.implicit:
            return f"{self.method} against {self.than} on {self.metric}"
        if self.direction == "tie":
            return f"{self.method} ties {self.than} (+-{self.margin:g}) on {self.metric}"
        return f"{self.method} {self.direction} than {self.than} on {self.metric}"

    @property
    def untested_on(self) -> list[str]:
        """Recipes where the claim is degenerate (both methods stay at the trivial predictor)."""
        return [recipe_label(c, self.checks) for c in self.checks if c.degenerate]

    @property
    def verdict_text(self) -> str:
        """The verdict with what qualifies it: the degenerate reason, the recipes it differs on,
        the recipes where it is not tested."""
        if self.verdict == NOT_TESTED:
            return f"{NOT_TESTED} ({DEGENERATE})"
        text = IMPLICIT_WORDS.get(self.verdict, self.verdict) if self.implicit else self.verdict
        if self.verdict == "flipped":
            text = f"flipped (significant the other way on {', '.join(self.differs_on)})"
        elif self.verdict == "recipe-dependent":
            text = f"recipe-dependent (differs on {', '.join(self.differs_on)})"
        elif self.verdict == "compatible":
            text = self._compatible_text()
        elif self.verdict == "inconclusive":
            text = "; ".join(
                f"{c.verdict_text} ({recipe_label(c, self.checks)})"
                for c in self.checks
                if not c.degenerate
            )
        if untested := self.untested_on:
            text += f"; not tested on {', '.join(untested)} (degenerate)"
        if self.scope:
            text += f"; scope: {self.scope}"
        if self.exploratory:
            text += f"; exploratory: {self.exploratory}"
        return text

    def _compatible_text(self) -> str:
        """ "reproduced in A, untestable at this scale in B (compatible: the intervals
        overlap)": each undecided recipe under its label's kind (`RecipeCheck.undecided_kind`)."""
        tested = [c for c in self.checks if not c.degenerate]
        decided = [c for c in tested if c.verdict in ("reproduced", "contradicted")]
        word = decided[0].verdict if decided else "decided"
        kinds: dict[str, list[str]] = {word: [recipe_label(c, self.checks) for c in decided]}
        for check in (c for c in tested if c not in decided):
            kinds.setdefault(check.undecided_kind, []).append(recipe_label(check, self.checks))
        listed = ", ".join(f"{kind} in {', '.join(where)}" for kind, where in kinds.items())
        return f"{listed} (compatible: the intervals overlap)"

    def to_dict(self) -> dict[str, Any]:
        checks = [
            asdict(c) | {"verdict_text": c.verdict_text, "annotation": c.annotation}
            for c in self.checks
        ]
        found = asdict(self) | {
            "claim": self.claim,
            "verdict_text": self.verdict_text,
            "checks": checks,
        }
        records = [c.sequential for c in self.checks if c.sequential is not None]
        if records:  # sequential seeds only: the fixed design's JSON has no such keys
            found["sequential"] = summary(records)
        else:
            for check in checks:
                del check["sequential"]
        return found


def tie_stopped_text(record: SequentialCheck, stopped: str, bounds: tuple[float, float]) -> str:
    """A tie whose seeds stopped undecided: "untestable at this scale: max 16 seeds confirm
    margins of 0.065 or wider, the claim's margin is 0.03" where its margin is narrower than
    `max` seeds could confirm (`SequentialCheck.detectable`); else "undecided (futile): the
    interval [-0.02, +0.05] crosses the margin +-0.03" (or lies inside or beyond it, and its
    sign tests do not decide)."""
    margin, detectable, (low, high) = record.margin or 0.0, record.detectable, bounds
    if not record.decidable:
        return f"{undecidable(record)}; the claim's margin is {margin:g}"
    if detectable is not None and detectable > margin:
        return (
            f"{UNTESTABLE}: max {record.max_n} seeds confirm margins of {detectable:.3g} or "
            f"wider, the claim's margin is {margin:g}"
        )
    if -margin < low and high < margin:
        where = f"lies inside the margin +-{margin:g}, its sign tests do not decide"
    elif low > margin or high < -margin:
        where = f"lies beyond the margin +-{margin:g}, its sign test does not decide"
    else:
        where = f"crosses the margin +-{margin:g}"
    return _stopped(stopped, f"the interval [{low:+.3g}, {high:+.3g}] {where}")


def undecidable(record: SequentialCheck) -> str:
    """Why a check max seeds cannot decide: "untestable at this scale: even 6 of max 6 seeds of
    one sign cannot pass the sign test at the last look's level"."""
    n = record.max_n
    return (
        f"{UNTESTABLE}: even {n} of max {n} seeds of one sign cannot pass the sign test at "
        "the last look's share of alpha (docs/sequential.md)"
    )


def _stopped(stopped: str, text: str) -> str:
    """ "undecided (futile): <text>" for a check whose seeds stopped; `text` while open."""
    return f"{UNDECIDED} ({stopped}): {text}" if stopped else text


def degenerate_pairs(found: Iterable[Finding]) -> set[tuple[str, str, str, str]]:
    """(method, than, model, task) of every degenerate check: comparisons that must get no
    further seeds (both methods stay at the trivial predictor)."""
    return {
        (finding.method, finding.than, check.model, check.task)
        for finding in found
        for check in finding.checks
        if check.degenerate
    }


def claim_verdict(checks: Sequence[RecipeCheck]) -> tuple[ClaimVerdict, list[str]]:
    """The claim's verdict over its recipes' checks, and the recipes whose verdict differs
    from the first tested one's (see the module doc)."""
    tested = [c for c in checks if not c.degenerate]
    if not checks:
        return "no data", []
    if not tested:
        return NOT_TESTED, []
    first = tested[0].verdict
    differs = [recipe_label(c, checks) for c in tested if c.verdict != first]
    found = {c.verdict for c in tested}
    if {"reproduced", "contradicted"} <= found:
        return "flipped", differs
    if len(found) > 1:
        return ("recipe-dependent" if _intervals_disjoint(tested) else "compatible"), differs
    return first, []


def _intervals_disjoint(checks: Sequence[RecipeCheck]) -> bool:
    """Some two recipes' intervals do not overlap: evidence that the recipes differ (else a
    verdict decided in one and not in another is compatible with one effect)."""
    bounds = [(c.ci_low, c.ci_high) for c in checks]
    known = [(lo, hi) for lo, hi in bounds if lo is not None and hi is not None]
    return bool(known) and max(lo for lo, _ in known) > min(hi for _, hi in known)


def recipe_label(check: RecipeCheck, checks: Sequence[RecipeCheck]) -> str:
    """The recipe's model, with the task where the claim is checked on several."""
    several = len({c.task for c in checks}) > 1
    return f"{check.model} on {check.task}" if several else check.model
