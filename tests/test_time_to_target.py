"""Steps and time to target, the AlgoPerf performance profile, and tuned sweeps end to end."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from harness.ranking import Ranking, RankRow, Target, TrialOutcome, format_ranking, rank
from harness.spec.rank import RankSpec
from harness.store.models import Result, Trial
from tests.factories import invoke, write_suite

TARGET = Target(metric="val_loss", value=2.0)


def runs(method: str, hits: Sequence[int | None], task: str = "lm") -> list[TrialOutcome]:
    """One trial per seed evaluated every 50 steps (0.1 s of train time per step); its loss falls
    to the target at step `hit` (never when None) and ends at 1.5 or 2.5."""
    outcomes = []
    for seed, hit in enumerate(hits):
        series = [(step, step / 10, 2.0 if step == hit else 3.0) for step in range(50, 450, 50)]
        final = 2.5 if hit is None else 1.5
        outcomes.append(
            TrialOutcome(method, "gpt", task, seed, "done", {"val_loss": final}, series=series)
        )
    return outcomes


def row_of(ranking: Ranking, method: str, task: str = "lm") -> RankRow:
    return next(r for r in ranking.rows if r.method == method and r.task == task)


def test_steps_and_time_to_target_are_medians_with_cis_and_never_reaching_methods_kept() -> None:
    many = [100, 150, 200, 250, 300, 350, 400, 100]
    outcomes = runs("fast", many) + runs("slow", [300, 300, None])
    ranking = rank(
        outcomes + runs("stuck", [None, None, None]),
        RankSpec(metric="val_loss", target=TARGET),
        None,
    )
    fast, slow, stuck = (row_of(ranking, m) for m in ("fast", "slow", "stuck"))
    assert (
        fast.to_target.n_reached,
        fast.to_target.steps_to_target,
        fast.to_target.time_to_target,
    ) == (8, 225, 22.5)
    interval = stats.quantile_test(np.array(many, float), q=225, p=0.5).confidence_interval()
    assert (fast.to_target.steps_ci_low, fast.to_target.steps_ci_high) == pytest.approx(interval)
    # 3 seeds are too few for a 95% interval of a median: no CI, not a misleading one
    assert (
        slow.to_target.n_reached,
        slow.to_target.steps_to_target,
        slow.to_target.steps_ci_low,
    ) == (2, 300, None)
    assert (
        stuck.to_target.n_reached,
        stuck.to_target.steps_to_target,
        stuck.to_target.time_to_target,
    ) == (0, None, None)
    table = format_ranking(ranking, "table")
    stuck_line = next(line for line in table.splitlines() if "stuck" in line)
    assert "never" in stuck_line and "0/3" in stuck_line
    assert "steps to target" in table and "profile score (steps)" in table


def test_time_to_target_takes_each_seeds_fastest_sweep_point() -> None:
    """AlgoPerf: per seed, the fastest point that reaches the target, not the tuned one."""
    slow_best = [
        TrialOutcome("m", "gpt", "lm", seed, "done", {"val_loss": 1.0}, {"lr": 1}, series=series)
        for seed, series in enumerate([[(300, 30.0, 1.9)], [(400, 40.0, 1.9)]])
    ]
    fast_worse = [
        TrialOutcome("m", "gpt", "lm", seed, "done", {"val_loss": 1.5}, {"lr": 2}, series=series)
        for seed, series in enumerate([[(100, 10.0, 1.9)], [(500, 50.0, 1.9)]])
    ]
    row = rank(slow_best + fast_worse, RankSpec(metric="val_loss", target=TARGET), None).rows[0]
    assert (row.sweep, row.seeds.mean) == ({"lr": 1}, 1.0)
    assert (
        row.to_target.n_reached,
        row.to_target.steps_to_target,
        row.to_target.time_to_target,
    ) == (2, 250, 25.0)


def test_a_target_per_task() -> None:
    target = Target(metric="val_loss", value={"lm": 2.0})
    ranking = rank(
        runs("a", [100]) + runs("a", [100], task="t2"),
        RankSpec(metric="val_loss", target=target),
        None,
    )
    assert row_of(ranking, "a").to_target.steps_to_target == 100
    assert row_of(ranking, "a", "t2").to_target.n_reached == 0


def test_a_trial_that_diverges_after_reaching_the_target_reached_it() -> None:
    diverged = TrialOutcome("m", "gpt", "lm", 0, "diverged", {}, series=[(10, 1.0, 1.9)])
    row = rank([diverged], RankSpec(metric="val_loss", target=TARGET), None).rows[0]
    assert (row.to_target.n_reached, row.to_target.steps_to_target, row.seeds.n_failed) == (
        1,
        10,
        1,
    )


def test_a_max_metric_reaches_its_target_from_below() -> None:
    series = [(10, 1.0, 0.5), (20, 2.0, 0.8), (30, 3.0, 0.95)]
    outcome = TrialOutcome("m", "gpt", "lm", 0, "done", {"id_acc": 0.95}, series=series)
    row = rank(
        [outcome], RankSpec(metric="id_acc", target=Target(metric="id_acc", value=0.8)), None
    ).rows[0]
    assert (row.to_target.steps_to_target, row.to_target.time_to_target) == (20, 2.0)


def test_performance_profile_score_matches_algoperf_by_hand() -> None:
    """B = 1/(3n) sum_w max(0, 4 - r_w), r_w = median time / best median time on workload w."""
    workload_a = runs("a", [100, 150, 200]) + runs("b", [300, 300, None]) + runs("c", [None])
    workload_b = runs("a", [400, 400], task="t2") + runs("b", [100, 100], task="t2")
    ranking = rank(workload_a + workload_b, RankSpec(metric="val_loss", target=TARGET), None)
    scores = {s.method: (s.profile_steps, s.profile_time) for s in ranking.summary}
    # workload lm: medians a 150, b 300 (one seed never: still the median), c infinite
    # workload t2: a 400 (r = 4), b 100 (r = 1), c has no trial (infinite)
    expected = {"a": (3 + 0) / 6, "b": (2 + 3) / 6, "c": 0.0}
    assert {m: s[0] for m, s in scores.items()} == pytest.approx(expected)
    assert {m: s[1] for m, s in scores.items()} == pytest.approx(expected)
    data = json.loads(format_ranking(ranking, "json"))
    assert data["target"] == {"metric": "val_loss", "value": 2.0}
    without = rank(workload_a, "val_loss", None)
    assert without.target is None and without.summary[0].profile_steps is None


def layerbench(*args: str) -> str:
    """The standard output of a `layerbench` command run in this process (notes such as where
    third-party messages went are on stderr); it must succeed."""
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.slow
def test_a_sweep_stores_every_point_and_ranks_one_tuned_point_per_method(tmp_path: Path) -> None:
    """2 learning rates x 3 seeds: 6 trials stored; `rank` reports every seed of one point."""
    suite = write_suite(
        tmp_path,
        "pre-ln: {sweep: {optimizer.lr: [1.0e-4, 1.0e-2]}}",
        steps=12,
        eval_every=4,
        extra="rank: {metric: val_loss, target: {metric: val_loss, value: 4.5}}\n",
    )
    suite.write_text(suite.read_text().replace("seeds: [0, 1]", "seeds: [0, 1, 2]"))
    layerbench("run", str(suite), "--no-mlflow", "--workers", "2")
    engine = create_engine(f"sqlite:///{tmp_path / 'layerbench.db'}")
    with Session(engine) as session:
        rows = session.execute(
            select(Trial.seed, Trial.sweep, Result.value)
            .join(Result, Result.trial_id == Trial.id)
            .where(Result.name == "val_loss")
        ).all()
    assert len(rows) == 6
    by_point: dict[float, list[float]] = {}
    for _, sweep, value in rows:
        by_point.setdefault(sweep["optimizer.lr"], []).append(value)
    best = min(by_point, key=lambda lr: np.mean(by_point[lr]))
    tuned = json.loads(layerbench("rank", str(suite), "--format", "json"))
    (row,) = tuned["rows"]
    assert (row["method"], row["n"]) == ("pre-ln", 3)
    assert row["mean"] == pytest.approx(np.mean(by_point[best]))
    assert [t["sweep"] for t in row["trials"]] == [{"optimizer.lr": best}] * 3
    assert row["n_reached"] is not None and tuned["summary"][0]["profile_steps"] is not None
    every = json.loads(layerbench("rank", str(suite), "--all", "--format", "json"))
    assert sorted(r["method"] for r in every["rows"]) == [
        f"pre-ln[optimizer.lr={lr}]" for lr in ("0.0001", "0.01")
    ]
    assert all(r["n"] == 3 for r in every["rows"]) and every["baseline"] is None
    plan = layerbench("plan", str(suite))
    marked = [line for line in plan.splitlines() if " * " in line]
    assert plan.count("pre-ln[optimizer.lr=") == 6 and len(marked) == 3
    assert len({line.split("pre-ln[")[1].split("]")[0] for line in marked}) == 1
