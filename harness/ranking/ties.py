"""Tie groups of a ranking: the ranks each method could hold given which of its comparisons are
separable (the rule: `harness.stats.ties`), set on the rows and the summary.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from harness.core import Direction
from harness.ranking.groups import Group, compare_pairs
from harness.ranking.records import MethodSummary, RankRow
from harness.stats.ties import rank_intervals, separations


def group_separations(group: Group, alpha: float, direction: Direction) -> np.ndarray:
    """m x m: +1 where method i is separably better than j in the group, -1 where worse."""
    i, j, compared = compare_pairs(group, direction)
    return separations(len(group.methods), (i, j), compared, alpha)


def with_tie_groups(
    rows: list[RankRow],
    summary: list[MethodSummary],
    groups: list[Group],
    alpha: float,
    direction: Direction,
) -> tuple[list[RankRow], list[MethodSummary]]:
    """The rows and the summary with their `tie_group` (the rank interval) set."""
    overall: dict[tuple[str, str], list[bool]] = {}
    by_group: dict[tuple[str, str], dict[tuple[str, str], bool]] = {}
    for group in groups:
        signs = group_separations(group, alpha, direction)
        pairs = {
            (a, b): bool(signs[i, k] > 0)
            for i, a in enumerate(group.methods)
            for k, b in enumerate(group.methods)
            if i != k
        }
        by_group[(group.task, group.model)] = pairs
        for pair, separable in pairs.items():
            overall.setdefault(pair, []).append(separable)
    labels: dict[tuple[str, str, str], str] = {}
    for (task, model), pairs in by_group.items():
        order = [row.method for row in rows if (row.task, row.model) == (task, model)]
        for method, label in rank_intervals(order, pairs).items():
            labels[(task, model, method)] = label
    ranked_rows = [
        replace(row, tie_group=labels.get((row.task, row.model, row.method))) for row in rows
    ]
    everywhere = {pair: all(found) for pair, found in overall.items()}
    summary_labels = rank_intervals([s.method for s in summary], everywhere)
    ranked_summary = [replace(s, tie_group=summary_labels[s.method]) for s in summary]
    return ranked_rows, ranked_summary
