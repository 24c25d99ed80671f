"""Plotly figures of the leaderboard (pure: data frames in, figures out)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative

from harness.core import Direction

PALETTE = qualitative.Dark24  # a suite compares up to ~20 methods: no colour twice
LEGEND_ROW_PX = 30
LOG_SCALE_DECADES = 2.0  # a statistic spanning more than this many decades is drawn in log10
AXIS_TITLES = {"step": "step", "train_time_s": "train time (s)"}


def curve_bands(series: pd.DataFrame) -> pd.DataFrame:
    """Per (method, step): mean and std of the value over seeds, and the mean train time.

    `series` has columns method, step, train_time_s, value; missing values (NaN, inf: a diverged
    evaluation) are left out of the mean.
    """
    grouped = series.groupby(["method", "step"], sort=True)
    return grouped.agg(
        mean=("value", "mean"),
        std=("value", "std"),
        seeds=("value", "count"),
        train_time_s=("train_time_s", "mean"),
    ).reset_index()


def curve_metric(names: list[str], preferred: list[str | None]) -> str | None:
    """The series a learning curve plots: the first of `preferred` that is stored (the ranked
    metric, then the tuning metric, then val_loss: a held-out metric is often measured only at
    the end), else the first stored series; None when none is stored."""
    found = [name for name in preferred if name in names]
    return found[0] if found else (names[0] if names else None)


def learning_curves(series: pd.DataFrame, metric: str, x: str) -> go.Figure:
    """Mean over seeds per method with a band of ±1 std, by step or by train time."""
    bands = curve_bands(series)
    figure = go.Figure()
    for index, (method, curve) in enumerate(bands.groupby("method", sort=False)):
        color = PALETTE[index % len(PALETTE)]
        std = curve["std"].fillna(0.0)
        band_x = pd.concat([curve[x], curve[x][::-1]])
        band_y = pd.concat([curve["mean"] + std, (curve["mean"] - std)[::-1]])
        figure.add_scatter(
            x=band_x,
            y=band_y,
            fill="toself",
            fillcolor=color,
            opacity=0.2,
            line={"width": 0},
            hoverinfo="skip",
            legendgroup=method,
            showlegend=False,
        )
        figure.add_scatter(
            x=curve[x], y=curve["mean"], name=method, legendgroup=method, line={"color": color}
        )
    legend_px = 160 + LEGEND_ROW_PX * bands["method"].nunique()  # every method's name shown
    figure.update_layout(
        xaxis_title=AXIS_TITLES.get(x, x),
        yaxis_title=metric,
        margin={"t": 30},
        height=max(380, legend_px),
    )
    return figure


@dataclass(frozen=True)
class HeatmapScale:
    """One colour scale for the heatmaps of several methods, so they compare: linear, or log10
    when the values span orders of magnitude (a vanishing gradient is 1e-9 beside 0.02); zeros
    are drawn at the smallest positive value."""

    zmin: float
    zmax: float
    log: bool
    floor: float = 0.0

    @classmethod
    def of(cls, values: pd.Series) -> HeatmapScale:
        finite = values[np.isfinite(values)]
        positive = finite[finite > 0]
        if finite.empty:
            return cls(0.0, 1.0, log=False)
        low, high = float(finite.min()), float(finite.max())
        if low < 0 or positive.empty:
            return cls(low, high, log=False)
        floor = float(positive.min())
        if np.log10(high / floor) <= LOG_SCALE_DECADES:
            return cls(low, high, log=False)
        return cls(float(np.log10(floor)), float(np.log10(high)), log=True, floor=floor)

    def z(self, grid: np.ndarray) -> np.ndarray:
        return np.log10(np.maximum(grid, self.floor)) if self.log else grid


def layer_heatmap(stats: pd.DataFrame, title: str, scale: HeatmapScale) -> go.Figure:
    """A (layer x step) heatmap of a statistic averaged over seeds (columns step, layer, value),
    on the colour scale shared by the methods compared."""
    grid = stats.pivot_table(index="layer", columns="step", values="value", aggfunc="mean")
    heatmap = go.Heatmap(
        z=scale.z(grid.to_numpy()),
        x=grid.columns,
        y=grid.index,
        zmin=scale.zmin,
        zmax=scale.zmax,
        colorscale="Viridis",
        colorbar={"title": {"text": "log10" if scale.log else ""}},
    )
    figure = go.Figure(heatmap)
    figure.update_layout(
        title=title, xaxis_title="step", yaxis_title="layer", margin={"t": 40}, height=320
    )
    return figure


def layer_profile(stats: pd.DataFrame, title: str, relative_depth: bool = False) -> go.Figure:
    """A statistic along depth, one line per `line` (columns layer, value, line), averaged over
    the rows of a line and layer; `relative_depth` puts layer l of L at l / (L - 1), so models of
    different depths compare."""
    figure = go.Figure()
    for index, (line, rows) in enumerate(stats.groupby("line", sort=False)):
        profile = rows.groupby("layer")["value"].mean()
        depth = profile.index.to_numpy(dtype=float)
        x = depth / max(depth.max(), 1.0) if relative_depth else depth
        color = PALETTE[index % len(PALETTE)]
        figure.add_scatter(x=x, y=profile.to_numpy(), name=str(line), line={"color": color})
    figure.update_layout(
        title=title,
        xaxis_title="relative depth" if relative_depth else "layer",
        xaxis={"dtick": None if relative_depth else 1},
        yaxis_title=title,
        margin={"t": 40},
        height=300,
    )
    return figure


def head_heatmap(stats: pd.DataFrame, title: str) -> go.Figure:
    """A (layer x head) heatmap (columns layer, head, value)."""
    grid = stats.pivot_table(index="layer", columns="head", values="value", aggfunc="mean")
    heatmap = go.Heatmap(z=grid.to_numpy(), x=grid.columns, y=grid.index, colorscale="Viridis")
    figure = go.Figure(heatmap)
    figure.update_layout(
        title=title, xaxis_title="head", yaxis_title="layer", margin={"t": 40}, height=320
    )
    return figure


def pareto_front(x: np.ndarray, y: np.ndarray, x_dir: Direction, y_dir: Direction) -> np.ndarray:
    """Which points no other point dominates (at least as good on both axes, better on one)."""
    gx, gy = -Direction(x_dir).gain(x), -Direction(y_dir).gain(y)
    no_worse = (gx[None, :] <= gx[:, None]) & (gy[None, :] <= gy[:, None])
    better = (gx[None, :] < gx[:, None]) | (gy[None, :] < gy[:, None])
    return ~(no_worse & better).any(axis=1)


def pareto_plot(
    points: pd.DataFrame, x_name: str, y_name: str, x_dir: Direction, y_dir: Direction
) -> go.Figure:
    """Methods as points (columns method, x, y) and the Pareto front through the best of them."""
    front = pareto_front(points["x"].to_numpy(), points["y"].to_numpy(), x_dir, y_dir)
    frontier = points[front].sort_values("x")
    figure = go.Figure()
    figure.add_scatter(
        x=frontier["x"], y=frontier["y"], mode="lines", name="Pareto front", line={"dash": "dot"}
    )
    figure.add_scatter(
        x=points["x"], y=points["y"], mode="markers+text", text=points["method"], name="methods"
    )
    figure.update_traces(textposition="top center", selector={"mode": "markers+text"})
    figure.update_layout(xaxis_title=x_name, yaxis_title=y_name, margin={"t": 30}, height=380)
    return figure


ALERT_MARKERS = {
    "regression": ("red", "x"),
    "status": ("purple", "x"),
    "suspected": ("orange", "diamond"),
    "improvement": ("green", "triangle-up"),
}


def trend_plot(history: pd.DataFrame, alerts: pd.DataFrame, metric: str) -> go.Figure:
    """Mean per method per nightly run with its CI as a band (history: run, method, mean, ci_low,
    ci_high), and the alerts on the curve (alerts: run, method, mean, kind, acknowledged); an
    acknowledged alert is drawn hollow."""
    figure = go.Figure()
    for index, (method, line) in enumerate(history.groupby("method", sort=True)):
        color = PALETTE[index % len(PALETTE)]
        band = line.dropna(subset=["ci_low", "ci_high"])
        figure.add_scatter(
            x=pd.concat([band["run"], band["run"][::-1]]),
            y=pd.concat([band["ci_high"], band["ci_low"][::-1]]),
            fill="toself",
            fillcolor=color,
            opacity=0.2,
            line={"width": 0},
            hoverinfo="skip",
            legendgroup=method,
            showlegend=False,
        )
        figure.add_scatter(
            x=line["run"],
            y=line["mean"],
            mode="lines+markers",
            name=method,
            legendgroup=method,
            line={"color": color},
        )
    for kind, (color, symbol) in ALERT_MARKERS.items():
        marked = alerts[alerts["kind"] == kind]
        if marked.empty:
            continue
        figure.add_scatter(
            x=marked["run"],
            y=marked["mean"],
            mode="markers",
            name=kind,
            text=[
                f"#{a.id} {a.method}{' (acknowledged)' if a.acknowledged else ''}"
                for a in marked.itertuples()
            ],
            marker={
                "color": color,
                "size": 14,
                "symbol": [symbol + ("-open" if ack else "") for ack in marked["acknowledged"]],
                "line": {"width": 2, "color": color},
            },
        )
    figure.update_layout(
        xaxis_title="nightly run", yaxis_title=metric, xaxis_type="category", height=420
    )
    return figure


VERDICT_COLORS = {
    "reproduced": "#2ca02c",
    "contradicted": "#d62728",
    "inconclusive": "#7f7f7f",
}


def forest_plot(rows: pd.DataFrame) -> go.Figure:
    """The findings forest plot: each claim and recipe's difference method - than with its 95% CI
    (columns label, delta, low, high, verdict, margin), coloured by verdict; a tie's ±margin as
    grey ticks, zero as a dashed line."""
    figure = go.Figure()
    for verdict, color in VERDICT_COLORS.items():
        shown = rows[rows["verdict"] == verdict]
        if shown.empty:
            continue
        figure.add_scatter(
            x=shown["delta"],
            y=shown["label"],
            mode="markers",
            name=verdict,
            marker={"color": color, "size": 10},
            error_x={
                "type": "data",
                "symmetric": False,
                "array": shown["high"] - shown["delta"],
                "arrayminus": shown["delta"] - shown["low"],
            },
        )
    ties = rows.dropna(subset=["margin"])
    for sign in (-1, 1):
        figure.add_scatter(
            x=sign * ties["margin"],
            y=ties["label"],
            mode="markers",
            marker={"symbol": "line-ns-open", "size": 16, "color": "grey"},
            name="tie margin",
            showlegend=sign == 1 and not ties.empty,
        )
    figure.add_vline(x=0, line_dash="dash", line_color="black")
    figure.update_layout(
        xaxis_title="difference method - than (95% CI)",
        yaxis={"autorange": "reversed", "automargin": True},
        margin={"t": 30},
        height=120 + 40 * len(rows),
    )
    return figure
