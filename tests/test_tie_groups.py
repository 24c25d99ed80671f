"""Tie groups (`harness.stats.ties`, `harness.ranking.ties`): rank intervals from the
Holm-adjusted pairwise tests."""

from __future__ import annotations

import json

from harness.ranking import TrialOutcome, format_ranking, rank, to_text
from harness.stats.ties import rank_intervals

SEEDS = range(5)
NOISE = [0.01, -0.02, 0.015, -0.005, 0.0]


def outcomes(means: dict[str, float], model: str = "m", task: str = "t") -> list[TrialOutcome]:
    return [
        TrialOutcome(method, model, task, seed, "done", {"val_loss": mean + NOISE[seed] * k})
        for k, (method, mean) in enumerate(means.items(), start=1)
        for seed in SEEDS
    ]


def test_rank_intervals_span_the_methods_not_separated() -> None:
    order = ["a", "b", "c", "d"]
    better = {("a", "c"): True, ("a", "d"): True, ("b", "d"): True, ("c", "d"): True}
    assert rank_intervals(order, better) == {"a": "1-2", "b": "1-3", "c": "2-3", "d": "4"}


def test_close_methods_share_a_group_and_a_clear_winner_stands_alone() -> None:
    # a and b differ by far less than their noise; c is worse than both by a wide margin
    ranking = rank(outcomes({"a": 1.0, "b": 1.001, "c": 2.0}), "val_loss", "a")
    groups = {row.method: row.tie_group for row in ranking.rows}
    assert groups == {"a": "1-2", "b": "1-2", "c": "3"}
    assert [row.rank for row in ranking.rows] == [1, 2, 3]  # the strict order stays
    assert {s.method: s.tie_group for s in ranking.summary} == groups


def test_overall_separates_only_what_every_group_separates() -> None:
    found = outcomes({"a": 1.0, "b": 2.0}, model="m1") + outcomes({"a": 2.0, "b": 1.0}, "m2")
    ranking = rank(found, "val_loss", "a")
    assert {row.tie_group for row in ranking.rows} == {"1", "2"}
    assert [s.tie_group for s in ranking.summary] == ["1-2", "1-2"]


def test_tie_groups_in_json_md_and_the_terminal_table() -> None:
    ranking = rank(outcomes({"a": 1.0, "b": 1.001, "c": 2.0}), "val_loss", "a")
    rows = json.loads(format_ranking(ranking, "json"))["rows"]
    assert [row["tie_group"] for row in rows] == ["1-2", "1-2", "3"]
    markdown = format_ranking(ranking, "md")
    assert "| rank | tie group | method |" in markdown
    assert "| 1 | 1-2 | a |" in markdown
    assert "| position | tie group | method |" in markdown
    assert "tie group" in to_text(ranking)
