"""Ranking of trial outcomes, shared by the CLI, the leaderboard and the results docs.

- `outcomes`: trial outcomes and the tuning of sweep points;
- `stats`, `examples`: intervals, paired tests, Holm, power (per seed and per example);
- `groups`, `ranker`: one (task, model) group's statistics, and `rank` over all of them;
- `table`, `render`: a neutral table model and its renderers (terminal, md, csv, latex, json);
- `suite`: `rank_suite`, the one path from a stored suite to its `Ranking`.

No torch here; only `suite` reads the database.
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
from harness.stats.outcomes import metric_value, select_tuned
from harness.stats.paired import holm, paired_test

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
    "holm",
    "is_format",
    "metric_value",
    "overall_table",
    "paired_test",
    "point_label",
    "profile_scores",
    "rank",
    "rich_table",
    "select_tuned",
    "tables",
    "target_hit",
    "to_text",
]
