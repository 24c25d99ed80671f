"""Overall ranking statistics (`harness.registry.AGGREGATES`, `harness.ranking.aggregates`): a
new one is one registered function; the suite names it, validated like any registered name."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from harness.core import TrialOutcome
from harness.ranking import overall_table, rank
from harness.ranking.aggregates import Standing
from harness.registry import AGGREGATES
from harness.spec.rank import RankSpec
from tests.factories import outcomes


def three_methods() -> list[TrialOutcome]:
    """a wins on lm and loses on wiki; b is second everywhere; c wins on wiki, last on lm."""
    found = []
    for task, means in {"lm": (1.0, 2.0, 3.0), "wiki": (3.0, 2.0, 1.0)}.items():
        for method, mean in zip("abc", means, strict=True):
            found += outcomes(method, [mean, mean + 0.01, mean - 0.01], task=task)
    return found


def test_a_registered_statistic_orders_the_summary_and_gets_a_column() -> None:
    with AGGREGATES.scoped():

        @AGGREGATES.register("best_rank", label="best rank", summary="the best rank anywhere")
        def best_rank(standing: Standing) -> float | None:
            return -min(row.rank for row in standing.rows)

        ranking = rank(three_methods(), RankSpec(metric="val_loss", aggregate="best_rank"), None)
        table = overall_table(ranking)
    assert [s.method for s in ranking.summary] == ["a", "c", "b"]  # best rank 1, 1, 2
    assert table.title == "Overall (by best rank)"
    assert [cell.value for cell in table.column("best_rank")] == [-1.0, -1.0, -2.0]


@pytest.mark.parametrize("name", AGGREGATES.names())
def test_every_registered_statistic_titles_the_overall_table_and_has_its_column(
    name: str,
) -> None:
    entry = AGGREGATES.entry(name)
    target = {"target": {"metric": "val_loss", "value": 2.0}} if entry.needs_target else {}
    spec = RankSpec.model_validate({"metric": "val_loss", "aggregate": name, **target})
    table = overall_table(rank(three_methods(), spec, None))
    assert table.title == f"Overall (by {entry.label})"
    assert (entry.column or name) in table.keys


def test_the_built_in_statistics_keep_their_columns() -> None:
    ranking = rank(three_methods(), RankSpec(metric="val_loss", aggregate="mean_rank"), None)
    assert len(overall_table(ranking).keys) == 8  # no column added for a built-in statistic


def test_an_unknown_statistic_is_refused_with_a_suggestion() -> None:
    with pytest.raises(ValidationError, match="did you mean 'mean_rank'"):
        RankSpec(aggregate="mean_rnk")
    with pytest.raises(ValidationError, match="needs a `target`"):
        RankSpec(aggregate="performance_profile")
