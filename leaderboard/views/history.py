"""History page: each method's metric over the nightly runs, with CI bands and the alerts
`layerbench nightly` raised (read-only: `layerbench alerts --ack ID` acknowledges one)."""

from __future__ import annotations

import streamlit as st

from leaderboard import data
from leaderboard.charts import trend_plot
from leaderboard.state import Context, current, run_boards
from leaderboard.tables import ALERT_KINDS, alerts_on_history, dashed, history_frame

ALERT_TABLE = ["id", "run", "task", "model", "method", "metric", "kind", "direction"]
NUMBERS = ["old_mean", "new_mean", "delta", "percent", "p_value", "z", "acknowledged"]


def render(context: Context) -> None:
    st.title("History")
    boards = run_boards(context, kind="nightly")
    if not boards:
        st.info(
            "No nightly run of this suite has finished trials that match the filters: "
            "`layerbench nightly` runs the suites whose `cadence` is nightly."
        )
        return
    metric = context.selection.metric
    st.caption(
        f"Mean {metric} of each method in each nightly run, with its 95% CI as a band (the "
        "sidebar's suite-run filter does not apply here). Markers are the alerts of "
        "`layerbench nightly`; hollow ones are acknowledged (`layerbench alerts --ack ID`)."
    )
    history = history_frame((run, board.ranking) for run, board in boards)
    stored = data.alerts(context.engine, context.selection.suite)
    alerts = alerts_on_history(history, stored, metric)
    if st.checkbox("Regressions only", key="regressions-only"):
        alerts = alerts[alerts["kind"].isin(ALERT_KINDS)]
        flagged = set(zip(alerts["task"], alerts["model"], alerts["method"], strict=True))
        keys = zip(history["task"], history["model"], history["method"], strict=True)
        history = history[[key in flagged for key in keys]]
    if history.empty:
        st.info("No regression in these nightly runs.")
        return
    groups = sorted(set(zip(history["task"], history["model"], strict=True)))
    group = st.selectbox("Task / model", groups, format_func=" / ".join)
    in_group = history[(history["task"] == group[0]) & (history["model"] == group[1])]
    group_alerts = alerts[(alerts["task"] == group[0]) & (alerts["model"] == group[1])]
    st.plotly_chart(trend_plot(in_group, group_alerts, metric))
    st.subheader(f"Alerts ({len(alerts)})")
    st.dataframe(dashed(alerts[ALERT_TABLE + NUMBERS]), hide_index=True)


render(current())
