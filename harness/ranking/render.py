"""Renderers of `harness.ranking.table.Table`: terminal (rich), markdown, CSV, LaTeX, JSON."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeGuard

from harness.ranking.records import Ranking
from harness.ranking.table import Table, findings_table, tables
from harness.repro import rerun_trial

if TYPE_CHECKING:
    import rich.table

Format = Literal["table", "json", "csv", "md", "latex"]
FORMATS: tuple[str, ...] = ("table", "json", "csv", "md", "latex")


def is_format(name: str) -> TypeGuard[Format]:
    """Whether `name` is one of FORMATS."""
    return name in FORMATS


VERDICT_STYLES = {
    "better": "green",
    "worse": "red",
    "reproduced": "green",
    "contradicted": "red",
    "flipped": "yellow",
    "recipe-dependent": "yellow",
    "compatible": "yellow",
    "not tested": "dim",
}


def rich_table(table: Table) -> rich.table.Table:
    """A rich Table, one section per group; cells fold instead of being cut with an ellipsis."""
    from rich.markup import escape
    from rich.table import Table as RichTable

    keyed = any(section.keys for section in table.sections)
    out = RichTable(title=table.title)
    for column in (["task", "model"] if keyed else []) + table.header:
        out.add_column(column, overflow="fold")
    for section in table.sections:
        for row in section.rows:
            style = next((VERDICT_STYLES[c.style] for c in row if c.style in VERDICT_STYLES), None)
            lead = [section.keys.get("task", ""), section.keys.get("model", "")] if keyed else []
            out.add_row(*map(escape, lead + [cell.text for cell in row]), style=style)
        out.add_section()
    return out


def to_text(ranking: Ranking, width: int | None = None, color: bool = False) -> str:
    """The tables as terminal text, `width` columns wide at most (None: as wide as needed, never
    truncated), with the warnings below."""
    from rich.console import Console

    out = io.StringIO()
    console = Console(
        file=out,
        width=width or 100_000,
        color_system="standard" if color else None,
        force_terminal=color,
    )
    for table in all_tables(ranking):
        console.print(rich_table(table), soft_wrap=width is None)
    for note in tables(ranking)[0].notes:
        console.print(f"warning: {note}", markup=False, highlight=False, soft_wrap=True)
    text = out.getvalue()
    return text if width else "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


def all_tables(ranking: Ranking) -> list[Table]:
    """The ranking's tables, and the findings table when the suite states claims."""
    found = findings_table(ranking)
    return tables(ranking) + ([found] if found else [])


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

    return "\n".join([line(header), line(["---"] * len(header)), *map(line, rows)])


def table_md(table: Table, level: int = 3) -> str:
    """One markdown table per section, under a heading of `level` (none for untitled ones)."""
    parts = []
    for section in table.sections:
        if section.title:
            parts.append(f"{'#' * level} {section.title}")
        parts.append(_md_table(table.header, [[c.text for c in row] for row in section.rows]))
    return "\n\n".join(parts)


def to_markdown(ranking: Ranking) -> str:
    groups, overall = tables(ranking)
    parts = [f"## {groups.title}", table_md(groups)]
    parts += [f"### {overall.title}", table_md(overall)]
    if (found := findings_table(ranking)) is not None:
        parts += [f"### {found.title}", table_md(found)]
    parts += [f"> warning: {note}" for note in groups.notes]
    return "\n\n".join(parts) + "\n"


def to_csv(ranking: Ranking) -> str:
    """The group table's values (full precision; empty for none), task and model first."""
    table = tables(ranking)[0]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["task", "model", *table.header])
    for section in table.sections:
        lead = [section.keys.get("task", ""), section.keys.get("model", "")]
        writer.writerows(
            lead + ["" if c.value is None else c.value for c in row] for row in section.rows
        )
    return out.getvalue()


def to_json(
    ranking: Ranking,
    suite_path: str | None = None,
    costs: Mapping[str, Mapping[str, Any]] | None = None,
) -> str:
    """The ranking's records, and its tables as values and display strings; with the suite's
    file, each ranked trial carries the `command` that reruns it (`harness.repro`); with
    `costs` (by trial key), what it cost (`harness.runner.cost`)."""
    data = ranking.to_dict()
    for row in data["rows"]:
        for trial in row["trials"]:
            if suite_path is not None:
                trial["command"] = rerun_trial(suite_path, row | trial)
            if costs is not None:
                trial["cost"] = dict(costs.get(trial["key"], {}))
    data["tables"] = [table.to_dict() for table in all_tables(ranking)]
    return json.dumps(data, indent=2)


LATEX_SPECIAL = {c: "\\" + c for c in "&%$#_{}"} | {
    "\\": r"\textbackslash{}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "±": r"$\pm$",
    "Δ": r"$\Delta$",
    "\u2013": "--",
}


def _tex(text: str) -> str:
    return "".join(LATEX_SPECIAL.get(c, c) for c in text)


def table_latex(table: Table) -> str:
    """A booktabs tabular, one \\midrule-separated block per section."""
    keyed = any(section.keys for section in table.sections)
    header = (["task", "model"] if keyed else []) + table.header

    def line(cells: list[str]) -> str:
        return " & ".join(map(_tex, cells)) + r" \\"

    blocks = [
        "\n".join(
            line(
                ([s.keys.get("task", ""), s.keys.get("model", "")] if keyed else [])
                + [c.text for c in row]
            )
            for row in s.rows
        )
        for s in table.sections
    ]
    return "\n".join(
        [
            rf"\begin{{tabular}}{{{'l' * len(header)}}}",
            r"\toprule",
            line(header),
            r"\midrule",
            "\n\\midrule\n".join(blocks),
            r"\bottomrule",
            r"\end{tabular}",
        ]
    )


def to_latex(ranking: Ranking) -> str:
    groups, overall = tables(ranking)
    found = findings_table(ranking)
    extra = f"\n% {_tex(found.title)}\n{table_latex(found)}\n" if found else ""
    return f"% {_tex(groups.title)}\n{table_latex(groups)}\n\n{table_latex(overall)}\n{extra}"


FORMATTERS: dict[str, Callable[[Ranking], str]] = {
    "table": to_text,
    "json": to_json,
    "csv": to_csv,
    "md": to_markdown,
    "latex": to_latex,
}


def format_ranking(ranking: Ranking, fmt: Format) -> str:
    """The ranking as text: a rendered table, JSON, CSV, markdown or a LaTeX tabular."""
    if fmt not in FORMATTERS:
        raise ValueError(f"unknown format '{fmt}' (known: {', '.join(FORMATTERS)})")
    return FORMATTERS[fmt](ranking)
