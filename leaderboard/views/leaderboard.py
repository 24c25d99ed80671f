"""Leaderboard page: the ranked table of the selection, overall and per (task, model)."""

from __future__ import annotations

from typing import Any

import streamlit as st

from harness.core import Status
from harness.ranking import Ranking, group_table, overall_table
from harness.ranking.table import Table, title
from leaderboard.export import csv_bytes, parquet_bytes, selection_frame
from leaderboard.state import Context, board, current, selected_trials
from leaderboard.tables import (
    all_failed,
    dashed,
    ranked_statuses,
    rows_frame,
    summary_frame,
)
from leaderboard.text import plain

# the display of each column, by its key (harness.ranking.table.Column): a format spec, a help
SUMMARY_FORMATS = {"mean_win_rate": ".3f", "mean_rank": ".2f", "normalized": ".4g"}
SUMMARY_HELP = {
    "tie_group": "the overall ranks the tests allow: separated only where every group "
    "separates the pair (README: tie groups)",
}
ROW_FORMATS = {"mean": ".4g", "ci": ".2g", "delta": "+.3g", "p_value": ".3g", "win_rate": ".3f"}
ROW_HELP = {
    "tie_group": "ranks the Holm-adjusted pairwise tests allow, e.g. 1-3 (README: tie groups)",
    "mean": "empty when a seed failed: it has no finite value",
    "ci": "half-width of the 95% CI of the mean",
    "p_value": "paired test vs the baseline, Holm-corrected",
    "win_rate": "HELM win rate: ties (p >= alpha) count half",
    "n_failed": "diverged, failed or timed-out seeds, or done without the metric",
    "seeds_needed": "seeds a paired t-test needs to detect this Δ (80% power)",
}


def by_label(table: Table, by_key: dict[str, str]) -> dict[str, str]:
    """`by_key` (column key -> value) keyed by the columns' labels, as the frames name them."""
    return {column.label: by_key[column.key] for column in table.columns if column.key in by_key}


def column_help(table: Table, helps: dict[str, str]) -> dict[str, Any]:
    """Streamlit's column configuration: each column's help, chosen by its key."""
    return {
        label: st.column_config.Column(help=text) for label, text in by_label(table, helps).items()
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
    st.dataframe(
        dashed(summary, by_label(overall, SUMMARY_FORMATS)),
        hide_index=True,
        column_config=column_help(overall, SUMMARY_HELP),
    )
    st.subheader("By task and model")
    group = group_table(ranking)
    rows = rows_frame(ranking, ranked.families)
    st.dataframe(
        dashed(rows, by_label(group, ROW_FORMATS)),
        hide_index=True,
        column_config=column_help(group, ROW_HELP),
    )
    downloads(context)


def downloads(context: Context) -> None:
    """The selection's trials (every sweep point) as CSV and Parquet: one row per trial with its
    config flattened, its status and its final metrics."""
    trials = selected_trials(context)
    frame = selection_frame(context.engine, trials, context.suite.metrics)
    st.subheader("Raw results")
    st.caption(
        f"{len(frame)} trials of the selection: identity, status, config.* (the resolved config "
        "flattened) and metric.* (final metrics; empty where a trial has none)."
    )
    name = context.selection.suite
    csv_column, parquet_column = st.columns(2)
    csv_column.download_button(
        "Download CSV", csv_bytes(frame), f"{name}.csv", "text/csv", key="raw_csv"
    )
    parquet_column.download_button(
        "Download Parquet",
        parquet_bytes(frame),
        f"{name}.parquet",
        "application/vnd.apache.parquet",
        key="raw_parquet",
    )


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
