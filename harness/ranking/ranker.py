"""`rank`: outcomes -> a `Ranking` (rows per (task, model) group, the overall summary).

- Groups. Statistics are per (task, model) group, per method, over seeds, after the sweep
  points are tuned (`harness.stats.outcomes.select_tuned`). A task whose finished trials do
  not report the metric is left out (a perplexity task has no `acc`).
- Per group (`harness.ranking.groups`): mean, sd, the 95% CI (`rank.ci`), the paired test vs
  the baseline (Holm-adjusted over the group's methods), verdict, seeds needed for a tie, the
  HELM win rate, the rank (methods with no finished seed last; then win rate, fewer failed
  seeds, better mean, name), the tie group (the ranks the Holm-adjusted pairwise tests allow,
  `harness.stats.ties`), and the median steps and time to target with their CIs.
- Overall (`rank.aggregate`, a statistic of `harness.registry.AGGREGATES`, implemented in
  `harness.ranking.aggregates`): mean win rate over groups (HELM; Liang et al., 2022), mean
  rank, `normalized` (mean over groups of the method's mean / the baseline's mean, HELM's
  normalized score), or the AlgoPerf performance profile score (below). The summary is sorted
  by it.
- Performance profile (Dahl et al., 2023). A workload is a (task, model) group; a method's time
  on it is the median over its seeds of the least train time to the target, a seed that never
  reaches it counting as infinite. r = time / the best method's time on the workload. The score
  integrates rho(tau) = (1/n) #{workloads with r <= tau} over tau in [1, 4], normalized:
  B = 1/(3n) sum_w max(0, 4 - r_w), in [0, 1] (1: the fastest on every workload).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from harness.core import CellKey, Direction, GroupKey, Status, TrialOutcome, cell_of
from harness.ranking.aggregates import Standing, scores
from harness.ranking.groups import Group, GroupRules, build_group, group_rows, median_times
from harness.ranking.outcomes import fastest_hits, sweep_sizes
from harness.ranking.records import MethodSummary, Ranking, RankRow
from harness.ranking.ties import with_tie_groups
from harness.registry import METRICS
from harness.spec.rank import RankSpec
from harness.stats.examples import ExampleOutcomes
from harness.stats.intervals import BOOTSTRAP_MIN_N
from harness.stats.outcomes import select_tuned, swept

R_MAX = 4.0
"""AlgoPerf's largest performance ratio: a method slower than 4x the best scores 0 there."""


def rank(
    outcomes: Iterable[TrialOutcome],
    spec: RankSpec | str,
    baseline: str | None,
    *,
    examples: ExampleOutcomes | None = None,
    n_bootstrap: int = 2000,
    tuned_on: int | None = None,
) -> Ranking:
    """Rank the methods per (task, model) group and overall (see the module doc), the way the
    suite's `rank` section `spec` says (a metric name: that metric, every other field at its
    default).

    `examples` (trial key -> metric -> example id -> value) gives example-level intervals and
    tests to groups with one seed per method. A baseline without outcomes is dropped with a
    warning. `tuned_on`: sweep points are chosen on these first seeds (a suite with sequential
    seeds: its initial ones, `select_tuned`). Raises `UnknownNameError` for an unknown metric.
    """
    spec = RankSpec(metric=spec) if isinstance(spec, str) else spec
    metric, target = spec.metric, spec.target
    direction = METRICS.get(metric).direction
    tune_metric = spec.tune_metric or metric
    outcomes = list(outcomes)
    tuned = select_tuned(
        outcomes, tune_metric, METRICS.get(tune_metric).direction, spec.tuning, tuned_on
    )
    warnings = _warnings(outcomes, tuned, baseline, spec)
    if baseline is not None and all(o.method != baseline for o in tuned):
        baseline = None
    hits = None
    if target is not None:
        hits = fastest_hits(outcomes, target, METRICS.get(target.metric).direction)
    groups = _groups(tuned, metric, hits, examples, spec.tuning == "per_method")
    rules = GroupRules(
        metric=metric,
        direction=direction,
        baseline=baseline,
        alpha=spec.alpha,
        ci=spec.ci,
        n_bootstrap=n_bootstrap,
    )
    rows = [row for group in groups for row in group_rows(group, rules)]
    methods = sorted({o.method for o in tuned})
    profiles = _profiles(groups, methods) if target else {}
    summary = _summarize(rows, baseline, profiles, spec.aggregate, direction)
    rows, summary = with_tie_groups(rows, summary, groups, spec.alpha, direction)
    return Ranking(
        metric=metric,
        direction=direction,
        baseline=baseline,
        rows=rows,
        summary=summary,
        target=target,
        ci=spec.ci,
        tuning=spec.tuning,
        tune_metric=tune_metric,
        aggregate=spec.aggregate,
        alpha=spec.alpha,
        warnings=warnings,
    )


def _warnings(
    outcomes: list[TrialOutcome], tuned: list[TrialOutcome], baseline: str | None, spec: RankSpec
) -> list[str]:
    ci, tuning, metric = spec.ci, spec.tuning, spec.metric
    tune_metric = spec.tune_metric or metric
    found: list[str] = []
    if baseline is not None and all(o.method != baseline for o in tuned):
        known = ", ".join(sorted({o.method for o in tuned}))
        found.append(f"the baseline '{baseline}' has no results here (methods: {known})")
    if ci != "t" and any(len(s) < BOOTSTRAP_MIN_N for s in _seeds(tuned).values()):
        found.append(
            f"{ci} intervals from fewer than {BOOTSTRAP_MIN_N} seeds cover the mean far less "
            "than 95% of the time; use rank.ci: t"
        )
    sizes = sweep_sizes(outcomes) if swept(outcomes) else {}
    several = any(size > 1 for size in sizes.values())
    if tuning == "per_seed" and several:
        found.append("per_seed tuning picks each seed's best sweep point: optimistic")
    if tune_metric == metric and several:
        found.append(
            f"sweep points are chosen on {metric}, the reported metric; set rank.tune_metric "
            "to a held-out one"
        )
    found += _unequal_sweeps(sizes)
    return found


def _seeds(outcomes: list[TrialOutcome]) -> dict[CellKey, set[int]]:
    seeds: dict[CellKey, set[int]] = {}
    for outcome in outcomes:
        seeds.setdefault(cell_of(outcome), set()).add(outcome.seed)
    return seeds


def _unequal_sweeps(sizes: dict[CellKey, int]) -> list[str]:
    """A warning per (model, task) where the compared methods have different sweep sizes
    (`sizes`: `sweep_sizes` of the outcomes)."""
    by_cell: dict[GroupKey, dict[str, int]] = {}
    for (method, model, task), size in sizes.items():
        by_cell.setdefault(GroupKey(task, model), {})[method] = size
    return [
        f"{task} / {model}: sweep sizes differ ("
        + ", ".join(f"{method} {size}" for method, size in sorted(sizes.items()))
        + " points); a larger sweep wins more often by chance"
        for (task, model), sizes in sorted(by_cell.items())
        if len(set(sizes.values())) > 1
    ]


def _groups(
    tuned: list[TrialOutcome],
    metric: str,
    hits: Any,
    examples: ExampleOutcomes | None,
    per_method_points: bool,
) -> list[Group]:
    by_group: dict[tuple[str, str], list[TrialOutcome]] = {}  # (task, model): GroupKey's order
    for outcome in tuned:
        by_group.setdefault((outcome.task, outcome.model), []).append(outcome)
    return [
        build_group(task, model, members, metric, hits, examples, per_method_points)
        for (task, model), members in sorted(by_group.items())
        if _reports(members, metric)
    ]


def _reports(members: list[TrialOutcome], metric: str) -> bool:
    done = [outcome for outcome in members if outcome.status == Status.DONE]
    return not done or any(metric in outcome.metrics for outcome in done)


def _profiles(groups: list[Group], methods: list[str]) -> dict[str, dict[str, float]]:
    steps = [median_times(g, g.steps) for g in groups if g.steps is not None]
    times = [median_times(g, g.times) for g in groups if g.times is not None]
    return {"steps": profile_scores(steps, methods), "time": profile_scores(times, methods)}


def profile_scores(workloads: list[dict[str, float]], methods: Iterable[str]) -> dict[str, float]:
    """AlgoPerf benchmark score of each method: 1/(3n) sum over the n workloads of
    max(0, 4 - r), r = the method's time / the best time there (infinite when it has none)."""
    totals = dict.fromkeys(methods, 0.0)
    for times in workloads:
        best = min(times.values(), default=math.inf)
        if math.isfinite(best):
            for method, time in times.items():
                totals[method] += max(0.0, R_MAX - time / best)
    n = max(len(workloads), 1)
    return {method: total / ((R_MAX - 1) * n) for method, total in totals.items()}


def _normalized(rows: list[RankRow], baseline: str | None) -> dict[str, float | None]:
    """Mean over groups of mean / baseline mean; None where a group lacks either mean."""
    base = {(r.task, r.model): r.seeds.mean for r in rows if r.method == baseline}
    ratios: dict[str, list[float]] = {}
    missing: set[str] = set()
    for row in rows:
        reference = base.get((row.task, row.model))
        mean = row.seeds.mean
        if mean is None or not reference:
            missing.add(row.method)
        else:
            ratios.setdefault(row.method, []).append(mean / reference)
    return {
        method: None if method in missing else sum(found) / len(found)
        for method, found in ratios.items()
    } | dict.fromkeys(missing)


def _summarize(
    rows: list[RankRow],
    baseline: str | None,
    profiles: dict[str, dict[str, float]],
    aggregate: str,
    direction: Direction,
) -> list[MethodSummary]:
    """Each method's summary over its groups, best first by the overall statistic `aggregate`
    (`harness.ranking.aggregates`; missing scores last), then mean rank, then name."""
    by_method: dict[str, list[RankRow]] = {}
    for row in rows:
        by_method.setdefault(row.method, []).append(row)
    normalized = _normalized(rows, baseline) if baseline else {}
    standings = []
    for method, method_rows in by_method.items():
        rates = [row.win_rate for row in method_rows if row.win_rate is not None]
        summary = MethodSummary(
            method=method,
            mean_win_rate=sum(rates) / len(rates) if rates else None,
            mean_rank=sum(row.rank for row in method_rows) / len(method_rows),
            n_trials=sum(row.seeds.n for row in method_rows),
            n_failed=sum(row.seeds.n_failed for row in method_rows),
            normalized=normalized.get(method),
            profile_steps=profiles.get("steps", {}).get(method),
            profile_time=profiles.get("time", {}).get(method),
        )
        standings.append(Standing(summary, method_rows, direction))
    score = scores(aggregate, standings)
    return sorted(
        (s.summary for s in standings),
        key=lambda s: (score[s.method] is None, -(score[s.method] or 0.0), s.mean_rank, s.method),
    )
