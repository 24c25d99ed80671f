"""Regression detection over nightly runs: pure statistics, no database (docs/nightly.md).

Per (method, model, task, metric), a nightly run is compared with a baseline window of earlier
nightly runs on the same host class. A change is *flagged* when all of these hold:

1. it exceeds the tolerance: |new mean - window mean| > `tolerance` (relative to |window mean|, or
   absolute in the metric's units);
2. it is significant against the previous baseline run, paired by seed: a two-sided paired t-test
   (Student 1908; `scipy.stats.ttest_rel`) gives p < the suite's alpha, and the mean paired
   difference points the same way as the change (differences equal up to rounding: p = 0, or 1
   if they are all zero);
3. it lies outside the window's mean +- z sigma, sigma the standard deviation of the window runs'
   means (Conbench's lookback z-score; z = inf when the window has no spread beyond float
   rounding and the change is not zero).

A flagged change is `suspected` until `confirm` consecutive runs are flagged the same way
(PyTorch HUD's confirmation), then it is a `regression` (worse) or an `improvement` (better).
Runs with a pending suspicion stay out of the baseline window, so a step change is compared with
the level before it; after a confirmed change the window restarts at the first flagged run (the
new level is the baseline, as asv's step detection segments a history). A seed whose tuned trial
was done in the previous run and is diverged, failed or timed out now is a `status` alert,
always counted as a regression. A suite's `expect` claim whose verdict (reproduced, contradicted,
inconclusive, flipped...: `harness.claims`) differs from the previous run's is a `verdict`
alert, reported and not counted as a regression.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from harness.claims import Finding
from harness.core import CellKey, Direction
from harness.records import DONE
from harness.spec.schema import RegressionSpec
from harness.stats.intervals import finite_or_none, t_ci
from harness.stats.paired import ROUNDING, paired_test

Cell = CellKey
Key = tuple[str, str, str, str]  # (method, model, task, metric)
CONFIRMED = ("regression", "improvement")
STREAK_KINDS = ("regression", "suspected", "improvement")
"""The alert kinds whose streaks detection follows from run to run."""
STATUS_METRIC = "status"


@dataclass(frozen=True)
class RunValues:
    """What detection needs of one nightly run: per key, the value of each seed's tuned trial."""

    run_id: int
    git_commit: str | None
    packages: Mapping[str, str]
    values: Mapping[Key, Mapping[int, float]]  # done seeds with a finite value
    statuses: Mapping[Cell, Mapping[int, str]]  # every seed's status


@dataclass(frozen=True)
class PastAlert:
    """An alert stored for an earlier run: what detection needs to follow a streak."""

    kind: str
    direction: str
    since_run: int  # the first run of the streak it belongs to


@dataclass(frozen=True)
class Change:
    """One alert of the current run (not yet stored)."""

    key: Key
    kind: str  # regression | suspected | improvement | status | verdict
    direction: str  # worse | better | changed (a verdict)
    old_mean: float | None = None
    old_ci: tuple[float | None, float | None] = (None, None)
    new_mean: float | None = None
    new_ci: tuple[float | None, float | None] = (None, None)
    delta: float | None = None
    percent: float | None = None
    p_value: float | None = None
    z: float | None = None
    tolerance: float | None = None
    commit_before: str | None = None
    commit_after: str | None = None
    detail: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class Comparison:
    """The statistics of one key's new values against its baseline window."""

    window_mean: float
    window_sd: float
    window_ci: tuple[float | None, float | None]
    new_mean: float
    new_ci: tuple[float | None, float | None]
    delta: float
    p_value: float | None
    paired_diff: float | None
    n_pairs: int
    z: float
    tolerance: float

    def flagged(self, rules: RegressionSpec, alpha: float) -> bool:
        """Beyond the tolerance, significant by seed against the previous run, outside z sigma."""
        agrees = self.paired_diff is not None and self.paired_diff * self.delta > 0
        significant = self.p_value is not None and self.p_value < alpha and agrees
        return abs(self.delta) > self.tolerance and significant and abs(self.z) > rules.z


def t_interval(values: Sequence[float], alpha: float) -> tuple[float | None, float | None]:
    """The (1 - alpha) Student-t interval of the mean; None for n < 2 (no spread to measure)."""
    low, high = t_ci(np.asarray(values, dtype=float), level=1.0 - alpha)
    return finite_or_none(low), finite_or_none(high)


def paired_p(
    new: Mapping[int, float], old: Mapping[int, float]
) -> tuple[float | None, float | None]:
    """Two-sided paired t-test by seed: (p, mean difference new - old); None below 2 pairs."""
    seeds = sorted(new.keys() & old.keys())
    if len(seeds) < 2:
        return None, None
    p, mean_diff = paired_test(np.array([new[s] for s in seeds]), np.array([old[s] for s in seeds]))
    return finite_or_none(p), finite_or_none(mean_diff)


def compare(
    new: Mapping[int, float],
    window: Sequence[Mapping[int, float]],
    rules: RegressionSpec,
    alpha: float,
) -> Comparison:
    """New seed values against the window's runs (oldest first; the last is the previous run)."""
    means = [float(np.mean(list(run.values()))) for run in window]
    window_mean, window_sd = float(np.mean(means)), float(np.std(means, ddof=1))
    new_mean = float(np.mean(list(new.values())))
    delta = new_mean - window_mean
    p_value, paired_diff = paired_p(new, window[-1])
    if window_sd > ROUNDING * abs(window_mean):
        z = delta / window_sd
    else:
        z = math.copysign(math.inf, delta) if delta != 0.0 else 0.0
    tolerance = rules.tolerance * abs(window_mean)
    if rules.tolerance_kind == "absolute":
        tolerance = rules.tolerance
    return Comparison(
        window_mean,
        window_sd,
        t_interval(means, alpha),
        new_mean,
        t_interval(list(new.values()), alpha),
        delta,
        p_value,
        paired_diff,
        len(new.keys() & window[-1].keys()),
        z,
        tolerance,
    )


def worse(delta: float, direction: Direction) -> bool:
    return direction.gain(delta) < 0


def baseline(
    key: Key, history: Sequence[RunValues], alerts: Mapping[tuple[int, Key], PastAlert]
) -> list[RunValues]:
    """The earlier runs that form `key`'s baseline, oldest first (before the window cut).

    The current level starts at the first run of the last confirmed change; runs flagged after
    it (a pending suspicion) are left out."""
    start, confirmed_at = 0, -1
    positions = {run.run_id: i for i, run in enumerate(history)}
    for i, run in enumerate(history):
        past = alerts.get((run.run_id, key))
        if past is not None and past.kind in CONFIRMED:
            start, confirmed_at = positions.get(past.since_run, i), i
    return [
        run
        for i, run in enumerate(history[start:], start)
        if key in run.values and (i <= confirmed_at or (run.run_id, key) not in alerts)
    ]


def streak_start(
    key: Key,
    direction: str,
    history: Sequence[RunValues],
    alerts: Mapping[tuple[int, Key], PastAlert],
) -> tuple[int, int]:
    """(runs flagged `direction` just before this one, the first of them) for a pending streak."""
    count, first = 0, -1
    for run in reversed(history):
        past = alerts.get((run.run_id, key))
        if past is None or past.kind != "suspected" or past.direction != direction:
            break
        count, first = count + 1, run.run_id
    return count, first


def detect_key(
    key: Key,
    current: RunValues,
    history: Sequence[RunValues],
    alerts: Mapping[tuple[int, Key], PastAlert],
    rules: RegressionSpec,
    alpha: float,
    direction: Direction,
) -> Change | None:
    """The alert for one key of the current run, if its change is flagged."""
    new = current.values.get(key)
    window = baseline(key, history, alerts)[-rules.window :]
    if not new or len(window) < 2:
        return None
    stats_ = compare(new, [run.values[key] for run in window], rules, alpha)
    if not stats_.flagged(rules, alpha):
        return None
    way = "worse" if worse(stats_.delta, direction) else "better"
    count, first = streak_start(key, way, history, alerts)
    confirmed = count + 1 >= rules.confirm
    kind = ("regression" if way == "worse" else "improvement") if confirmed else "suspected"
    previous = window[-1]
    mean = stats_.window_mean
    return Change(
        key=key,
        kind=kind,
        direction=way,
        old_mean=mean,
        old_ci=stats_.window_ci,
        new_mean=stats_.new_mean,
        new_ci=stats_.new_ci,
        delta=stats_.delta,
        percent=100.0 * stats_.delta / abs(mean) if mean else None,
        p_value=stats_.p_value,
        z=stats_.z,
        tolerance=stats_.tolerance,
        commit_before=previous.git_commit,
        commit_after=current.git_commit,
        detail={
            "since_run": first if count else current.run_id,
            "flagged_runs": count + 1,
            "window_runs": [run.run_id for run in window],
            "window_sd": stats_.window_sd,
            "previous_run": previous.run_id,
            "n_pairs": stats_.n_pairs,
            "packages_changed": changed_packages(previous.packages, current.packages),
        },
    )


def status_changes(current: RunValues, previous: RunValues) -> list[Change]:
    """A `status` alert per (method, model, task) with a seed done before and not done now."""
    changes = []
    for cell, statuses in current.statuses.items():
        before = previous.statuses.get(cell, {})
        seeds = {
            str(seed): [before[seed], status]
            for seed, status in sorted(statuses.items())
            if before.get(seed) == DONE and status != DONE
        }
        if seeds:
            changes.append(
                Change(
                    key=(*cell, STATUS_METRIC),
                    kind="status",
                    direction="worse",
                    commit_before=previous.git_commit,
                    commit_after=current.git_commit,
                    detail={
                        "seeds": seeds,
                        "previous_run": previous.run_id,
                        "packages_changed": changed_packages(previous.packages, current.packages),
                    },
                )
            )
    return changes


def verdict_changes(
    now: Sequence[Finding],
    before: Sequence[Finding],
    current: RunValues,
    previous: RunValues,
) -> list[Change]:
    """A `verdict` alert per claim whose verdict differs from the previous run's. Its key names
    the claim's method, recipes (models), tasks and metric; the detail has both verdicts and the
    new checks (delta, CI, p, seeds needed per recipe)."""
    earlier = {finding.index: finding for finding in before}
    alerts = []
    for finding in now:
        old = earlier.get(finding.index)
        if old is None or old.verdict == finding.verdict:
            continue
        models = ", ".join(dict.fromkeys(check.model for check in finding.checks))
        tasks = ", ".join(dict.fromkeys(check.task for check in finding.checks))
        alerts.append(
            Change(
                key=(finding.method, models, tasks, finding.metric),
                kind="verdict",
                direction="changed",
                commit_before=previous.git_commit,
                commit_after=current.git_commit,
                detail={
                    "claim": finding.claim,
                    "than": finding.than,
                    "source": finding.source,
                    "verdicts": [old.verdict_text, finding.verdict_text],
                    "checks": [asdict(check) for check in finding.checks],
                    "previous_run": previous.run_id,
                    "packages_changed": changed_packages(previous.packages, current.packages),
                },
            )
        )
    return alerts


def changed_packages(before: Mapping[str, str], after: Mapping[str, str]) -> dict[str, list[str]]:
    """Package -> [old version, new version] for each that differs."""
    return {
        name: [before.get(name, "absent"), after.get(name, "absent")]
        for name in sorted(before.keys() | after.keys())
        if before.get(name) != after.get(name)
    }


def detect(
    current: RunValues,
    history: Sequence[RunValues],
    alerts: Mapping[tuple[int, Key], PastAlert],
    rules: RegressionSpec,
    alpha: float,
    directions: Mapping[str, Direction],
) -> list[Change]:
    """Every alert of the current run against `history` (earlier runs, oldest first)."""
    changes = status_changes(current, history[-1]) if history else []
    for key in current.values:
        change = detect_key(key, current, history, alerts, rules, alpha, directions[key[3]])
        if change is not None:
            changes.append(change)
    return changes
