"""`layerbench report SUITE --html FILE`: the report as one self-contained HTML file.

No server and no network: the plotly bundle is inlined once and every figure is interactive
(plotly's own HTML), so the file can be attached to a review or a chat and opened offline (as
Benchopt publishes one page per benchmark). It holds the ranked tables with their tie groups and
the findings block (`harness.ranking.table`, the cells `layerbench rank` prints), the warnings,
the figures of the markdown report (`leaderboard.report`: learning curves, layer heatmaps,
Pareto plots, the findings forest plot), and what produced them: the command, the suite runs
and the environments the trials recorded, and the machine that wrote the report.
"""

from __future__ import annotations

import json
import platform
import shlex
from collections import Counter
from datetime import UTC, datetime
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING

from harness.env import git_commit, package_versions
from harness.ranking import Ranking
from harness.ranking.render import all_tables
from harness.ranking.suite import RankOverrides, RankPlan, rank_suite
from harness.ranking.table import Table
from harness.spec.schema import Suite
from harness.store.db import redact
from leaderboard import data
from leaderboard.findings import VERDICT_COLOURS
from leaderboard.report import Figure, ReportError, findings_figure, group_figures, groups

if TYPE_CHECKING:
    from sqlalchemy import Engine

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; padding: 0 1em; max-width: 1400px; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 14px; max-width: 100%; }
th, td { border-bottom: 1px solid #dadce0; padding: 4px 8px; text-align: left; }
th, td { max-width: 24em; overflow-wrap: break-word; }
td { vertical-align: top; }
th { background: #f1f3f4; }
td.section { font-weight: bold; background: #fafafa; }
.label { color: white; border-radius: 4px; padding: 1px 6px; display: inline-block; }
.warning { color: #b06000; }
pre { background: #f1f3f4; padding: 8px; overflow-x: auto; }
figure { margin: 1em 0; } figcaption { font-style: italic; color: #5f6368; }
"""
LABEL_COLOURS = VERDICT_COLOURS | {"better": "#1e8e3e", "worse": "#d93025"}


def write_html(
    engine: Engine,
    suite: Suite,
    plan: RankPlan,
    path: Path,
    command: str,
    metric: str | None = None,
) -> Path:
    """Write the report of `plan` (the suite's trials to rank) to `path`, ranked by `metric`
    (default: the suite's); `command` is the command line that asked for it."""
    ranking = rank_suite(engine, plan, RankOverrides(metric=metric))
    if ranking is None:
        raise ReportError(
            f"no stored results for suite '{suite.suite}': run it with `layerbench run`"
        )
    figures = [f for group in groups(ranking) for f in group_figures(engine, ranking, *group)]
    if ranking.findings:
        figures.append(findings_figure(ranking.findings))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(html_page(engine, suite, ranking, figures, command), encoding="utf-8")
    return path


def html_page(
    engine: Engine, suite: Suite, ranking: Ranking, figures: list[Figure], command: str
) -> str:
    parts = [
        f"<h1>{escape(suite.suite)}</h1>",
        f"<p>{escape(suite.description.strip())}</p>" if suite.description.strip() else "",
        *(table_html(table) for table in all_tables(ranking)),
        *(f'<p class="warning">warning: {escape(note)}</p>' for note in ranking.warnings),
        "<h2>Figures</h2>",
        figures_html(figures),
        provenance_html(engine, suite.suite, command),
    ]
    body = "\n".join(part for part in parts if part)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(suite.suite)}: LayerBench report</title><style>{STYLE}</style>"
        f"</head><body>\n{body}\n</body></html>\n"
    )


def table_html(table: Table) -> str:
    """A `harness.ranking.table.Table` as an HTML table: a heading row per section, verdicts
    as coloured labels, empty cells as the table's en dash."""
    keyed = any(section.title for section in table.sections)
    head = "".join(f"<th>{escape(column)}</th>" for column in table.header)
    rows = []
    for section in table.sections:
        if keyed:
            rows.append(
                f'<tr><td class="section" colspan="{len(table.header)}">'
                f"{escape(section.title)}</td></tr>"
            )
        for row in section.rows:
            rows.append("<tr>" + "".join(cell_html(c.text, c.style) for c in row) + "</tr>")
    return (
        f"<h2>{escape(table.title)}</h2>\n<table><thead><tr>{head}</tr></thead><tbody>"
        + "\n".join(rows)
        + "</tbody></table>"
    )


def cell_html(text: str, style: str | None) -> str:
    colour = LABEL_COLOURS.get(style or "")
    if colour is None:
        return f"<td>{escape(text)}</td>"
    return f'<td><span class="label" style="background:{colour}">{escape(text)}</span></td>'


def figures_html(figures: list[Figure]) -> str:
    """Each figure under its heading; the first carries the whole plotly bundle inline."""
    parts, heading = [], None
    for index, figure in enumerate(figures):
        if figure.heading != heading:
            heading = figure.heading
            parts.append(f"<h3>{escape(heading)}</h3>")
        plot = figure.figure.to_html(
            full_html=False, include_plotlyjs=index == 0, config={"displaylogo": False}
        )
        parts.append(f"<figure>{plot}<figcaption>{escape(figure.caption)}</figcaption></figure>")
    return "\n".join(parts) if parts else "<p>No stored series or layer statistics.</p>"


def provenance_html(engine: Engine, suite: str, command: str) -> str:
    """The command, the suite runs that stored the results, the environments the trials
    recorded (with how many trials each), and the machine that wrote this file."""
    runs = "".join(f"<li>{escape(run.label)}</li>" for run in data.suite_runs(engine, suite))
    environments = Counter(
        json.dumps(environment, sort_keys=True)
        for environment in data.trial_environments(engine, suite)
    )
    recorded = "".join(
        f"<li>{count} trials:<pre>{escape(json.dumps(json.loads(env), indent=1))}</pre></li>"
        for env, count in environments.most_common()
    )
    here = {
        "written": datetime.now(UTC).isoformat(timespec="seconds"),
        "git_commit": git_commit(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        **package_versions(),
    }
    return (
        "<h2>How this report was made</h2>"
        f"<p>Command:</p><pre>{escape(command)}</pre>"
        f"<p>Suite runs that stored the results:</p><ul>{runs or '<li>none recorded</li>'}</ul>"
        f"<p>Environments the trials recorded:</p><ul>{recorded or '<li>none</li>'}</ul>"
        f"<p>This file was written on:</p><pre>{escape(json.dumps(here, indent=1))}</pre>"
    )


def report_command(suite_path: Path, db: str | None, html: Path, metric: str | None) -> str:
    """The `layerbench report` command line that writes this file (the password left out)."""
    words = ["layerbench", "report", str(suite_path)]
    words += ["--db", redact(db)] if db else []
    words += ["--html", str(html)]
    words += ["--metric", metric] if metric else []
    return shlex.join(words)
