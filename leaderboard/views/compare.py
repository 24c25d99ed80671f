"""Compare page: learning curves, layer heatmaps and Pareto plots of one (task, model) group."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from harness.ranking import Ranking, RankRow, TrialOutcome
from harness.records import DONE
from harness.registry import METRICS
from harness.trial_metrics import COST_METRICS
from leaderboard import data
from leaderboard.charts import (
    HeatmapScale,
    layer_heatmap,
    layer_profile,
    learning_curves,
    pareto_plot,
)
from leaderboard.cost import method_costs
from leaderboard.layers import default_profiles, final_profiles, profile_names
from leaderboard.state import Context, board, current
from leaderboard.text import plain

# Final metrics of compression methods, each plotted against the ranked metric when stored.
DEFAULT_METHODS = 5


def render(context: Context) -> None:
    st.title("Compare")
    ranked = board(context)
    if ranked is None:
        st.info("No finished trials match the filters: widen them in the sidebar.")
        return
    groups = sorted({(row.task, row.model) for row in ranked.ranking.rows})
    linked = (st.query_params.get("task"), st.query_params.get("model"))  # from Findings
    first = groups.index(linked) if linked in groups else 0
    group = st.selectbox("Task / model", groups, index=first, format_func=" / ".join)
    rows = [row for row in ranked.ranking.rows if (row.task, row.model) == group]
    ranked_methods = [row.method for row in rows]
    wanted = [m for m in st.query_params.get("methods", "").split(",") if m in ranked_methods]
    methods = st.multiselect(
        "Methods",
        ranked_methods,
        default=wanted or ranked_methods[:DEFAULT_METHODS],
        key=f"cmp:{group}",
    )
    trials = [o for o in ranked.tuned if (o.task, o.model) == group]
    shown = {o.key: o.method for o in trials if o.method in methods}
    st.header("Learning curves")
    curves(context, shown)
    st.header("Layer statistics")
    heatmaps(context, shown, methods)
    st.header(f"Layer profiles across models ({plain(group[0])})")
    across = {o.key: f"{o.model} / {o.method}" for o in ranked.tuned if o.task == group[0]}
    profiles(context, across)
    st.header("Pareto fronts")
    pareto(context, ranked.ranking, rows, trials)
    st.header("What it cost")
    costs(context, shown)


def costs(context: Context, method_of: dict[str, str]) -> None:
    """Each shown method's mean tokens/s, MFU, peak memory and FLOPs per token, and devices."""
    finals = data.final_values(context.engine, list(method_of), COST_METRICS)
    devices = data.trial_devices(context.engine, list(method_of))
    st.caption("Mean over the trials shown (the sweep point ranked for each seed).")
    st.dataframe(method_costs(finals, devices, method_of), hide_index=True)


def curves(context: Context, method_of: dict[str, str]) -> None:
    names = data.series_names(context.engine, list(method_of))
    if not names:
        st.info("No metric series are stored for these trials.")
        return
    metric = context.selection.metric
    name = st.selectbox("Series", names, index=names.index(metric) if metric in names else 0)
    series = data.series(context.engine, list(method_of), name)
    series["method"] = series["key"].map(method_of)
    st.caption("Mean over seeds (the sweep point ranked for each seed); bands: ±1 std.")
    by_step, by_time = st.columns(2)
    by_step.plotly_chart(learning_curves(series, name, "step"))
    by_time.plotly_chart(learning_curves(series, name, "train_time_s"))


def heatmaps(context: Context, method_of: dict[str, str], methods: list[str]) -> None:
    stats = data.layer_stats(context.engine, list(method_of))
    if stats.empty:
        st.info("No layer statistics are stored for these trials.")
        return
    name = st.selectbox("Statistic", sorted(stats["name"].unique()))
    stats = stats[stats["name"] == name].assign(method=lambda f: f["key"].map(method_of))
    scale = HeatmapScale.of(stats["value"])
    st.caption(
        "Mean over seeds at each evaluation step; one colour scale for all methods"
        + (" (log10: the values span orders of magnitude)." if scale.log else ".")
    )
    columns = st.columns(2)
    for index, method in enumerate(m for m in methods if m in set(stats["method"])):
        figure = layer_heatmap(stats[stats["method"] == method], f"{method}: {name}", scale)
        columns[index % 2].plotly_chart(figure)


def profiles(context: Context, line_of: dict[str, str]) -> None:
    """Each model's (and method's) layer statistics at its trials' last step, along relative
    depth, so models of different depths compare (evaluated pretrained models among them)."""
    stats = data.layer_stats(context.engine, list(line_of))
    if stats.empty:
        st.info("No layer statistics are stored for this task's trials.")
        return
    names = profile_names(stats)
    chosen = st.multiselect(
        "Statistics", names, default=default_profiles(names)[:2], key="cmp:profiles"
    )
    st.caption("Mean over seeds at each trial's last step; x: layer / (layers - 1).")
    columns = st.columns(2)
    for index, name in enumerate(chosen):
        rows = final_profiles(stats, name, line_of)
        columns[index % 2].plotly_chart(layer_profile(rows, name, relative_depth=True))


def pareto(
    context: Context, ranking: Ranking, rows: list[RankRow], trials: list[TrialOutcome]
) -> None:
    axes = [name for name in data.PARETO_AXES if name in context.suite.metrics]
    if not axes:
        st.info(
            "Pareto plots need a final metric among " + ", ".join(data.PARETO_AXES) + " (reported "
            "by pruning and quantization methods); these trials have none."
        )
        return
    done = {o.key: o.method for o in trials if o.status == DONE}
    finals = data.final_values(context.engine, list(done), axes).assign(
        method=lambda f: f["key"].map(done)
    )
    means = finals.groupby(["name", "method"])["value"].mean()
    y = pd.Series({row.method: row.seeds.mean for row in rows}, dtype=float)
    st.caption(
        f"x: mean over the finished seeds; y: the ranked mean {ranking.metric} (failed seeds "
        "count as the worst value). The dotted line joins the methods no other method beats "
        "on both axes."
    )
    for name in axes:
        x = means[name] if name in means.index.get_level_values(0) else pd.Series(dtype=float)
        points = pd.DataFrame({"x": x, "y": y}).dropna().rename_axis("method").reset_index()
        if points.empty:
            st.info(f"No method of this group reports {plain(name)}.")
            continue
        x_direction = METRICS.get(name).direction
        figure = pareto_plot(points, name, ranking.metric, x_direction, ranking.direction)
        st.plotly_chart(figure)


render(current())
