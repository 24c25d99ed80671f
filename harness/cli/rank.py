"""`layerbench plan`, `rank`, `report` and `status`: reading what the store holds."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from harness.cli.common import DbOption, SuiteArg, app, fail, load, open_db
from harness.console import console
from harness.core import Status, TrialOutcome

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from harness.ranking import Ranking
    from harness.ranking.suite import RankPlan
    from harness.records import PlannedTrial
    from harness.spec import Suite

TUNING_RULES = {
    "per_method": "per method, the sweep point with the best mean {metric} over its seeds",
    "per_seed": "per seed, the sweep point with the best {metric} (optimistic)",
}


@app.command()
def plan(
    suite_path: SuiteArg,
    db: DbOption = None,
    design: Annotated[
        bool,
        typer.Option(
            "--design",
            help="Print per claim the schedule's false-decision rate, power, expected seeds "
            "and CPU-minutes (simulation; docs/sequential.md) instead of the trials.",
        ),
    ] = False,
    reps: Annotated[int, typer.Option(help="Simulated families per row (--design).")] = 2000,
    pilot_s: Annotated[
        float | None,
        typer.Option(help="Seconds a trial takes (--design; default: the stored trials')."),
    ] = None,
) -> None:
    """Print the suite's trials (every sweep point), which are stored, their value of the ranking
    metric, and (*) the sweep points that `rank` reports (`rank.tuning`); with --design, the
    operating characteristics of its seed schedule."""
    from harness.spec.plan import plan_suite
    from harness.store.queries import stored_outcomes, trial_statuses

    suite = load(suite_path)
    trials, metric = plan_suite(suite), suite.rank.metric
    engine = open_db(db)
    stored = {o.key: o for o in stored_outcomes(engine, [t.key for t in trials], suite=suite.suite)}
    if design:
        from harness.cli.design import print_design

        print_design(suite, list(stored.values()), reps, pilot_s)
        return
    statuses: dict[str, str] = dict(trial_statuses(engine, [t.key for t in trials]))
    if suite.schedule is not None:
        from harness.service.rounds import unneeded_trials

        for key in unneeded_trials(suite, trials, list(stored.values())):
            statuses.setdefault(key, NOT_NEEDED)
    # one unwrapped print: rendering 1,000 lines one by one was a third of `plan`'s time
    lines = plan_lines(suite, trials, stored, statuses)
    console.print("\n".join(lines), markup=False, highlight=False, soft_wrap=True)
    counts = Counter(status_of(suite, t, statuses) for t in trials)
    console.print(f"{len(trials)} trials: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    if (schedule := suite.schedule) is not None:
        from harness.service.rounds import most_trials

        initial = sum(t.seed < schedule.initial for t in trials)
        console.print(
            f"sequential seeds: {initial} initial trials (seeds 0-{schedule.initial - 1}), "
            f"then {schedule.step} seed(s) at a time for undecided comparisons (of each tuned "
            f"method, the sweep point chosen on the initial seeds), at most "
            f"{most_trials(suite, trials)} trials (seeds 0-{schedule.max - 1}); "
            "docs/sequential.md"
        )
    if any(trial.sweep for trial in trials):
        metric = suite.rank.tune_metric or suite.rank.metric
        initial = suite.schedule is not None and suite.rank.tuning == "per_method"
        console.print(
            f"* the tuned result: {TUNING_RULES[suite.rank.tuning].format(metric=metric)}"
            + (" (its initial seeds: later seeds run the chosen point)" if initial else "")
        )


IF_NEEDED = "if needed"
"""`plan`'s status of a sequential suite's later seed that has not run."""
NOT_NEEDED = "not needed"
"""`plan`'s status of a later seed of a sweep point the first look did not choose."""


def status_of(suite: Suite, trial: PlannedTrial, statuses: dict[str, str]) -> str:
    """The trial's stored status (or "not needed"); pending, or "if needed" for a seed beyond a
    sequential schedule's initial ones."""
    later = suite.schedule is not None and trial.seed >= suite.schedule.initial
    return statuses.get(trial.key, IF_NEEDED if later else Status.PENDING)


def plan_lines(
    suite: Suite,
    trials: list[PlannedTrial],
    stored: dict[str, TrialOutcome],
    statuses: dict[str, str],
) -> list[str]:
    """One line per trial: key, status, value of the ranking metric, tuned mark, label."""
    from harness.registry import METRICS
    from harness.spec.rank import tuning_seeds
    from harness.stats.outcomes import metric_value, select_tuned

    metric = suite.rank.metric
    tune_metric = suite.rank.tune_metric or metric
    direction = METRICS.get(tune_metric).direction
    tuned_on = tuning_seeds(suite.schedule)
    tuned = {
        o.key
        for o in select_tuned(stored.values(), tune_metric, direction, suite.rank.tuning, tuned_on)
    }
    lines = []
    for trial in trials:
        value = metric_value(stored[trial.key], metric) if trial.key in stored else None
        shown = "" if value is None else f"{value:.4g}"
        mark = "*" if trial.sweep and trial.key in tuned else " "
        status = status_of(suite, trial, statuses)
        lines.append(f"{trial.key[:12]}  {status:>10}  {shown:>9} {mark} {trial.label}")
    return lines


def current_plan(suite: Suite, engine: Engine, path: Path | None = None) -> RankPlan:
    """What `rank` ranks of the suite file at `path`: its trials as planned now (and why some
    have no stored result), and when its claims were registered (`harness.spec.history`)."""
    from harness.ranking.suite import planned
    from harness.spec.history import registrations
    from harness.spec.plan import plan_suite

    registered = registrations(path, suite.expect, suite.baseline) if path and suite.expect else ()
    return planned(engine, suite, plan_suite(suite), registered)


def build_ranking(
    suite: Suite,
    engine: Engine,
    metric: str | None = None,
    all_points: bool = False,
    path: Path | None = None,
) -> Ranking | None:
    """The ranking of the suite's current trials (`harness.ranking.suite.rank_suite`: the last
    nightly run's when it is newer than `layerbench run`'s)."""
    from harness.lazy_registry import RegistryError
    from harness.ranking.suite import RankOverrides, rank_suite

    overrides = RankOverrides(metric=metric, all_points=all_points)
    try:
        return rank_suite(engine, current_plan(suite, engine, path), overrides)
    except RegistryError as error:
        raise fail(str(error)) from None


def trial_costs(engine: Engine, ranking: Ranking) -> dict[str, dict[str, Any]]:
    """What each ranked trial cost, by key: its cost metrics (`COST_METRICS`, where stored) and
    its device's name (the stored environment's)."""
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from harness.store.models import Result, Trial
    from harness.trial_metrics import COST_METRICS

    keys = [trial["key"] for row in ranking.rows for trial in row.trials]
    costs: dict[str, dict[str, Any]] = {key: {} for key in keys}
    with Session(engine) as session:
        found = select(Trial.key, Trial.environment).where(Trial.key.in_(keys))
        for key, environment in session.execute(found):
            costs[key]["device_name"] = (environment or {}).get("device_name")
        metrics = (
            select(Trial.key, Result.name, Result.value)
            .join(Result, Result.trial_id == Trial.id)
            .where(Trial.key.in_(keys), Result.name.in_(COST_METRICS))
        )
        for key, name, value in session.execute(metrics):
            costs[key][name] = value
    return costs


def print_ranking(ranking: Ranking | None, width: int | None = None) -> None:
    """The ranking's tables; never cut: as wide as needed unless stdout is a terminal (its
    width) or `width` is given."""
    import sys

    from harness.ranking import to_text

    if ranking is None:
        console.print("no stored results yet")
        return
    terminal = sys.stdout.isatty()
    shown = width or (console.width if terminal else None)
    typer.echo(to_text(ranking, shown, color=terminal), nl=False)


@app.command("rank")
def rank_command(
    suite_path: SuiteArg,
    db: DbOption = None,
    format: Annotated[str, typer.Option("--format", help="table|json|csv|md|latex")] = "table",
    metric: Annotated[str | None, typer.Option(help="Rank by this metric instead.")] = None,
    all_points: Annotated[
        bool, typer.Option("--all", help="Every sweep point as its own row, not tuned.")
    ] = False,
    width: Annotated[
        int | None, typer.Option(min=40, help="Table width (default: the terminal's, or unlimited)")
    ] = None,
) -> None:
    """Rank the suite's methods from the stored results of its current trials."""
    from harness.ranking import FORMATS, format_ranking, is_format
    from harness.ranking.render import to_json

    if not is_format(format):
        raise fail(f"--format must be one of {', '.join(FORMATS)} (got '{format}')")
    suite = load(suite_path)
    engine = open_db(db)
    ranking = build_ranking(suite, engine, metric, all_points, suite_path)
    if ranking is None:
        why = "".join(f"\n{line}" for line in current_plan(suite, engine).unstored or ())
        raise fail(f"no stored results for suite '{suite.suite}'{why}")
    if format == "table":
        print_ranking(ranking, width)
    elif format == "json":
        typer.echo(to_json(ranking, str(suite_path), trial_costs(engine, ranking)))
    else:
        typer.echo(format_ranking(ranking, format))


@app.command()
def report(
    suite_path: SuiteArg,
    db: DbOption = None,
    out: Annotated[
        Path | None, typer.Option(help="Folder of report.md and figures/ (default: reports/SUITE)")
    ] = None,
    metric: Annotated[str | None, typer.Option(help="Rank by this metric instead.")] = None,
    html: Annotated[
        Path | None, typer.Option(help="Write one self-contained HTML file instead (offline).")
    ] = None,
) -> None:
    """Write a markdown report of the suite's stored results with static figures (PNG), or with
    --html one HTML file with interactive figures that opens without a server or network."""
    from harness.lazy_registry import RegistryError
    from leaderboard.html_report import report_command, write_html
    from leaderboard.report import ReportError, write_report

    suite = load(suite_path)
    try:
        folder = out or Path("reports") / suite.suite
        engine = open_db(db)
        if html is not None:
            command = report_command(suite_path, db, html, metric)
            path = write_html(
                engine, suite, current_plan(suite, engine, suite_path), html, command, metric
            )
        else:
            path = write_report(
                engine, suite, current_plan(suite, engine, suite_path), folder, metric
            )
    except (ReportError, RegistryError) as error:
        raise fail(str(error)) from None
    console.print(f"wrote {path}")


@app.command()
def status(db: DbOption = None) -> None:
    """Trials stored per suite and status, those no longer current here (superseded by a
    version change, or their data not installed), and those in progress with the step of
    their last checkpoint."""
    from harness.runner.checkpoint_paths import last_checkpoint_step
    from harness.store.coverage import stale_counts, stale_trials
    from harness.store.queries import in_progress, status_counts

    engine = open_db(db)
    rows = status_counts(engine)
    if not rows:
        console.print("no trials stored")
    for suite, trial_status, count in rows:
        console.print(f"{suite:<30} {trial_status:<9} {count}")
    for suite, reason, count in stale_counts(stale_trials(engine)):
        line = f"{suite:<30} not current: {count} {reason}"
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    for suite, key, label in in_progress(engine):
        step = last_checkpoint_step(key)
        saved = "no checkpoint yet" if step is None else f"last checkpoint at step {step}"
        line = f"{suite:<30} in progress: {label} ({saved})"
        console.print(line, markup=False, highlight=False, soft_wrap=True)
