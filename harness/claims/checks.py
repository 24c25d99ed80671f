"""Verdicts of a suite's published claims (`expect`) from its outcomes.

A claim says `method` is `better`, `worse` or a `tie` than `than` on `metric`. It is checked on
each of its recipes (the suite's models it lists; default: every model on which both methods
ran), on every task where both ran, with the trials the ranking reports (sweep points tuned on
`rank.tune_metric` the way `rank.tuning` says, `harness.stats.outcomes.select_tuned`).

Per recipe, over the seeds both methods finished (`harness.stats`):

- **Failures.** A diverged seed loses every comparison: a method with more diverged seeds than
  the other (where the other finished) loses (`decided_by = "failures"`). A crash or a timeout
  is an infrastructure failure, never a loss: the check uses the seeds both methods finished and
  counts the seeds it `excluded`.
- **Degenerate.** Every task declares the level of a trivial predictor (`harness.tasks.trivial`:
  the unigram loss of an `lm` task's training split, a synthetic task's chance level, an lm-eval
  task's chance accuracy). A finished seed whose value is not better than that level by more
  than `TRIVIAL_MARGIN` of it "stays at the trivial predictor". When **both** methods stay there
  on most of their finished seeds, the check is **not tested** (degenerate): no p-value, no
  seeds needed, and it is left out of the Holm family. When only one does, the verdict stands
  and the check says on how many seeds it stays there (`at_trivial`).
- `better` / `worse`: the two-sided paired t-test; the p-values of the suite's directional
  checks (the Holm family, stated in the findings header) are Holm-adjusted together (Holm,
  1979). **reproduced** when the adjusted p < alpha and the difference goes the expected way,
  **contradicted** when it is significant the other way, else **inconclusive**. Beside the
  adjusted p, the matching interval: the Student-t interval at level 1 - alpha * p / p_Holm,
  which excludes 0 exactly when p_Holm < alpha (Holm's procedure has no simultaneous intervals;
  this one is the Bonferroni-type interval at the multiplier Holm applied to this check).
- `tie` (equivalence, two one-sided tests at alpha each, Schuirmann, 1987): **reproduced** when
  the 1 - 2 alpha interval (90% at alpha 0.05) lies inside +-margin, **contradicted** when it
  lies wholly outside, else **inconclusive**; an unequal count of diverged seeds contradicts a
  tie. Ties are not in the Holm family.
- Secondary statistics, so one catastrophic seed is visible: the median paired difference and
  the exact two-sided sign test (a binomial test of the positive differences among the nonzero
  ones).
- Seeds needed, for inconclusive checks whose observed difference has the claimed sign only: the
  seeds at which a paired t-test has 80% power to detect the observed difference (Cohen, 1988)
  at alpha / (the size of the Holm family), the level the first of them must pass; for a tie,
  to exclude the nearer margin (margin - |difference|) at alpha. Where the difference points
  the other way (or lies outside a tie's margin) more seeds would not reproduce the claim, and
  the check says so (`needed_note`).

With sequential seeds (`seeds: {initial, max, step}`), the interval, p-value and verdict of each
tested check are instead the anytime-valid ones of `harness.claims.sequential` (`decided_by =
"sequential"`, the look record in `sequential`), valid however many looks the run took; a
degenerate check is left out of it (not tested, no further seeds).

The claim's verdict over its recipes: `harness.claims.verdicts`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime

import numpy as np

from harness.claims.decision import PairedCheck, decide_check
from harness.claims.exploratory import exploratory_note
from harness.claims.sequential import CheckDecision, CheckInput, decide
from harness.claims.verdicts import Finding, RecipeCheck, claim_verdict
from harness.core import Direction, TrialOutcome
from harness.registry import METRICS
from harness.spec.rank import Claim, SeedSchedule, Tuning, tuning_seeds
from harness.stats.intervals import finite_or_none, row_stds, t_ci
from harness.stats.outcomes import SeedMatrix, seed_matrix, select_tuned
from harness.stats.paired import holm, paired_test
from harness.tasks.trivial import trivial_name

TRIVIAL_MARGIN = 0.02
"""A value within this fraction of the trivial predictor's level (or worse) stays at it."""
TrivialLevels = Mapping[str, Mapping[str, float]]
"""Task -> metric -> the trivial predictor's value."""


def findings(
    outcomes: Iterable[TrialOutcome],
    claims: Sequence[Claim],
    *,
    baseline: str | None,
    metric: str,
    tune_metric: str | None = None,
    tuning: Tuning = "per_method",
    alpha: float = 0.05,
    models: Sequence[str] = (),
    trivial: TrivialLevels | None = None,
    schedule: SeedSchedule | None = None,
    registered: Sequence[datetime | None] = (),
    ended: Mapping[str, datetime] | None = None,
) -> list[Finding]:
    """The verdict of each claim (see the module doc). `metric` is the default of claims that
    name none; `models` orders recipes of claims that list none (default: sorted); `trivial`
    gives each task's trivial predictor's values (a trial's own `trivial_name(metric)` result
    takes precedence; without either, no check is degenerate); `schedule`: the suite's
    sequential seeds, if any (sweep points are then chosen on its initial seeds);
    `registered` (per claim) and `ended` (trial key -> end time) mark exploratory claims
    (`harness.claims.exploratory`)."""
    tune_metric = tune_metric or metric
    outcomes = list(outcomes)
    tuned_on = tuning_seeds(schedule)
    tuned = select_tuned(
        outcomes, tune_metric, METRICS.get(tune_metric).direction, tuning, tuned_on
    )
    levels = _levels(outcomes, trivial or {})
    pending = [
        _with_cpu(check, claim, baseline, outcomes)
        for index, claim in enumerate(claims)
        for check in _checks(index, claim, tuned, baseline, metric, alpha, models, levels)
    ]
    if schedule is not None:
        found = _sequential_findings(claims, pending, baseline, metric, alpha, schedule)
        return _marked(found, claims, baseline, registered, outcomes, ended or {})
    family = [
        i
        for i, c in enumerate(pending)
        if claims[c.claim].direction != "tie" and c.p is not None and not c.degenerate
    ]
    adjusted = dict(
        zip(family, map(float, holm([float(pending[i].p or 0.0) for i in family])), strict=True)
    )
    each = alpha / max(1, len(family))  # Holm's strictest level: what seeds needed must reach
    checks = [
        decide_check(claims[c.claim], c, adjusted.get(i), alpha, each)
        for i, c in enumerate(pending)
    ]
    found = _by_claim(claims, pending, checks, baseline, metric)
    return _marked(found, claims, baseline, registered, outcomes, ended or {})


def _marked(
    found: list[Finding],
    claims: Sequence[Claim],
    baseline: str | None,
    registered: Sequence[datetime | None],
    outcomes: list[TrialOutcome],
    ended: Mapping[str, datetime],
) -> list[Finding]:
    """The findings with their exploratory notes (`harness.claims.exploratory`)."""
    if not registered:
        return found
    return [
        replace(f, exploratory=exploratory_note(c, c.than or baseline, when, outcomes, ended))
        for f, c, when in zip(found, claims, registered, strict=True)
    ]


def _sequential_findings(
    claims: Sequence[Claim],
    pending: list[PairedCheck],
    baseline: str | None,
    metric: str,
    alpha: float,
    schedule: SeedSchedule,
) -> list[Finding]:
    """The findings under sequential seeds (`harness.claims.sequential.decide`); degenerate
    checks are not tested and take no part in it."""
    tested = [i for i, c in enumerate(pending) if not c.degenerate]
    inputs = [
        CheckInput(
            "tie" if claims[pending[i].claim].direction == "tie" else "directional",
            pending[i].diffs,
            claims[pending[i].claim].margin,
            pending[i].cpu_s,
            pending[i].seeds,
            pending[i].claim,
            pending[i].ran,
        )
        for i in tested
    ]
    decisions: dict[int, CheckDecision] = dict(
        zip(
            tested,
            decide(inputs, alpha, schedule.initial, schedule.step, schedule.max, schedule.looks),
            strict=True,
        )
    )
    checks = [
        decide_check(claims[c.claim], c, None, alpha, alpha, decisions.get(i))
        for i, c in enumerate(pending)
    ]
    return _by_claim(claims, pending, checks, baseline, metric)


def _by_claim(
    claims: Sequence[Claim],
    pending: list[PairedCheck],
    checks: list[RecipeCheck],
    baseline: str | None,
    metric: str,
) -> list[Finding]:
    """One finding per claim, holding the checks (per recipe) that belong to it."""
    return [
        _finding(
            index,
            claim,
            baseline,
            metric,
            [c for c, p in zip(checks, pending, strict=True) if p.claim == index],
        )
        for index, claim in enumerate(claims)
    ]


def _with_cpu(
    check: PairedCheck, claim: Claim, baseline: str | None, outcomes: list[TrialOutcome]
) -> PairedCheck:
    """The check with the wall seconds of its two methods' trials on its recipe."""
    methods = {claim.method, claim.than or baseline}
    spent = sum(
        o.wall_time_s or 0.0
        for o in outcomes
        if o.method in methods and o.model == check.model and o.task == check.task
    )
    return replace(check, cpu_s=float(spent))


def _levels(outcomes: list[TrialOutcome], trivial: TrivialLevels) -> dict[str, dict[str, float]]:
    """Task -> metric -> trivial level: the declared ones, overridden by the trials' own."""
    levels = {task: dict(by_metric) for task, by_metric in trivial.items()}
    for outcome in outcomes:
        for name, value in outcome.metrics.items():
            if name.endswith(trivial_name("")):
                levels.setdefault(outcome.task, {})[name.removesuffix(trivial_name(""))] = value
    return levels


def stays_at_trivial(values: np.ndarray, level: float, direction: Direction) -> np.ndarray:
    """Which finite values are not better than `level` by more than `TRIVIAL_MARGIN` of it."""
    slack = TRIVIAL_MARGIN * abs(level)
    return np.asarray(direction.gain(values - level) <= slack, dtype=bool)


def _checks(
    index: int,
    claim: Claim,
    tuned: list[TrialOutcome],
    baseline: str | None,
    default_metric: str,
    alpha: float,
    models: Sequence[str],
    levels: Mapping[str, Mapping[str, float]],
) -> list[PairedCheck]:
    than = claim.than or baseline
    if than is None:  # a suite without a baseline names `than` (validated)
        return []
    metric = claim.metric or default_metric
    direction = METRICS.get(metric).direction
    pair = [o for o in tuned if o.method in (claim.method, than)]
    ran = {(o.method, o.model, o.task) for o in pair}
    order = list(claim.recipes or models or sorted({o.model for o in pair}))
    found = []
    for model in order:
        for task in sorted({o.task for o in pair if o.model == model}):
            if (claim.method, model, task) not in ran or (than, model, task) not in ran:
                continue
            members = [o for o in pair if o.model == model and o.task == task]
            matrix = seed_matrix(members, metric)
            level = levels.get(task, {}).get(metric)
            recipe = (model, task)
            found.append(_pending(index, claim, matrix, recipe, than, direction, alpha, level))
    return found


def _pending(
    index: int,
    claim: Claim,
    pair: SeedMatrix,
    recipe: tuple[str, str],
    than: str,
    direction: Direction,
    alpha: float,
    level: float | None,
) -> PairedCheck:
    i, j = pair.methods.index(claim.method), pair.methods.index(than)
    both = ~np.isnan(pair.values[i]) & ~np.isnan(pair.values[j])
    diffs = np.where(both, pair.values[i] - pair.values[j], np.nan)[None, :]
    paired = pair.present[i] & pair.present[j]
    failures = (
        int((pair.failed[i] & ~pair.failed[j] & paired).sum()),
        int((pair.failed[j] & ~pair.failed[i] & paired).sum()),
    )
    n = int(both.sum())
    ci_level = 1 - 2 * alpha if claim.direction == "tie" else 1 - alpha
    low, high = (float(x[0]) for x in t_ci(diffs, ci_level)) if n >= 2 else (np.nan, np.nan)
    p = float(paired_test(pair.values[i], pair.values[j])[0]) if n >= 2 else None
    delta = float(np.nanmean(diffs)) if n else None
    sd = float(row_stds(diffs)[0]) if n >= 2 else np.nan
    favours = direction.sign(delta)
    excluded = int((pair.excluded[i] | pair.excluded[j]).sum())
    finished = ~np.isnan(pair.values[[i, j]])
    at = np.zeros(2, dtype=int)
    if level is not None:
        rows = pair.values[[i, j]]
        at = (finished & stays_at_trivial(np.nan_to_num(rows, nan=np.inf), level, direction)).sum(
            axis=1
        )
    return PairedCheck(
        claim=index,
        model=recipe[0],
        task=recipe[1],
        n=n,
        delta=delta,
        ci=(finite_or_none(low), finite_or_none(high)),
        p=p,
        favours=favours,
        failures=failures,
        sd=sd,
        diffs=diffs[0][both],
        excluded=excluded,
        trivial=level,
        at_trivial=(int(at[0]), int(at[1])),
        finished=(int(finished[0].sum()), int(finished[1].sum())),
        names=(claim.method, than),
        paper_effect=_paper_difference(claim, direction, pair.values[j]),
        seeds=np.asarray(pair.seeds)[both],
        ran=_seeds_run(pair, (i, j)),
    )


def _seeds_run(pair: SeedMatrix, rows: tuple[int, int]) -> int:
    """How many seeds from 0 on have a stored trial of both methods (finished, diverged,
    crashed or timed out): the rounds of the schedule run, whatever pairs they left."""
    stored = (pair.present | pair.excluded)[list(rows)].all(axis=0)
    run = {int(seed) for seed, ok in zip(pair.seeds, stored, strict=True) if ok}
    count = 0
    while count in run:
        count += 1
    return count


def _paper_difference(claim: Claim, direction: Direction, than: np.ndarray) -> float | None:
    """The paper's effect as a difference method - than in the metric's units (the claimed
    direction's sign; a relative effect times `than`'s mean), or None."""
    effect = claim.paper_effect
    if effect is None or claim.direction == "tie" or not np.isfinite(np.nanmean(than)):
        return None
    size = effect.value * (abs(float(np.nanmean(than))) if effect.relative else 1.0)
    claimed = 1 if claim.direction == "better" else -1
    return float(claimed * direction.sign(1.0) * size)


def _finding(
    index: int,
    claim: Claim,
    baseline: str | None,
    default_metric: str,
    checks: list[RecipeCheck],
) -> Finding:
    verdict, differs = claim_verdict(checks)
    return Finding(
        index,
        claim.method,
        claim.than or baseline or "",
        claim.metric or default_metric,
        claim.direction,
        claim.margin,
        claim.source,
        claim.note,
        checks,
        verdict,
        differs,
        claim.scope,
    )
