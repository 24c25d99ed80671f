"""Tests of harness.ranking: statistics on hand-made outcomes and the export formats."""

from __future__ import annotations

import csv
import io
import json
import math

import numpy as np
import pytest
from scipy import stats

from harness.core import Direction
from harness.lazy_registry import RegistryError
from harness.ranking import (
    Ranking,
    RankRow,
    TrialOutcome,
    format_ranking,
    group_table,
    rank,
    rich_table,
)
from harness.spec.rank import RankSpec
from harness.stats.outcomes import select_tuned
from harness.stats.paired import holm, paired_test
from tests.factories import outcomes, scipy_percentile_ci

ROW_KEYS = [
    "task",
    "model",
    "metric",
    "method",
    "mean",
    "std",
    "n",
    "n_done",
    "n_failed",
    "ci_low",
    "ci_high",
    "delta",
    "p_value",
    "verdict",
    "win_rate",
    "rank",
    "failure",
    "n_excluded",
    "decided_by",
    "seeds_needed",
    "sweep",
    "unit",
    "trials",
    "n_reached",
    "steps_to_target",
    "steps_ci_low",
    "steps_ci_high",
    "time_to_target",
    "time_ci_low",
    "time_ci_high",
    "tie_group",
]
SUMMARY_KEYS = [
    "method",
    "mean_win_rate",
    "mean_rank",
    "n_trials",
    "n_failed",
    "normalized",
    "profile_steps",
    "profile_time",
    "tie_group",
]


def row_of(ranking: Ranking, method: str, task: str = "lm") -> RankRow:
    return next(r for r in ranking.rows if r.method == method and r.task == task)


def test_mean_std_n_on_a_hand_made_example() -> None:
    ranking = rank(outcomes("a", [1.0, 2.0, 3.0]) + outcomes("b", [4.0]), "val_loss", None)
    a, b = row_of(ranking, "a"), row_of(ranking, "b")
    assert (a.seeds.mean, a.seeds.std, a.seeds.n, a.seeds.n_done, a.seeds.n_failed) == (
        2.0,
        1.0,
        3,
        3,
        0,
    )
    assert (b.seeds.mean, b.seeds.std, b.seeds.ci_low, b.seeds.ci_high) == (4.0, None, None, None)
    assert ranking.direction == "min"
    assert a.versus.delta is a.versus.p_value is a.versus.verdict is None


def test_ci_is_the_t_interval_by_default_and_a_bootstrap_on_request() -> None:
    values = list(np.random.default_rng(1).normal(5.0, 1.0, 30))
    first = row_of(rank(outcomes("a", values) + outcomes("b", [1.0] * 30), "val_loss", None), "a")
    assert first.seeds.ci_low is not None and first.seeds.ci_high is not None
    assert first.seeds.ci_low < first.seeds.mean < first.seeds.ci_high  # type: ignore[operator]
    expected = stats.t.interval(0.95, 29, loc=np.mean(values), scale=stats.sem(values))
    assert (first.seeds.ci_low, first.seeds.ci_high) == pytest.approx(expected)
    boot = row_of(
        rank(outcomes("a", values), RankSpec(metric="val_loss", ci="bootstrap"), None), "a"
    )
    again = row_of(
        rank(outcomes("a", values), RankSpec(metric="val_loss", ci="bootstrap"), None), "a"
    )
    assert (boot.seeds.ci_low, boot.seeds.ci_high) == pytest.approx(
        (again.seeds.ci_low, again.seeds.ci_high), abs=1e-12
    )
    assert (boot.seeds.ci_low, boot.seeds.ci_high) == pytest.approx(scipy_percentile_ci(values))
    bca = row_of(rank(outcomes("a", values), RankSpec(metric="val_loss", ci="bca"), None), "a")
    assert bca.seeds.ci_low is not None and bca.seeds.ci_low != boot.seeds.ci_low


def test_the_t_interval_covers_the_mean_95_percent_of_the_time_at_3_and_5_seeds() -> None:
    """4,000 normal samples of n = 3 and of n = 5: coverage of the true mean in [0.93, 0.97]."""
    from harness.stats.intervals import t_ci

    rng = np.random.default_rng(2026)
    for n in (3, 5):
        samples = rng.normal(1.0, 2.0, size=(4000, n))
        low, high = t_ci(samples)
        coverage = np.mean((low <= 1.0) & (high >= 1.0))
        assert 0.93 <= coverage <= 0.97, (n, coverage)


def test_bootstrap_with_few_seeds_warns_and_the_header_names_the_interval() -> None:
    runs = outcomes("a", [1.0, 1.2, 1.1]) + outcomes("b", [2.0, 2.1, 2.3])
    ranking = rank(runs, RankSpec(metric="val_loss", ci="bootstrap"), "a")
    assert any("fewer than 10 seeds" in w for w in ranking.warnings)
    assert "95% CI: percentile bootstrap" in format_ranking(ranking, "md")
    default = format_ranking(rank(runs, "val_loss", "a"), "md")
    assert "95% CI: t-interval" in default and "± 95% CI (t)" in default


def test_identical_values_have_a_zero_width_ci() -> None:
    row = row_of(rank(outcomes("a", [0.5, 0.5, 0.5]), "val_loss", None), "a")
    assert (row.seeds.ci_low, row.seeds.ci_high, row.seeds.std) == (0.5, 0.5, 0.0)


def test_verdicts_against_the_baseline() -> None:
    rng = np.random.default_rng(0)
    base = rng.normal(3.0, 0.3, 20)
    data = {
        "base": base,
        "good": base - 0.5 + rng.normal(0, 0.05, 20),
        "bad": base + 0.5 + rng.normal(0, 0.05, 20),
        "same": base + rng.normal(0, 0.05, 20),
    }
    ranking = rank([o for m, v in data.items() for o in outcomes(m, v)], "val_loss", "base")
    verdicts = {r.method: r.versus.verdict for r in ranking.rows}
    assert verdicts == {"base": "baseline", "good": "better", "bad": "worse", "same": "n.s."}
    good = row_of(ranking, "good")
    assert good.versus.delta == pytest.approx(np.mean(data["good"]) - np.mean(base))
    assert [r.method for r in ranking.rows] == ["good", "base", "same", "bad"]


def test_verdict_follows_the_direction_of_a_max_metric() -> None:
    acc = {"base": [0.5, 0.6, 0.55, 0.52], "up": [0.8, 0.91, 0.84, 0.83]}
    ranking = rank(
        [o for m, v in acc.items() for o in outcomes(m, v, metric="id_acc")], "id_acc", "base"
    )
    assert ranking.direction == "max"
    assert row_of(ranking, "up").versus.verdict == "better"
    assert row_of(ranking, "up").rank == 1


def test_holm_matches_hand_computed_values() -> None:
    # Sorted: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, max(0.04*1, 0.06) = 0.06.
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm([]).size == 0


def test_reported_p_values_are_holm_adjusted_paired_t_tests() -> None:
    rng = np.random.default_rng(3)
    base = rng.normal(0, 1, 8)
    others = {"x": base + rng.normal(0.4, 0.5, 8), "y": base + rng.normal(0.2, 0.5, 8)}
    everything = outcomes("base", base) + [o for m, v in others.items() for o in outcomes(m, v)]
    ranking = rank(everything, "val_loss", "base")
    raw = [stats.ttest_rel(v, base).pvalue for v in others.values()]
    assert [row_of(ranking, m).versus.p_value for m in others] == pytest.approx(holm(raw))


def test_paired_test_pairs_by_seed_and_handles_degenerate_differences() -> None:
    a = np.array(
        [[1.0, 2.0, np.nan, 4.0, 7.0], [1.0, 2.0, 3.0, 4.0, 5.0], [1.0, 2.0, 3.0, 4.0, 5.0]]
    )
    b = np.array(
        [[1.5, np.nan, 3.0, 3.0, 6.0], [1.0, 2.0, 3.0, 4.0, 5.0], [2.0, 3.0, 4.0, 5.0, 6.0]]
    )
    p, mean_diff = paired_test(a, b)
    expected = stats.ttest_rel([1.0, 4.0, 7.0], [1.5, 3.0, 6.0]).pvalue
    assert p == pytest.approx([expected, 1.0, 0.0])
    assert mean_diff == pytest.approx([1.5 / 3, 0.0, -1.0])
    p_single, _ = paired_test(np.array([1.0, np.nan]), np.array([2.0, 3.0]))
    assert np.isnan(p_single)


def test_failed_seeds_are_counted_and_leave_no_borrowed_mean() -> None:
    runs = outcomes("a", [1.0, 2.0, None]) + outcomes("b", [3.0, 5.0, 4.0])
    runs.append(TrialOutcome("a", "gpt", "lm", 3, "timeout", {"val_loss": 0.1}))
    ranking = rank(runs, "val_loss", "b")
    a = row_of(ranking, "a")
    # the timeout is excluded (an infrastructure failure), not counted as a failed seed
    assert (a.seeds.n, a.seeds.n_done, a.seeds.n_failed, a.seeds.n_excluded) == (3, 2, 1, 1)
    assert (a.seeds.mean, a.seeds.std, a.seeds.ci_low, a.versus.delta, a.seeds.failure) == (
        None,
        None,
        None,
        None,
        "diverged",
    )
    # a diverged where b finished: a loses although its finished seeds are better
    assert (a.versus.verdict, a.versus.decided_by, a.versus.p_value, a.win_rate) == (
        "worse",
        "failures",
        None,
        0.0,
    )
    md = format_ranking(ranking, "md")
    assert "| diverged |" in md and "None" not in md and "n/a" not in md
    assert "1/3 (1 excluded: crashed or timed out)" in md


@pytest.mark.parametrize("status", ["timeout", "failed"])
def test_a_crash_or_timeout_is_never_a_loss(status: str) -> None:
    runs = outcomes("a", [1.0, 1.1, 1.2, 1.05]) + outcomes("b", [3.0, 3.1, 3.2])
    runs.append(TrialOutcome("b", "gpt", "lm", 3, status, {}))
    b = row_of(rank(runs, "val_loss", "a"), "b")
    assert (b.seeds.n, b.seeds.n_failed, b.seeds.n_excluded, b.seeds.failure) == (3, 0, 1, None)
    assert b.seeds.mean == pytest.approx(3.1)
    assert (b.versus.verdict, b.versus.decided_by) == (
        "worse",
        "test",
    )  # on the 3 seeds both finished


def test_a_failed_seed_is_worse_than_any_finite_value_everywhere() -> None:
    """Issue 10's two-method check: one method diverges on every seed."""
    runs = outcomes("sane", [2.1, 2.0, 2.2]) + outcomes("absurd", [None, None, None])
    ranking = rank(runs, "val_loss", "sane")
    sane, absurd = row_of(ranking, "sane"), row_of(ranking, "absurd")
    assert (sane.win_rate, absurd.win_rate) == (1.0, 0.0)
    assert (absurd.versus.verdict, absurd.rank, sane.rank) == ("worse", 2, 1)
    assert [s.method for s in ranking.summary] == ["sane", "absurd"]
    # the same with the methods the other way round as baseline
    flipped = rank(runs, "val_loss", "absurd")
    assert row_of(flipped, "sane").versus.verdict == "better"
    # a method with fewer failed seeds beats one with more, whatever their finished values
    partial = outcomes("once", [5.0, 5.0, None]) + outcomes("twice", [1.0, None, None])
    assert row_of(rank(partial, "val_loss", None), "once").win_rate == 1.0


def test_a_group_without_any_value_has_no_means() -> None:
    ranking = rank(outcomes("a", [None, None]) + outcomes("b", [None]), "val_loss", "a")
    for row in ranking.rows:
        assert row.seeds.mean is row.seeds.ci_low is row.versus.p_value is None
        assert row.win_rate == 0.5


def test_a_method_with_only_failed_trials_ranks_last() -> None:
    runs = (
        outcomes("good", [1.0, 1.1, 0.9])
        + outcomes("weak", [5.0, 6.0, 5.5])
        + outcomes("broken", [None, None, None])
    )
    ranking = rank(runs, "val_loss", "good")
    assert [r.method for r in ranking.rows] == ["good", "weak", "broken"]
    broken = row_of(ranking, "broken")
    assert (broken.seeds.n_failed, broken.seeds.mean, broken.versus.verdict) == (3, None, "worse")
    assert ranking.summary[-1].method == "broken"


def test_win_rate_gives_half_credit_for_ties() -> None:
    # a and b differ by noise (paired p ~ 0.9); c is clearly worse than both.
    a = [1.0, 2.0, 3.0, 4.0]
    b = [1.1, 1.9, 3.2, 3.9]
    c = [11.0, 12.1, 13.0, 13.9]
    ranking = rank(outcomes("a", a) + outcomes("b", b) + outcomes("c", c), "val_loss", None)
    rates = {r.method: r.win_rate for r in ranking.rows}
    assert rates == {"a": 0.75, "b": 0.75, "c": 0.0}
    # a and b tie on win rate; a has the better mean.
    assert [(r.method, r.rank) for r in ranking.rows] == [("a", 1), ("b", 2), ("c", 3)]


def test_win_rate_with_single_seeds_compares_means_and_averages_over_groups() -> None:
    runs = (
        outcomes("a", [1.0], task="t1")
        + outcomes("b", [1.0], task="t1")
        + outcomes("c", [2.0], task="t1")
        + outcomes("a", [3.0], task="t2")
        + outcomes("c", [2.0], task="t2")
    )
    ranking = rank(runs, "val_loss", None)
    assert row_of(ranking, "a", "t1").win_rate == 0.75
    assert row_of(ranking, "c", "t2").win_rate == 1.0
    summary = {s.method: s for s in ranking.summary}
    assert summary["a"].mean_win_rate == pytest.approx((0.75 + 0.0) / 2)
    assert summary["c"].mean_win_rate == pytest.approx((0.0 + 1.0) / 2)
    assert summary["a"].mean_rank == pytest.approx((1 + 2) / 2)
    assert [s.method for s in ranking.summary] == ["b", "c", "a"]
    assert summary["a"].n_trials == 2


def test_select_tuned_picks_one_point_per_method_or_the_best_per_seed() -> None:
    def trial(seed: int, lr: float, status: str, loss: float | None) -> TrialOutcome:
        metrics = {} if loss is None else {"val_loss": loss}
        return TrialOutcome("sgd", "gpt", "lm", seed, status, metrics, {"lr": lr}, f"{seed}-{lr}")

    runs = [
        trial(0, 0.1, "done", 2.0),
        trial(0, 0.01, "done", 1.5),
        trial(0, 1.0, "diverged", 0.1),
        trial(1, 0.1, "done", 1.2),
        trial(1, 0.01, "done", 1.4),
        trial(2, 0.1, "failed", None),
        trial(2, 0.01, "timeout", None),
    ]
    chosen = {o.seed: o for o in select_tuned(runs, "val_loss", Direction.MIN, "per_seed")}
    assert {seed: o.sweep["lr"] for seed, o in chosen.items()} == {0: 0.01, 1: 0.1, 2: 0.1}
    assert chosen[2].status == "failed"
    best_acc = select_tuned(runs[:2], "val_loss", Direction.MAX, "per_seed")
    assert [o.sweep["lr"] for o in best_acc] == [0.1]
    # per method: lr 1.0 has a diverged seed; 0.01 (mean 1.45) beats 0.1 (mean 1.6), their
    # crashed or timed-out seed not counted; every seed then reports lr 0.01
    per_method = select_tuned(runs, "val_loss", Direction.MIN)
    assert sorted((o.seed, o.sweep["lr"]) for o in per_method) == [(0, 0.01), (1, 0.01), (2, 0.01)]
    row = row_of(rank(runs, "val_loss", None), "sgd")
    assert (row.seeds.n, row.seeds.n_excluded, row.sweep) == (2, 1, {"lr": 0.01})
    assert {t["sweep"]["lr"] for t in row.trials} == {0.01}


def test_tuning_on_one_metric_reports_another() -> None:
    def trial(seed: int, lr: float, val: float, test: float) -> TrialOutcome:
        metrics = {"val_loss": val, "test_loss": test}
        return TrialOutcome("sgd", "gpt", "lm", seed, "done", metrics, {"lr": lr})

    runs = [trial(0, 0.1, 1.0, 3.0), trial(1, 0.1, 1.1, 3.1)]
    runs += [trial(0, 0.2, 2.0, 1.0), trial(1, 0.2, 2.1, 1.1)]
    ranking = rank(runs, RankSpec(metric="test_loss", tune_metric="val_loss"), None)
    assert (ranking.rows[0].sweep, ranking.rows[0].seeds.mean) == ({"lr": 0.1}, pytest.approx(3.05))
    assert "tuning: per_method on val_loss" in format_ranking(ranking, "md")
    optimistic = rank(runs, RankSpec(metric="test_loss", tuning="per_seed"), None)
    assert optimistic.rows[0].seeds.mean == pytest.approx(1.05)
    assert any("optimistic" in w for w in optimistic.warnings)


def test_unequal_sweep_sizes_are_warned_about() -> None:
    runs = [
        TrialOutcome(m, "gpt", "lm", 0, "done", {"val_loss": 1.0 + lr}, {"lr": lr})
        for m, lrs in {"a": [0.1, 0.2, 0.3], "b": [0.1]}.items()
        for lr in lrs
    ]
    (warning,) = [w for w in rank(runs, "val_loss", None).warnings if "sweep sizes" in w]
    assert "a 3, b 1" in warning


def test_seeds_needed_for_a_tie_matches_a_paired_t_power_computation() -> None:
    from harness.stats.paired import seeds_needed

    base = [1.0, 1.5, 1.2, 0.9]
    other = [1.05, 1.4, 1.35, 0.95]
    row = row_of(rank(outcomes("base", base) + outcomes("x", other), "val_loss", "base"), "x")
    diffs = np.subtract(other, base)
    assert row.versus.verdict == "n.s." and row.versus.seeds_needed is not None
    assert row.versus.seeds_needed == seeds_needed(diffs.mean(), diffs.std(ddof=1), 0.05)[0]
    # cross-check with the noncentral t: power reaches 0.8 at n and not at n - 1
    effect = diffs.mean() / diffs.std(ddof=1)

    def power(n: int) -> float:
        crit = stats.t.ppf(0.975, n - 1)
        nc = effect * np.sqrt(n)
        return stats.nct.sf(crit, n - 1, nc) + stats.nct.cdf(-crit, n - 1, nc)

    assert power(row.versus.seeds_needed) >= 0.8 > power(row.versus.seeds_needed - 1)
    assert np.isnan(seeds_needed(0.0, 1.0, 0.05)).all()


def test_seeds_needed_are_at_holms_strictest_level_when_several_methods_face_the_baseline() -> None:
    from harness.stats.paired import seeds_needed

    base = [1.0, 1.5, 1.2, 0.9]
    x, y = [1.05, 1.4, 1.35, 0.95], [1.1, 1.45, 1.3, 1.0]
    ranking = rank(outcomes("base", base) + outcomes("x", x) + outcomes("y", y), "val_loss", "base")
    for name, values in {"x": x, "y": y}.items():
        row = row_of(ranking, name)
        diffs = np.subtract(values, base)
        assert row.versus.verdict == "n.s."
        # two comparisons adjusted by Holm: the first must pass 0.05 / 2
        assert row.versus.seeds_needed == seeds_needed(diffs.mean(), diffs.std(ddof=1), 0.025)[0]
        assert row.versus.seeds_needed > seeds_needed(diffs.mean(), diffs.std(ddof=1), 0.05)[0]


def test_unknown_metric_raises_and_an_absent_baseline_is_said() -> None:
    with pytest.raises(RegistryError, match="val_los"):
        rank(outcomes("a", [1.0]), "val_los", None)
    ranking = rank(outcomes("a", [1.0]), "val_loss", "adamw")
    assert ranking.baseline is None
    assert any("baseline 'adamw' has no results" in w for w in ranking.warnings)


@pytest.fixture
def ranking() -> Ranking:
    runs = (
        outcomes("base_line", [1.0, 1.2, 1.1])
        + outcomes("pre|ln", [0.8, 0.9, None])
        + outcomes("base_line", [2.0, 2.1], task="copy")
    )
    return rank(runs, "val_loss", "base_line")


def test_json_output_has_all_keys(ranking: Ranking) -> None:
    data = json.loads(format_ranking(ranking, "json"))
    assert data["metric"] == "val_loss" and data["baseline"] == "base_line"
    assert (data["ci"], data["tuning"], data["aggregate"]) == ("t", "per_method", "mean_win_rate")
    assert all(list(row) == ROW_KEYS for row in data["rows"])
    assert len(data["rows"]) == 3
    assert list(data["summary"][0]) == SUMMARY_KEYS
    assert [t["title"] for t in data["tables"]][1] == "Overall (by mean win rate)"


def test_csv_output_has_a_header_and_one_line_per_row(ranking: Ranking) -> None:
    lines = list(csv.reader(io.StringIO(format_ranking(ranking, "csv"))))
    header = ["task", "model", *group_table(ranking).header]
    assert lines[0] == header
    assert len(lines) == 1 + len(ranking.rows)
    assert math.isclose(float(lines[1][header.index("mean")]), ranking.rows[0].seeds.mean or 0.0)


def test_text_formats_name_every_method(ranking: Ranking) -> None:
    md = format_ranking(ranking, "md")
    assert "base_line" in md and "pre\\|ln" in md and "### copy / gpt" in md
    assert "### Overall" in md
    latex = format_ranking(ranking, "latex")
    assert r"\toprule" in latex and r"base\_line" in latex and r"$\pm$" in latex
    table = format_ranking(ranking, "table")
    assert "base_line" in table and "pre|ln" in table
    assert rich_table(group_table(ranking)).row_count == 3
    with pytest.raises(ValueError, match="xml"):
        format_ranking(ranking, "xml")  # type: ignore[arg-type]


def test_a_task_that_does_not_report_the_metric_is_left_out() -> None:
    outcomes = [
        TrialOutcome("a", "m", "mc-task", seed, "done", {"acc": 0.5 + seed / 10}) for seed in (0, 1)
    ] + [
        TrialOutcome("a", "m", "perplexity", seed, "done", {"bits_per_byte": 1.5})
        for seed in (0, 1)
    ]
    ranking = rank(outcomes, "acc", baseline=None)
    assert {row.task for row in ranking.rows} == {"mc-task"}
