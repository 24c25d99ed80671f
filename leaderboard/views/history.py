"""History page: each method's result per suite run (nightly trend), regressions flagged."""

from __future__ import annotations

import streamlit as st

from leaderboard.charts import trend_plot
from leaderboard.state import Context, current, run_boards
from leaderboard.tables import flag_regressions, history_frame

CHANGE_FORMAT = st.column_config.NumberColumn(format="%+.4g")


def render(context: Context) -> None:
    st.title("History")
    boards = run_boards(context)
    if not boards:
        st.info("No suite run has finished trials that match the filters.")
        return
    metric = context.selection.metric
    direction = boards[-1][1].ranking.direction
    st.caption(
        f"Mean {metric} of each method over the trials each suite run ran (the sidebar's "
        "suite-run filter does not apply here)."
    )
    tolerance = st.number_input(
        "Regression tolerance",
        min_value=0.0,
        value=0.0,
        format="%.4f",
        help=f"flag a method whose mean {metric} worsens by more than this since its last run",
    )
    history = flag_regressions(
        history_frame((run, b.ranking) for run, b in boards), direction, tolerance
    )
    groups = sorted(set(zip(history["task"], history["model"], strict=True)))
    group = st.selectbox("Task / model", groups, format_func=" / ".join)
    in_group = history[(history["task"] == group[0]) & (history["model"] == group[1])]
    st.plotly_chart(trend_plot(in_group, metric))
    regressions = history[history["regression"]]
    st.subheader(f"Regressions ({len(regressions)})")
    st.dataframe(
        regressions.drop(columns=["run_id", "regression"]),
        hide_index=True,
        column_config={"change": CHANGE_FORMAT},
    )


render(current())
