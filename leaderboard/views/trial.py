"""Trial page: one trial's config, environment, status and error, metrics and MLflow run."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from harness.core import point_label
from harness.repro import rerun_trial
from harness.store.db import redact
from harness.store.models import Trial
from leaderboard import data
from leaderboard.charts import curve_metric, head_heatmap, layer_profile, learning_curves
from leaderboard.cost import trial_cost
from leaderboard.layers import by_step, default_profiles, heads, peak, profile_names
from leaderboard.links import mlflow_base_url, mlflow_run_url, suite_file, trial_page_url
from leaderboard.state import Context, current, last_declaration, selected_trials
from leaderboard.tables import dashed
from leaderboard.text import plain

TIMINGS = [
    "steps_done",
    "tokens",
    "train_time_s",
    "eval_time_s",
    "wall_time_s",
    "attempts",
    "resumes",
    "recomputed_steps",
]
"""The trial's counters; `resumes`: times it resumed from a checkpoint, `recomputed_steps`: steps
it ran again after its interruptions."""


def render(context: Context) -> None:
    st.title("Trial")
    listing = selected_trials(context)
    if listing.empty:
        st.info("No stored trial matches the filters: widen them in the sidebar.")
        return
    with st.expander(f"Trials of the selection ({len(listing)})"):
        st.dataframe(with_links(listing), hide_index=True, column_config=LINK_COLUMNS)
    key = choose(listing)
    detail = data.trial_detail(context.engine, key)
    if detail is None:
        st.error(f"No trial with key {key} is stored.")
        return
    show(context, detail)


def label(row: pd.Series) -> str:
    point = point_label(row["method"], row["sweep"])
    return f"{point} / {row['model']} / {row['task']} / seed {row['seed']}"


LINK_COLUMNS = {
    "trial": st.column_config.LinkColumn("trial", display_text=r"key=(\w{12})"),
    "MLflow": st.column_config.LinkColumn("MLflow", display_text="open run"),
}


def with_links(listing: pd.DataFrame) -> pd.DataFrame:
    """The listing with a link to each trial's page (and MLflow run, if a server is set)."""
    shown = listing.assign(
        trial=listing["key"].map(trial_page_url), sweep=listing["sweep"].map(str)
    )
    columns = ["trial", "method", "model", "task", "seed", "sweep", "status"]
    if mlflow_base_url() is not None:
        shown["MLflow"] = shown["mlflow_run_id"].map(mlflow_run_url, na_action="ignore")
        columns.append("MLflow")
    return shown[columns]


def choose(listing: pd.DataFrame) -> str:
    """The trial named by the `key` query parameter, or the one picked in the selectbox."""
    keys = list(listing["key"])
    wanted = st.query_params.get("key")
    labels = dict(zip(keys, listing.apply(label, axis=1), strict=True))
    key = st.selectbox(
        "Trial",
        keys,
        index=keys.index(wanted) if wanted in keys else 0,
        format_func=labels.__getitem__,
    )
    st.query_params["key"] = key
    return key


def show(context: Context, detail: data.TrialDetail) -> None:
    trial = detail.trial
    st.subheader(plain(f"{trial.method} / {trial.model} / {trial.task} / seed {trial.seed}"))
    step = f" at step {trial.failed_step}" if trial.failed_step is not None else ""
    st.markdown(f"Status: **{trial.status}**{step} · key `{trial.key}`")
    link = mlflow_run_url(trial.mlflow_run_id)
    if link:
        st.link_button("Open the MLflow run", link)
    if trial.error:
        st.code(trial.error, language="text")
    metrics, timings = st.columns(2)
    metrics.dataframe(
        dashed(pd.DataFrame(sorted(detail.results.items()), columns=["metric", "value"])),
        hide_index=True,
    )
    timings.dataframe(
        dashed(
            pd.DataFrame([(name, getattr(trial, name)) for name in TIMINGS], columns=["", "value"])
        ),
        hide_index=True,
    )
    st.markdown("**What it cost**")
    st.dataframe(trial_cost(detail.results, trial.environment), hide_index=True)
    curve(context, trial.key, f"{trial.method} seed {trial.seed}")
    layers(context, trial.key)
    repro(context, trial)
    config, environment = st.columns(2)
    config.markdown("**Resolved config**")
    config.json(trial.config, expanded=False)
    environment.markdown("**Environment**")
    environment.json(trial.environment or {}, expanded=False)


def curve(context: Context, key: str, name: str) -> None:
    """The ranked metric's series, else the tuning metric's, else val_loss's, saying which."""
    ranked = context.selection.metric
    declared = last_declaration(context.suite)
    tuned = declared.rank.tune_metric if declared else None
    metric = curve_metric(data.series_names(context.engine, [key]), [ranked, tuned, "val_loss"])
    if metric is None:
        st.caption("No metric series is stored for this trial.")
        return
    if metric != ranked:
        st.caption(f"No {plain(ranked)} series is stored for this trial: showing {plain(metric)}.")
    series = data.series(context.engine, [key], metric)
    st.plotly_chart(learning_curves(series.assign(method=name), metric, "step"))


def layers(context: Context, key: str) -> None:
    """Layer profiles: each chosen statistic along depth (a line per evaluation step shown), the
    peak activation, and attention-sink mass per layer and head."""
    stats = data.layer_stats(context.engine, [key])
    st.markdown("**Layer profiles**")
    if stats.empty:
        st.caption("No layer statistics are stored for this trial.")
        return
    names = profile_names(stats)
    chosen = st.multiselect("Layer statistics", names, default=default_profiles(names))
    where = peak(stats)
    if where:
        st.caption(where)
    columns = st.columns(2)
    for index, name in enumerate(chosen):
        columns[index % 2].plotly_chart(layer_profile(by_step(stats, name), name))
    per_head = heads(stats)
    if not per_head.empty:
        st.plotly_chart(head_heatmap(per_head, "attention_sink per head"))


def repro(context: Context, trial: Trial) -> None:
    """The command that reruns this trial (`harness.repro`), from the suite's file if found."""
    path = suite_file(trial.suite)
    record = {name: getattr(trial, name) for name in ("method", "model", "task", "seed")}
    command = rerun_trial(
        path or "SUITE.yaml", record | {"sweep": trial.sweep, "key": trial.key}, redact(context.url)
    )
    st.markdown("**Rerun this trial**")
    st.code(command, language="bash", wrap_lines=True)
    if path is None:
        st.caption(f"No file under suites/ declares `suite: {plain(trial.suite)}`: name yours.")


render(current())
