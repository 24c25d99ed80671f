"""Leaderboard page: the ranked table of the selection, overall and per (task, model)."""

from __future__ import annotations

from collections import Counter

import streamlit as st

from harness.ranking import Ranking, TrialOutcome
from leaderboard.state import Context, board, current
from leaderboard.tables import (
    FAILED_STATUSES,
    all_failed,
    rows_frame,
    status_counts,
    summary_frame,
)
from leaderboard.text import plain

NUMBER = st.column_config.NumberColumn
ROW_FORMATS = {
    "mean": NUMBER(format="%.4g"),
    "± 95% CI": NUMBER(format="%.2g", help="half-width of the bootstrap 95% CI of the mean"),
    "Δ vs baseline": NUMBER(format="%+.3g"),
    "p (Holm)": NUMBER(format="%.3g", help="paired t-test vs the baseline, Holm-corrected"),
    "win rate": NUMBER(format="%.3f", help="HELM win rate: ties (p >= alpha) count half"),
    "seeds failed": NUMBER(help="failed, diverged or timed-out seeds, ranked as the worst value"),
}
SUMMARY_FORMATS = {
    "mean win rate": NUMBER(format="%.3f"),
    "mean rank": NUMBER(format="%.2f"),
}


def render(context: Context) -> None:
    selection = context.selection
    st.title(f"Leaderboard: {selection.suite}")
    ranked = board(context)
    if ranked is None:
        st.info("No finished trials match the filters: widen them in the sidebar.")
        return
    st.caption(caption(ranked.ranking, selection.alpha))
    if ranked.baseline_missing:
        st.warning(f"The baseline '{plain(selection.baseline)}' has no trials in this selection.")
    if all_failed(ranked.ranking):
        st.warning(failure_message(ranked.ranking.metric, ranked.tuned))
    st.subheader("Overall")
    st.dataframe(
        summary_frame(ranked.ranking, ranked.families),
        hide_index=True,
        column_config=SUMMARY_FORMATS,
    )
    st.subheader("By task and model")
    table = rows_frame(ranked.ranking, ranked.families, status_counts(ranked.tuned))
    st.dataframe(table, hide_index=True, column_config=ROW_FORMATS)


def caption(ranking: Ranking, alpha: float) -> str:
    better = "lower" if ranking.direction == "min" else "higher"
    baseline = ranking.baseline or "none"
    return (
        f"{ranking.metric}: {better} is better. Baseline: {baseline}. Verdicts and win rates use "
        f"paired t-tests by seed at alpha = {alpha}; failed and diverged seeds count as the worst "
        "value of their group."
    )


def failure_message(metric: str, tuned: list[TrialOutcome]) -> str:
    statuses = Counter(outcome.status for outcome in tuned)
    failed = sum(statuses[status] for status in FAILED_STATUSES)
    return (
        f"No trial in this selection has a value of {metric}: {failed} failed or timed out, "
        f"{statuses['diverged']} diverged, {statuses['done']} finished without {metric}. "
        "The Trial page shows each trial's error."
    )


render(current())
