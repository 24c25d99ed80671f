"""A neutral table model (after HELM's `Table`: header, rows of cells, each with a value and a
display string) built from a `Ranking`; every renderer, the leaderboard and the results docs
consume it, so a number is formatted once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from harness.claims.sequential import SEQUENTIAL_HEADER, describe
from harness.core import Direction, point_label
from harness.ranking.aggregates import scores as aggregate_scores
from harness.ranking.aggregates import standings
from harness.ranking.records import Ranking, RankRow
from harness.registry import AGGREGATES
from harness.stats.intervals import CONFIDENCE_LEVEL

if TYPE_CHECKING:
    from harness.claims import RecipeCheck

MIN, MAX = Direction.MIN, Direction.MAX
EMPTY = "\u2013"  # an en dash
TIE_GROUP = "tie group"
"""The ranks the tests allow, e.g. "1-3" (`harness.stats.ties`)."""
NEVER = "never"
CI_NAMES = {"t": "t-interval", "bootstrap": "percentile bootstrap", "bca": "BCa bootstrap"}


@dataclass(frozen=True)
class Cell:
    """A value (number, string or None) and how it is shown; `style` marks a verdict."""

    value: Any
    text: str
    style: str | None = None


@dataclass(frozen=True)
class Section:
    """Rows under one heading (a (task, model) group)."""

    title: str
    rows: list[list[Cell]]
    keys: dict[str, str] = field(default_factory=dict)
    """What the heading stands for, e.g. {"task": ..., "model": ...}."""


@dataclass(frozen=True)
class Column:
    """A column: `key` names it for code (the leaderboard finds columns by key, never by the
    text shown), `label` is its heading, `better` which way its values are better (None: not
    an ordered quantity)."""

    key: str
    label: str
    better: Direction | None = None


def plain_columns(labels: Sequence[str]) -> list[Column]:
    """Columns keyed by their labels (the ad-hoc tables of docs/results/tables.py)."""
    return [Column(label, label) for label in labels]


@dataclass(frozen=True)
class Table:
    title: str
    columns: list[Column]
    sections: list[Section]
    notes: list[str] = field(default_factory=list)

    @property
    def header(self) -> list[str]:
        """The columns' labels."""
        return [column.label for column in self.columns]

    @property
    def keys(self) -> list[str]:
        return [column.key for column in self.columns]

    def index(self, key: str) -> int:
        """The position of the column `key`."""
        return self.keys.index(key)

    def column(self, key: str) -> list[Cell]:
        """Every cell of the column `key`, section after section."""
        index = self.index(key)
        return [row[index] for section in self.sections for row in section.rows]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the title, the header's labels, the sections and the notes."""
        sections = [asdict(section) for section in self.sections]
        return {
            "title": self.title,
            "header": self.header,
            "sections": sections,
            "notes": self.notes,
        }


def number(x: float | None, spec: str = ".4g") -> Cell:
    return Cell(x, EMPTY if x is None else format(x, spec))


def text(x: str | None) -> Cell:
    return Cell(x, EMPTY if x is None else x)


def ci_label(ranking: Ranking) -> str:
    return f"± {CONFIDENCE_LEVEL:.0%} CI ({ranking.ci})"


def title(ranking: Ranking) -> str:
    better = ranking.direction.word
    target = ranking.target
    tuned = ranking.tune_metric or ranking.metric
    parts = [
        f"{better} is better",
        f"baseline: {ranking.baseline or 'none'}",
        f"95% CI: {CI_NAMES[ranking.ci]}",
        f"tuning: {ranking.tuning}{' (optimistic)' if ranking.tuning == 'per_seed' else ''}"
        + (f" on {tuned}" if tuned != ranking.metric else ""),
        f"alpha {ranking.alpha:g}",
    ]
    if target:
        parts.append(f"target: {target.describe()}")
    return f"{ranking.metric} ({'; '.join(parts)})"


def group_header(ranking: Ranking) -> list[Column]:
    """The columns of `group_table`, in the order of `row_cells`."""
    direction = ranking.direction
    header = [
        Column("rank", "rank", MIN),
        Column("tie_group", TIE_GROUP),
        Column("method", "method"),
        Column("mean", "mean", direction),
        Column("ci", ci_label(ranking)),
        Column("delta", "Δ vs baseline", direction),
        Column("p_value", "p (Holm)"),
        Column("verdict", "verdict"),
        Column("win_rate", "win rate", MAX),
        Column("n_failed", "seeds failed", MIN),
        Column("seeds_needed", "seeds needed"),
    ]
    if ranking.target:
        header += [
            Column("steps_to_target", "steps to target (median)", MIN),
            Column("time_to_target", "time to target (s, median)", MIN),
            Column("n_reached", "reached", MAX),
        ]
    return header


def _mean(row: RankRow) -> Cell:
    if row.seeds.failure is not None:
        return Cell(None, row.seeds.failure)
    return number(row.seeds.mean)


def _half_width(row: RankRow) -> Cell:
    low, high = row.seeds.ci_low, row.seeds.ci_high
    if low is None or high is None:
        return number(None)
    return number((high - low) / 2, ".2g")


def _median(median: float | None, low: float | None, high: float | None) -> Cell:
    if median is None:
        return Cell(None, NEVER)
    interval = f" [{low:.4g}, {high:.4g}]" if low is not None and high is not None else ""
    return Cell(median, f"{median:.4g}{interval}")


def _method(row: RankRow) -> Cell:
    return Cell(row.method, point_label(row.method, row.sweep or {}, separator=" "))


def _excluded(count: int) -> str:
    return f" ({count} excluded: crashed or timed out)" if count else ""


def row_cells(row: RankRow, ranking: Ranking) -> list[Cell]:
    """A row's cells, in the order of `group_header(ranking)`."""
    seeds, versus, to_target = row.seeds, row.versus, row.to_target
    verdict = versus.verdict
    if verdict and versus.decided_by == "failures":
        verdict_text = f"{verdict} (failures)"
    else:
        verdict_text = verdict or EMPTY
    cells = [
        Cell(row.rank, str(row.rank)),
        text(row.tie_group),
        _method(row),
        _mean(row),
        _half_width(row),
        number(versus.delta, "+.3g"),
        number(versus.p_value, ".3g"),
        Cell(verdict, verdict_text, verdict),
        number(row.win_rate, ".3f"),
        Cell(seeds.n_failed, f"{seeds.n_failed}/{seeds.n}" + _excluded(seeds.n_excluded)),
        Cell(
            versus.seeds_needed,
            EMPTY if versus.seeds_needed is None else str(versus.seeds_needed),
        ),
    ]
    if ranking.target:
        cells += [
            _median(to_target.steps_to_target, to_target.steps_ci_low, to_target.steps_ci_high),
            _median(to_target.time_to_target, to_target.time_ci_low, to_target.time_ci_high),
            Cell(
                to_target.n_reached,
                f"{to_target.n_reached}/{seeds.n}" if to_target.n_reached is not None else EMPTY,
            ),
        ]
    return cells


# one seed: the interval and the test are over the examples, not the header's seed statistics
EXAMPLES_NOTE = (
    " (over examples: Wilson CI and exact McNemar for right/wrong outcomes,"
    " bootstrap CI and paired t-test over windows otherwise)"
)


def group_table(ranking: Ranking) -> Table:
    """One section per (task, model) group, rows in rank order."""
    sections: dict[tuple[str, str], list[RankRow]] = {}
    for row in ranking.rows:
        sections.setdefault((row.task, row.model), []).append(row)
    return Table(
        title(ranking),
        group_header(ranking),
        [
            Section(
                f"{task} / {model}" + (EXAMPLES_NOTE if rows[0].unit == "examples" else ""),
                [row_cells(row, ranking) for row in rows],
                {"task": task, "model": model},
            )
            for (task, model), rows in sections.items()
        ],
        list(ranking.warnings),
    )


def overall_table(ranking: Ranking) -> Table:
    """The methods' standing over every group, sorted by `rank.aggregate`."""
    header = [
        Column("position", "position", MIN),
        Column("tie_group", TIE_GROUP),
        Column("method", "method"),
        Column("mean_win_rate", "mean win rate", MAX),
        Column("mean_rank", "mean rank", MIN),
        Column("normalized", "mean / baseline", ranking.direction),
        Column("n_trials", "trials"),
        Column("n_failed", "failed", MIN),
    ]
    if ranking.target:
        header += [
            Column("profile_steps", "profile score (steps)", MAX),
            Column("profile_time", "profile score (time)", MAX),
        ]
    aggregate = AGGREGATES.entry(ranking.aggregate)
    scores = {}
    if aggregate.column is None:  # a registered statistic the table has no column for
        header.append(Column(aggregate.name, aggregate.label, MAX))
        scores = aggregate_scores(aggregate.name, standings(ranking))
    rows = []
    for position, summary in enumerate(ranking.summary, start=1):
        cells = [
            Cell(position, str(position)),
            text(summary.tie_group),
            text(summary.method),
            number(summary.mean_win_rate, ".3f"),
            number(summary.mean_rank, ".2f"),
            number(summary.normalized, ".4g"),
            Cell(summary.n_trials, str(summary.n_trials)),
            Cell(summary.n_failed, str(summary.n_failed)),
        ]
        if ranking.target:
            cells += [number(summary.profile_steps, ".3f"), number(summary.profile_time, ".3f")]
        if aggregate.column is None:
            cells.append(number(scores[summary.method], ".4g"))
        rows.append(cells)
    return Table(f"Overall (by {aggregate.label})", header, [Section("", rows)])


FINDINGS_HEADER = [
    "#",
    "claim",
    "source",
    "recipe",
    "seeds",
    "Δ (method - than)",
    "CI of Δ",
    "p (Holm)",
    "Holm-matched CI of Δ",
    "median Δ",
    "sign test p (+/-)",
    "seeds needed",
    "verdict",
    "claim verdict",
]


def _interval(low: float | None, high: float | None, level: float | None) -> str:
    if low is None or high is None or level is None:
        return EMPTY
    return f"[{low:+.3g}, {high:+.3g}] ({100 * level:.3g}%)"


def _check_cells(check: RecipeCheck, recipe: str) -> list[Cell]:
    """The cells of one recipe's check, from "recipe" to "verdict"."""
    holm_low, holm_high = check.holm_ci or (None, None)
    signs = f" ({check.signs[0]}/{check.signs[1]})"
    needed = EMPTY if check.seeds_needed is None else str(check.seeds_needed)
    verdict = check.verdict_text
    if note := check.sequential_note:
        verdict += f" ({note})"
    verdict += f"; {check.annotation}" if check.annotation else ""
    return [
        text(recipe),
        Cell(check.n, str(check.n) + (f" ({check.excluded} excluded)" if check.excluded else "")),
        number(check.delta, "+.3g"),
        Cell(
            (check.ci_low, check.ci_high),
            _interval(check.ci_low, check.ci_high, check.ci_level),
        ),
        number(check.p_value, ".3g"),
        Cell(check.holm_ci, _interval(holm_low, holm_high, check.holm_level)),
        number(check.median_delta, "+.3g"),
        Cell(check.sign_p, EMPTY if check.sign_p is None else f"{check.sign_p:.3g}{signs}"),
        Cell(check.seeds_needed, check.needed_note or needed),
        Cell(check.verdict, verdict, check.verdict),
    ]


def findings_title(ranking: Ranking) -> str:
    """What the findings table tests, and at which levels."""
    alpha = ranking.alpha
    return (
        f"Findings (alpha {alpha:g}; Holm family: the suite's directional claims, one test per"
        " tested recipe; CI of Δ: Student-t at the level shown, a tie's at 1 - 2 alpha"
        f" (Schuirmann's two one-sided tests at {alpha:g} each); Holm-matched CI: the level"
        " 1 - alpha p/p_Holm, excluding 0 exactly when p (Holm) < alpha; not tested: both"
        " methods stay at the task's trivial predictor on most seeds)"
    )


def findings_table(ranking: Ranking) -> Table | None:
    """One row per claim and recipe (`harness.claims`); None without claims."""
    if not ranking.findings:
        return None
    rows = []
    sequential = any(c.sequential for f in ranking.findings for c in f.checks)
    title, header = findings_title(ranking), list(FINDINGS_HEADER)
    if sequential:
        title = f"Findings (expected claims; alpha {ranking.alpha:g}; {SEQUENTIAL_HEADER})"
        header.insert(header.index("verdict"), "seeds used")
        planned = all(
            c.sequential.looks_plan == "planned"
            for f in ranking.findings
            for c in f.checks
            if c.sequential
        )
        word = "planned-looks" if planned else "anytime"
        header[header.index("CI of Δ")] = f"{word} interval of Δ"
        header[header.index("p (Holm)")] = f"{word} p (Holm)"
    for finding in ranking.findings:
        several = len({check.task for check in finding.checks}) > 1
        checks: list[RecipeCheck | None] = list(finding.checks) or [None]
        for position, check in enumerate(checks):
            lead = position == 0
            cells = [
                Cell(finding.index, str(finding.index)) if lead else text(None),
                text(finding.claim if lead else None),
                text(finding.source if lead else None),
            ]
            if check is None:
                cells += [text(None)] * (len(header) - 4)
            else:
                recipe = f"{check.model} on {check.task}" if several else check.model
                cells += _check_cells(check, recipe)
                if sequential:
                    record = check.sequential
                    cells.insert(-1, text(describe(record) if record else None))
            overall = Cell(finding.verdict, finding.verdict_text, finding.verdict)
            cells.append(overall if lead else text(None))
            rows.append(cells)
    return Table(title, plain_columns(header), [Section("", rows)])


def tables(ranking: Ranking) -> list[Table]:
    return [group_table(ranking), overall_table(ranking)]


def values(table: Table, keys: Sequence[str]) -> list[list[Any]]:
    """The values of the columns `keys`, one list per row, section after section."""
    indices = [table.index(key) for key in keys]
    return [[row[i].value for i in indices] for s in table.sections for row in s.rows]
