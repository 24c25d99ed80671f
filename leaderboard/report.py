"""`layerbench report SUITE`: a markdown report of a suite's stored results with static figures,
drawn by the leaderboard's own plotting code (`leaderboard.charts`, plotly) and exported to PNG
by kaleido, which drives the system's Chromium (Debian's `chromium`; `make chromium`).

The report holds the ranked tables of `layerbench rank --format md` (with the Findings block when
the suite states claims) and, per (task, model) group: learning curves with ±1 std seed bands,
layer heatmaps of gradient norm and hidden RMS by depth and step (one per method, one colour
scale), Pareto plots of compression metrics vs the ranked metric; and the findings forest plot.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from harness.claims import Finding
from harness.core import Status
from harness.ranking import Ranking, RankRow
from harness.ranking.render import to_markdown
from harness.ranking.suite import RankOverrides, RankPlan, rank_suite
from harness.registry import METRICS
from harness.spec.schema import Suite
from leaderboard import data
from leaderboard.charts import (
    HeatmapScale,
    curve_metric,
    forest_plot,
    layer_heatmap,
    learning_curves,
    pareto_plot,
)

if TYPE_CHECKING:
    import plotly.graph_objects as go
    from sqlalchemy import Engine

LAYER_STATS = ("grad_norm", "hidden_rms")
FIGURES = "figures"
WIDTH = 900
HEIGHT = 450
EXPORT_TRIES = 2
"""Pixels of a figure without a layout height."""


class ReportError(RuntimeError):
    """The report cannot be written (no stored results, no browser for the figures)."""


@dataclass(frozen=True)
class Figure:
    """A figure of the report: its file name, the heading it goes under and its caption."""

    name: str
    heading: str
    caption: str
    figure: go.Figure


def write_report(
    engine: Engine, suite: Suite, plan: RankPlan, out: Path, metric: str | None = None
) -> Path:
    """Write `out/report.md` and `out/figures/*.png` for `plan` (the suite's trials to rank),
    ranked by `metric` (default: the suite's); returns the markdown file."""
    ranking = rank_suite(engine, plan, RankOverrides(metric=metric))
    if ranking is None:
        why = "".join(f"\n{line}" for line in plan.unstored or ())
        raise ReportError(f"no stored results for suite '{suite.suite}'{why}")
    figures = [f for group in groups(ranking) for f in group_figures(engine, ranking, *group)]
    if ranking.findings:
        figures.append(findings_figure(ranking.findings))
    (out / FIGURES).mkdir(parents=True, exist_ok=True)
    export(figures, out / FIGURES)
    path = out / "report.md"
    path.write_text(markdown(suite, ranking, figures), encoding="utf-8")
    return path


def groups(ranking: Ranking) -> list[tuple[str, str, list[RankRow]]]:
    found: dict[tuple[str, str], list[RankRow]] = {}
    for row in ranking.rows:
        found.setdefault((row.task, row.model), []).append(row)
    return [(task, model, rows) for (task, model), rows in found.items()]


def slug(*parts: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", "_".join(parts)).strip("-")


def group_figures(
    engine: Engine, ranking: Ranking, task: str, model: str, rows: list[RankRow]
) -> list[Figure]:
    """Learning curves, layer heatmaps and Pareto plots of one (task, model) group."""
    method_of = {trial["key"]: row.method for row in rows for trial in row.trials}
    heading = f"{task} / {model}"
    found = []
    name = curve_metric(
        data.series_names(engine, list(method_of)), [ranking.metric, ranking.tune_metric]
    )
    if name is not None:
        series = data.series(engine, list(method_of), name)
        series["method"] = series["key"].map(method_of)
        found.append(
            Figure(
                slug(task, model, "curves"),
                heading,
                f"{name} by step: mean over seeds, band ±1 std",
                learning_curves(series, name, "step"),
            )
        )
    stats = data.layer_stats(engine, list(method_of))
    for stat in LAYER_STATS:
        chosen = stats[stats["name"] == stat].assign(method=lambda f: f["key"].map(method_of))
        if chosen.empty:
            continue
        scale = HeatmapScale.of(chosen["value"])
        for method in (row.method for row in rows if row.method in set(chosen["method"])):
            found.append(
                Figure(
                    slug(task, model, stat, method),
                    heading,
                    f"{method}: {stat} by layer and step (mean over seeds; one scale per stat"
                    f"{', log10' if scale.log else ''})",
                    layer_heatmap(chosen[chosen["method"] == method], f"{method}: {stat}", scale),
                )
            )
    found += pareto_figures(engine, ranking, heading, rows, method_of)
    return found


def pareto_figures(
    engine: Engine,
    ranking: Ranking,
    heading: str,
    rows: list[RankRow],
    method_of: dict[str, str],
) -> list[Figure]:
    """The compression metric of each method (mean over its finished seeds) vs the ranked mean."""
    done = {t["key"]: row.method for row in rows for t in row.trials if t["status"] == Status.DONE}
    finals = data.final_values(engine, list(done), data.PARETO_AXES)
    if finals.empty:
        return []
    means = finals.assign(method=finals["key"].map(done)).groupby(["name", "method"])["value"]
    y = pd.Series({row.method: row.seeds.mean for row in rows}, dtype=float)
    found = []
    for name, x in means.mean().groupby(level=0):
        points = pd.DataFrame({"x": x.droplevel(0), "y": y}).dropna()
        points = points.rename_axis("method").reset_index()
        if points.empty:
            continue
        figure = pareto_plot(
            points, str(name), ranking.metric, METRICS.get(str(name)).direction, ranking.direction
        )
        found.append(
            Figure(
                slug(heading, "pareto", str(name)),
                heading,
                f"{name} vs mean {ranking.metric}; dotted: the Pareto front",
                figure,
            )
        )
    return found


def findings_figure(findings: list[Finding]) -> Figure:
    rows = [
        {
            "label": f"#{f.index} {f.method} vs {f.than}: {c.model}",
            "delta": c.delta,
            "low": c.ci_low,
            "high": c.ci_high,
            "verdict": c.verdict,
            "margin": f.margin,
        }
        for f in findings
        for c in f.checks
        if c.delta is not None
    ]
    frame = pd.DataFrame(rows, columns=["label", "delta", "low", "high", "verdict", "margin"])
    frame = frame.astype({"delta": float, "low": float, "high": float, "margin": float})
    return Figure(
        "findings_forest",
        "Findings",
        "each claim and recipe: the difference method - than with its 95% t-interval, by verdict",
        forest_plot(frame),
    )


def export(figures: list[Figure], folder: Path) -> None:
    """All figures to PNG in one kaleido session (one Chromium start). A figure kaleido could
    not draw (a render past its 90 s timeout on a loaded machine) is only in a return value that
    plotly drops, so the files are checked: the missing ones are drawn once more, and a figure
    still missing is an error naming it."""
    paths = {f.name: folder / f"{f.name}.png" for f in figures}
    for path in paths.values():
        path.unlink(missing_ok=True)  # an older report's image must not pass for this one's
    missing = figures
    for _ in range(EXPORT_TRIES):
        if not missing:
            return
        write_images(missing, paths)
        missing = [f for f in missing if not paths[f.name].exists()]
    if missing:
        raise ReportError(
            f"kaleido drew no image for {', '.join(f.name for f in missing)} "
            f"(tried {EXPORT_TRIES} times): is the machine overloaded?"
        )


def write_images(figures: list[Figure], paths: dict[str, Path]) -> None:
    import plotly.io as pio

    try:
        pio.write_images(
            [f.figure for f in figures],
            [paths[f.name] for f in figures],
            format="png",
            width=WIDTH,
            height=[f.figure.layout.height or HEIGHT for f in figures],
        )
    except RuntimeError as error:
        if not chrome_missing(error):
            raise
        raise ReportError(
            "kaleido needs a Chromium to draw the figures: install Debian's chromium "
            "(`make chromium`)"
        ) from None


def chrome_missing(error: BaseException) -> bool:
    """Whether kaleido found no browser: its ChromeNotFoundError, raised as is or (by plotly)
    as a RuntimeError raised while handling it."""
    from kaleido.errors import ChromeNotFoundError

    return isinstance(error, ChromeNotFoundError) or isinstance(
        error.__context__, ChromeNotFoundError
    )


def markdown(suite: Suite, ranking: Ranking, figures: list[Figure]) -> str:
    """The report: description, the ranked tables, then the figures under their headings."""
    parts = [f"# {suite.suite}", suite.description.strip(), to_markdown(ranking).strip()]
    parts.append("## Figures")
    heading = None
    for figure in figures:
        if figure.heading != heading:
            heading = figure.heading
            parts.append(f"### {heading}")
        parts.append(f"![{figure.caption}]({FIGURES}/{figure.name}.png)\n\n*{figure.caption}*")
    return "\n\n".join(part for part in parts if part) + "\n"
