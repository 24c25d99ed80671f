"""Leaderboard page: the ranked table of the selection, overall and per (task, model)."""

from __future__ import annotations

from typing import Any

import streamlit as st

from harness.core import Status
from harness.ranking import Ranking, overall_table
from harness.ranking.table import TIE_GROUP, ci_label, title
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

COLUMN = st.column_config.Column
SUMMARY_FORMATS = {"mean win rate": ".3f", "mean rank": ".2f", "mean / baseline": ".4g"}
SUMMARY_HELP = {
    TIE_GROUP: COLUMN(
        help="the overall ranks the tests allow: separated only where every group "
        "separates the pair (README: tie groups)"
    ),
}


def row_formats(ranking: Ranking) -> dict[str, str]:
    return {
        "mean": ".4g",
        ci_label(ranking): ".2g",
        "Δ vs baseline": "+.3g",
        "p (Holm)": ".3g",
        "win rate": ".3f",
    }


def row_help(ranking: Ranking) -> dict[str, Any]:
    return {
        TIE_GROUP: COLUMN(help="ranks the Holm-adjusted pairwise tests allow, e.g. 1-3"),
        "mean": COLUMN(help="empty when a seed failed: it has no finite value"),
        ci_label(ranking): COLUMN(help="half-width of the 95% CI of the mean"),
        "p (Holm)": COLUMN(help="paired test vs the baseline, Holm-corrected"),
        "win rate": COLUMN(help="HELM win rate: ties (p >= alpha) count half"),
        "seeds failed": COLUMN(help="failed, diverged or timed-out seeds: worse than any value"),
        "seeds needed": COLUMN(help="seeds a paired t-test needs to detect this Δ (80% power)"),
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
    st.subheader(overall_table(ranking).title)
    summary = summary_frame(ranking, ranked.families)
    st.dataframe(dashed(summary, SUMMARY_FORMATS), hide_index=True, column_config=SUMMARY_HELP)
    st.subheader("By task and model")
    table = rows_frame(ranking, ranked.families)
    st.dataframe(
        dashed(table, row_formats(ranking)), hide_index=True, column_config=row_help(ranking)
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
