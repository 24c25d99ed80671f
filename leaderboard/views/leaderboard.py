"""Leaderboard page: the ranked table of the selection, overall and per (task, model)."""

from __future__ import annotations

from typing import Any

import streamlit as st

from harness.core import Status
from harness.ranking import Ranking, group_table, overall_table
from harness.ranking.table import Table, title
from leaderboard.state import Context, board, current
from leaderboard.tables import all_failed, ranked_statuses, rows_frame, summary_frame
from leaderboard.text import plain

NUMBER = st.column_config.NumberColumn
# the display of each column, by its key (harness.ranking.table.Column)
SUMMARY_FORMATS = {
    "mean_win_rate": {"format": "%.3f"},
    "mean_rank": {"format": "%.2f"},
    "normalized": {"format": "%.4g"},
}
ROW_FORMATS = {
    "mean": {"format": "%.4g", "help": "empty when a seed failed: it has no finite value"},
    "ci": {"format": "%.2g", "help": "half-width of the 95% CI of the mean"},
    "delta": {"format": "%+.3g"},
    "p_value": {"format": "%.3g", "help": "paired test vs the baseline, Holm-corrected"},
    "win_rate": {"format": "%.3f", "help": "HELM win rate: ties (p >= alpha) count half"},
    "n_failed": {"help": "diverged, failed or timed-out seeds, or done without the metric"},
    "seeds_needed": {"help": "seeds a paired t-test needs to detect this Δ (80% power)"},
}


def column_config(table: Table, formats: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Streamlit's column configuration of a table's frame (columns named by their labels),
    chosen by each column's key."""
    return {
        column.label: NUMBER(**formats[column.key])
        for column in table.columns
        if column.key in formats
    }


def render(context: Context) -> None:
    selection = context.selection
    st.title(f"Leaderboard: {selection.suite}")
    ranked = board(context)
    if ranked is None:
        st.info("No finished trials match the filters: widen them in the sidebar.")
        return
    ranking = ranked.ranking
    st.caption(caption(ranking))
    for warning in ranking.warnings:
        st.warning(plain(warning))  # it names methods: literal text, not Markdown
    if all_failed(ranking):
        st.warning(failure_message(ranking))
    overall = overall_table(ranking)
    st.subheader(overall.title)
    summary = summary_frame(ranking, ranked.families)
    st.dataframe(summary, hide_index=True, column_config=column_config(overall, SUMMARY_FORMATS))
    st.subheader("By task and model")
    rows = rows_frame(ranking, ranked.families)
    formats = column_config(group_table(ranking), ROW_FORMATS)
    st.dataframe(rows, hide_index=True, column_config=formats)


def caption(ranking: Ranking) -> str:
    """The table's title (metric, direction, baseline, CI method, tuning, alpha) and the rules."""
    return (
        f"{title(ranking)}. Verdicts and win rates use paired tests by seed; a failed or "
        "diverged seed loses to any finite value."
    )


def failure_message(ranking: Ranking) -> str:
    statuses = ranked_statuses(ranking)
    failed = sum(n for status, n in statuses.items() if Status(status).retried)
    metric = ranking.metric
    return (
        f"No trial in this selection has a value of {metric}: {failed} failed or timed out, "
        f"{statuses[Status.DIVERGED]} diverged, {statuses[Status.DONE]} finished without {metric}. "
        "The Trial page shows each trial's error."
    )


render(current())
