"""Leaderboard page: the ranked table of the selection, overall and per (task, model)."""

from __future__ import annotations

from typing import Any

import streamlit as st

from harness.core import Status
from harness.ranking import Ranking, overall_table
from harness.ranking.table import ci_label, title
from leaderboard.state import Context, board, current
from leaderboard.tables import all_failed, ranked_statuses, rows_frame, summary_frame
from leaderboard.text import plain

NUMBER = st.column_config.NumberColumn
SUMMARY_FORMATS = {
    "mean win rate": NUMBER(format="%.3f"),
    "mean rank": NUMBER(format="%.2f"),
    "mean / baseline": NUMBER(format="%.4g"),
}


def row_formats(ranking: Ranking) -> dict[str, Any]:
    return {
        "mean": NUMBER(format="%.4g", help="empty when a seed failed: it has no finite value"),
        ci_label(ranking): NUMBER(format="%.2g", help="half-width of the 95% CI of the mean"),
        "Δ vs baseline": NUMBER(format="%+.3g"),
        "p (Holm)": NUMBER(format="%.3g", help="paired test vs the baseline, Holm-corrected"),
        "win rate": NUMBER(format="%.3f", help="HELM win rate: ties (p >= alpha) count half"),
        "seeds failed": NUMBER(help="failed, diverged or timed-out seeds: worse than any value"),
        "seeds needed": NUMBER(help="seeds a paired t-test needs to detect this Δ (80% power)"),
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
    st.dataframe(
        summary_frame(ranking, ranked.families), hide_index=True, column_config=SUMMARY_FORMATS
    )
    st.subheader("By task and model")
    table = rows_frame(ranking, ranked.families)
    st.dataframe(table, hide_index=True, column_config=row_formats(ranking))


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
