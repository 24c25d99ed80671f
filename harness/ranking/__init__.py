"""Ranking of trial outcomes, shared by the CLI, the leaderboard and the results docs.

- `outcomes`: each sweep point as a method, sweep sizes, time and steps to a target;
- `groups`, `ranker`: one (task, model) group's statistics, and `rank` over all of them;
- `records`: what a ranking returns (`RankRow` and its parts, `MethodSummary`, `Ranking`);
- `aggregates`: the overall statistics (`harness.registry.AGGREGATES`); `ties`: tie groups;
- `table`, `render`: a neutral table model and its renderers (terminal, md, csv, latex, json);
- `suite`: `rank_suite`, the one path from a stored suite to its `Ranking` and its claims'
  findings (`harness.claims`).

The statistics themselves are `harness.stats`'. No torch here; only `suite` reads the database.
"""

from harness.core import EvalPoint, TrialOutcome, point_label
from harness.ranking.outcomes import Target, each_point, target_hit
from harness.ranking.ranker import profile_scores, rank
from harness.ranking.records import MethodSummary, Ranking, RankRow
from harness.ranking.render import (
    FORMATS,
    Format,
    format_ranking,
    is_format,
    rich_table,
    to_text,
)
from harness.ranking.table import (
    Cell,
    Column,
    Section,
    Table,
    group_table,
    overall_table,
    tables,
)

__all__ = [
    "FORMATS",
    "Cell",
    "Column",
    "EvalPoint",
    "Format",
    "MethodSummary",
    "RankRow",
    "Ranking",
    "Section",
    "Table",
    "Target",
    "TrialOutcome",
    "each_point",
    "format_ranking",
    "group_table",
    "is_format",
    "overall_table",
    "point_label",
    "profile_scores",
    "rank",
    "rich_table",
    "tables",
    "target_hit",
    "to_text",
]
