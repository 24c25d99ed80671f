"""The `layerbench` command (SPEC section 10). Exit codes: 0 ok, 1 trials failed, 2 bad input."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from sqlalchemy import Engine

from harness.cache import offline_unless_hub_reachable
from harness.console import RichProgress, console, errors
from harness.records import ACTIVE_STATUSES, FAILED_STATUSES, PlannedTrial
from harness.registry import (
    FAMILIES,
    MODELS,
    TASKS,
    EvalTaskEntry,
    PretrainedModelEntry,
    RegistryError,
)
from harness.runner.plan import SelectionError, plan_suite, select_trials
from harness.spec import Suite, SuiteError, load_suite
from harness.store.db import DatabaseError, StoreLedger, open_database, suite_run
from harness.store.queries import (
    status_counts,
    stored_outcomes,
    trial_statuses,
    unlogged_count,
)

if TYPE_CHECKING:
    import threading

    from harness.ranking import Ranking
    from harness.ranking.suite import RankPlan
    from harness.records import TrialResult

app = typer.Typer(
    help="LayerBench: benchmark layerwise deep-learning methods.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
db_app = typer.Typer(help="Database maintenance.", no_args_is_help=True)
app.add_typer(db_app, name="db")
data_app = typer.Typer(help="Offline data sets.", no_args_is_help=True)
app.add_typer(data_app, name="data")

SuiteArg = Annotated[Path, typer.Argument(help="A suite YAML file.")]
DbOption = Annotated[
    str | None, typer.Option("--db", help="SQLAlchemy URL (default: $LAYERBENCH_DB or sqlite)")
]


def fail(message: str, code: int = 2) -> typer.Exit:
    errors.print(f"[red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def load(path: Path) -> Suite:
    def announce(plugins: list[str]) -> None:
        errors.print(
            f"[yellow]note:[/] {path} lists plugins; importing them runs their code: "
            + ", ".join(plugins),
            highlight=False,
            soft_wrap=True,
        )

    try:
        return load_suite(path, before_plugins=announce)
    except SuiteError as error:
        for problem in error.problems:
            errors.print(f"[red]error:[/] {problem}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None


def open_db(url: str | None) -> Engine:
    try:
        return open_database(url)
    except DatabaseError as error:
        raise fail(f"{error}; check --db or $LAYERBENCH_DB") from None


@app.command()
def validate(suites: Annotated[list[Path], typer.Argument(help="Suite files.")]) -> None:
    """Check suites without running anything."""
    for path in suites:
        suite = load(path)
        console.print(f"[green]ok[/] {path}: {len(plan_suite(suite))} trials")


@app.command()
def plan(suite_path: SuiteArg, db: DbOption = None) -> None:
    """Print the suite's trials (every sweep point), which are stored, their value of the ranking
    metric, and (*) the sweep points that `rank` reports (`rank.tuning`)."""
    from harness.ranking import TrialOutcome, metric_value, select_tuned
    from harness.registry import METRICS

    suite = load(suite_path)
    trials = plan_suite(suite)
    engine, keys, metric = open_db(db), [t.key for t in trials], suite.rank.metric
    tune_metric = suite.rank.tune_metric or metric
    statuses = trial_statuses(engine, keys)
    stored = {r["key"]: TrialOutcome(**r) for r in stored_outcomes(engine, keys)}
    direction = METRICS.get(tune_metric).direction
    tuned = {
        o.key for o in select_tuned(stored.values(), tune_metric, direction, suite.rank.tuning)
    }
    lines = []
    for trial in trials:
        value = metric_value(stored[trial.key], metric) if trial.key in stored else None
        shown = "" if value is None else f"{value:.4g}"
        mark = "*" if trial.sweep and trial.key in tuned else " "
        status = statuses.get(trial.key, "pending")
        lines.append(f"{trial.key[:12]}  {status:>8}  {shown:>9} {mark} {trial.label}")
    # one unwrapped print: rendering 1,000 lines one by one was a third of `plan`'s time
    console.print("\n".join(lines), markup=False, highlight=False, soft_wrap=True)
    counts = Counter(statuses.get(t.key, "pending") for t in trials)
    console.print(f"{len(trials)} trials: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    if any(trial.sweep for trial in trials):
        rule = {
            "per_method": f"per method, the sweep point with the best mean {tune_metric} over "
            "its seeds",
            "per_seed": f"per seed, the sweep point with the best {tune_metric} (optimistic)",
        }[suite.rank.tuning]
        console.print(f"* the tuned result: {rule}")


def only_filter(trials: list[PlannedTrial], only: str | None) -> list[PlannedTrial]:
    """`--only method=a,b` keeps the trials of exactly those methods (also model=, task=, seed=);
    a malformed filter or an unknown name exits 2."""
    if not only:
        return trials
    try:
        return select_trials(trials, only)
    except SelectionError as error:
        raise fail(str(error)) from None


@app.command()
def run(
    suite_path: SuiteArg,
    db: DbOption = None,
    workers: Annotated[int, typer.Option(min=1, help="Trials run at once.")] = 1,
    only: Annotated[
        str | None, typer.Option(help="method=NAME,... (or model=, task=, seed=)")
    ] = None,
    force: Annotated[bool, typer.Option(help="Rerun trials that already have a result.")] = False,
    retry_failed: Annotated[bool, typer.Option(help="Rerun failed and timed-out trials.")] = False,
    no_mlflow: Annotated[bool, typer.Option("--no-mlflow", help="Do not log to MLflow.")] = False,
    backend: Annotated[
        str, typer.Option(help="local (--workers processes here) or ray (as the cluster allows).")
    ] = "local",
    ray_address: Annotated[
        str | None, typer.Option(help="Ray cluster to join (default: $RAY_ADDRESS or a local Ray).")
    ] = None,
    retries: Annotated[
        int, typer.Option("--ray-max-retries", min=0, help="Ray retries of a dead worker.")
    ] = 1,
) -> None:
    """Run every trial of a suite that has no stored result, then print the ranking."""
    if backend not in ("local", "ray"):
        raise fail(f"--backend must be local or ray (got '{backend}')")
    suite = load(suite_path)
    planned = plan_suite(suite)
    trials = only_filter(planned, only)
    engine = open_db(db)
    statuses = trial_statuses(engine, [t.key for t in trials])
    todo = [t for t in trials if force or runnable(statuses.get(t.key), retry_failed)]
    use_mlflow = suite.tracking.mlflow and not no_mlflow
    tracker = None
    if use_mlflow and (todo or unlogged_count(engine, suite.suite)):
        from harness.tracking import MLflowTracker

        tracker = MLflowTracker(engine)
        tracker.backfill(suite.suite)
    console.print(
        f"{suite.suite}: {len(trials)} trials, {len(trials) - len(todo)} stored, {len(todo)} to run"
    )
    from harness.ranking.suite import declared_ranking

    keys = [t.key for t in planned]
    ranking = declared_ranking(suite)
    if todo:
        if uses_hub_models(suite):
            offline_unless_hub_reachable()

        with suite_run(engine, suite.suite, suite.cadence, len(trials), ranking, keys) as record:
            ledger = StoreLedger(
                engine,
                record.id,
                force,
                retry_failed,
                on_finish=tracker.on_finish if tracker else None,
            )
            with RichProgress(len(todo)) as progress:
                if backend == "ray":
                    results = run_on_ray(todo, ledger, suite, ray_address, retries, progress)
                else:
                    from harness.runner.local import run_local

                    results = run_local(todo, ledger, workers, progress)
            record.n_ran = len(results)
    elif plan_changed(engine, suite.suite, keys):  # e.g. back to an older config: record it
        with suite_run(engine, suite.suite, suite.cadence, len(trials), ranking, keys):
            pass
    print_ranking(build_ranking(suite, engine))
    final = trial_statuses(engine, [t.key for t in trials])
    if any(status in FAILED_STATUSES for status in final.values()):
        raise typer.Exit(1)


def run_on_ray(
    todo: list[PlannedTrial],
    ledger: StoreLedger,
    suite: Suite,
    address: str | None,
    max_retries: int,
    progress: RichProgress,
) -> dict[str, TrialResult]:
    from harness.runner.ray_backend import RayUnavailableError, run_ray

    try:
        return run_ray(todo, ledger, address, suite.resources, max_retries, progress)
    except RayUnavailableError as error:
        raise fail(str(error)) from None


def uses_hub_models(suite: Suite) -> bool:
    """Does the suite load pretrained models or lm-eval tasks (which may reach the hub)?"""
    return any(
        isinstance(MODELS.entry(m["type"]), PretrainedModelEntry) for m in suite.models.values()
    ) or any(isinstance(TASKS.entry(t["type"]), EvalTaskEntry) for t in suite.tasks.values())


def runnable(status: str | None, retry_failed: bool) -> bool:
    if status is None or status in ACTIVE_STATUSES:
        return True
    return retry_failed and status in FAILED_STATUSES


def plan_changed(engine: Engine, suite: str, keys: list[str]) -> bool:
    """Do the suite's planned trials differ from those its latest run recorded?"""
    from harness.store.queries import recorded_plan

    found = recorded_plan(engine, suite)
    return found is None or found[1] != keys


def current_plan(suite: Suite) -> RankPlan:
    """What `rank` ranks of a suite file: its trials as planned now."""
    from harness.ranking.suite import plan_of

    return plan_of(suite, [trial.key for trial in plan_suite(suite)])


def build_ranking(
    suite: Suite, engine: Engine, metric: str | None = None, all_points: bool = False
) -> Ranking | None:
    """The ranking of the suite's current trials (`harness.ranking.suite.rank_suite`: the last
    nightly run's when it is newer than `layerbench run`'s)."""
    from harness.ranking.suite import rank_suite

    try:
        return rank_suite(engine, current_plan(suite), metric=metric, all_points=all_points)
    except RegistryError as error:
        raise fail(str(error)) from None


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
    ranking = build_ranking(suite, open_db(db), metric, all_points)
    if ranking is None:
        raise fail(
            f"no stored results for suite '{suite.suite}': run `layerbench run {suite_path}`"
        )
    if format == "table":
        print_ranking(ranking, width)
    elif format == "json":
        typer.echo(to_json(ranking, str(suite_path)))
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
    from leaderboard.html_report import report_command, write_html
    from leaderboard.report import ReportError, write_report

    suite = load(suite_path)
    try:
        plan = current_plan(suite)
        folder = out or Path("reports") / suite.suite
        if html is not None:
            command = report_command(suite_path, db, html, metric)
            path = write_html(open_db(db), suite, plan, html, command, metric)
        else:
            path = write_report(open_db(db), suite, plan, folder, metric)
    except ReportError as error:
        raise fail(str(error)) from None
    except RegistryError as error:
        raise fail(str(error)) from None
    console.print(f"wrote {path}")


@app.command()
def status(db: DbOption = None) -> None:
    """Trials stored per suite and status."""
    rows = status_counts(open_db(db))
    if not rows:
        console.print("no trials stored")
    for suite, trial_status, count in rows:
        console.print(f"{suite:<30} {trial_status:<9} {count}")


@app.command()
def methods(
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable.")] = False,
) -> None:
    """List every registered method, model, task and metric."""
    listing = {
        family: [
            {
                "name": e.name,
                "doc": e.doc,
                **({"direction": e.obj.direction} if family == "metric" else {}),
            }
            for e in registry.entries()
        ]
        for family, registry in FAMILIES.items()
    }
    if as_json:
        typer.echo(json.dumps(listing, indent=2))
        return
    for family, entries in listing.items():
        console.print(f"[bold]{family}[/]")
        for entry in entries:
            console.print(f"  {entry['name']:<20} {entry['doc']}", highlight=False)


@app.command()
def leaderboard(
    db: DbOption = None,
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to serve on.")] = 8501,
    host: Annotated[
        str, typer.Option(help="Address to listen on (0.0.0.0: every interface).")
    ] = "127.0.0.1",
) -> None:
    """Serve the leaderboard web app (leaderboard/); it opens the database read-only."""
    import os
    import sys

    from harness.store.db import database_url

    root = str(Path(__file__).resolve().parents[1])  # where the leaderboard package lies
    env = {
        **os.environ,
        "LAYERBENCH_DB": database_url(db),
        "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
    }
    command = [sys.executable, "-m", "leaderboard.serve", "--port", str(port), "--address", host]
    os.execve(sys.executable, command, env)  # the server replaces this process (and its signals)


@db_app.command("upgrade")
def db_upgrade(db: DbOption = None) -> None:
    """Create or migrate the results database to the latest schema."""
    from harness.store.db import database_url, redact

    open_db(db)
    console.print(f"database {redact(database_url(db))} is at the latest schema")


@data_app.command("install")
def data_install(
    name: Annotated[str, typer.Argument(help="The data set: bigbench.")],
    tasks: Annotated[
        list[str] | None, typer.Option("--task", help="A BIG-bench task (repeatable).")
    ] = None,
) -> None:
    """Download a data set once and extract what the local tasks need into the cache."""
    from harness.tasks import bigbench

    if name != "bigbench":
        raise fail(f"unknown data set '{name}'; known: bigbench")
    chosen = tuple(tasks) if tasks else bigbench.DEFAULT_TASKS
    for path in bigbench.install(chosen):
        console.print(f"[green]installed[/] {path}")


@app.command()
def cache() -> None:
    """Where models and data live, and which offline sources are installed."""
    from harness.cache import PACKAGES, cache_dir
    from harness.tasks.bigbench import data_dir

    console.print(f"[bold]cache[/] {cache_dir()}  (set $LAYERBENCH_CACHE to move it)")
    for package in PACKAGES:
        location = package.location()
        where = str(location) if location else f"[red]not installed[/]: {package.install}"
        console.print(f"  package {package.distribution:<12} {where}")
    for path in sorted((cache_dir() / "models").glob("*/config.json")):
        console.print(f"  model   {path.parent.name:<12} {path.parent}")
    installed = sorted(p.parent.name for p in data_dir().glob("*/task.json"))
    console.print(
        f"  bigbench tasks: {', '.join(installed) or 'none (layerbench data install bigbench)'}"
    )


SuitesDir = Annotated[Path, typer.Argument(help="A folder of suite files.")]
CadenceOption = Annotated[
    str, typer.Option(help="Run the suites of this cadence (commit|nightly|weekly|manual).")
]
WorkersOption = Annotated[int, typer.Option(min=1, help="Trials run at once.")]
HostClassOption = Annotated[
    str | None,
    typer.Option(help="Compare with runs of this host class (default: the GPUs, else the CPU)."),
]
ReportsOption = Annotated[Path, typer.Option(help="Where the nightly reports are written.")]
NotifyOption = Annotated[str | None, typer.Option(help="POST the JSON report to this URL.")]
NoMlflowOption = Annotated[bool, typer.Option("--no-mlflow", help="Do not log to MLflow.")]


@dataclass(frozen=True)
class NightlyArgs:
    suites_dir: Path
    cadence: str
    db: str | None
    workers: int
    host_class: str | None
    reports: Path
    notify: str | None
    skip_existing: bool
    mlflow: bool


def nightly_suites(directory: Path, cadence: str) -> list[tuple[Path, Suite]]:
    """The suites of `directory` (its *.yaml files) whose cadence is `cadence`."""
    if not directory.is_dir():
        raise fail(f"{directory}: no such folder of suite files")
    loaded = [(path, load(path)) for path in sorted(directory.glob("*.yaml"))]
    chosen = [(path, suite) for path, suite in loaded if suite.cadence == cadence]
    if not chosen:
        raise fail(f"no suite in {directory} has `cadence: {cadence}`")
    return chosen


def run_nightly(args: NightlyArgs, stop: threading.Event) -> int:
    """One nightly run of every suite of the cadence; returns the exit code (SPEC 10)."""
    from harness.nightly import report as reports
    from harness.nightly.run import (
        SuiteOutcome,
        exit_code,
        host_class,
        local_executor,
        machine,
        run_suite,
        today,
    )

    suites = nightly_suites(args.suites_dir, args.cadence)
    engine = open_db(args.db)
    if any(uses_hub_models(suite) for _, suite in suites):
        offline_unless_hub_reachable()
    host = args.host_class or host_class(machine())
    tracker = None
    if args.mlflow and any(suite.tracking.mlflow for _, suite in suites):
        from harness.tracking import MLflowTracker

        tracker = MLflowTracker(engine)
    outcomes = []
    for path, suite in suites:
        if stop.is_set():
            break
        on_finish = None
        if tracker is not None and suite.tracking.mlflow:
            on_finish = tracker.on_finish
        console.print(f"{suite.suite}: nightly run on {host}")
        outcome = run_suite(
            engine,
            SuiteOutcome(path, suite),
            local_executor(args.workers),
            stop,
            host,
            args.skip_existing,
            on_finish,
        )
        outcomes.append(outcome)
    if stop.is_set():
        errors.print("stopped: the running trials were killed and their claims released")
        return 1
    code = exit_code(outcomes)
    report = reports.build_report(outcomes, today(), code)
    for path in reports.write_report(report, args.reports):
        console.print(f"report: {path}")
    console.print(reports.markdown(report), markup=False, highlight=False)
    if args.notify:
        try:
            reports.notify(args.notify, report)
        except reports.NotifyError as error:
            errors.print(f"[yellow]warning:[/] {error}", highlight=False, soft_wrap=True)
    return code


@app.command()
def nightly(
    suites_dir: SuitesDir = Path("suites"),
    cadence: CadenceOption = "nightly",
    db: DbOption = None,
    workers: WorkersOption = 1,
    host_class: HostClassOption = None,
    reports: ReportsOption = Path("reports"),
    notify: NotifyOption = None,
    skip_existing: Annotated[
        bool,
        typer.Option(help="Skip a suite run today at this commit; resume an interrupted one."),
    ] = False,
    no_mlflow: NoMlflowOption = False,
) -> None:
    """Re-run every trial of the suites of a cadence and report regressions (exit 3)."""
    from harness.nightly.schedule import stop_on_signals

    args = NightlyArgs(
        suites_dir, cadence, db, workers, host_class, reports, notify, skip_existing, not no_mlflow
    )
    with stop_on_signals() as stop:
        code = run_nightly(args, stop)
    raise typer.Exit(code)


@app.command()
def schedule(
    cron: Annotated[str, typer.Option(help="When to run, in UTC: a cron expression.")],
    suites_dir: SuitesDir = Path("suites"),
    now: Annotated[bool, typer.Option(help="Also run once right away.")] = False,
    cadence: CadenceOption = "nightly",
    db: DbOption = None,
    workers: WorkersOption = 1,
    host_class: HostClassOption = None,
    reports: ReportsOption = Path("reports"),
    notify: NotifyOption = None,
    no_mlflow: NoMlflowOption = False,
) -> None:
    """Run `layerbench nightly` at the times of a cron expression until SIGTERM; a suite already
    run that day at the same commit is skipped."""
    from harness.nightly.schedule import CronError, check_cron, run_schedule, stop_on_signals

    try:
        check_cron(cron)
    except CronError as error:
        raise fail(str(error)) from None
    nightly_suites(suites_dir, cadence)  # fail now, not at 2 am
    args = NightlyArgs(
        suites_dir, cadence, db, workers, host_class, reports, notify, True, not no_mlflow
    )
    console.print(f"scheduled `layerbench nightly {suites_dir}` at '{cron}' (UTC)")
    with stop_on_signals() as stop:

        def job() -> None:
            try:
                code = run_nightly(args, stop)
            except typer.Exit as error:
                code = error.exit_code
            console.print(f"nightly run finished with exit code {code}")

        run_schedule(cron, job, stop, run_now=now)
    console.print("schedule stopped")


@app.command()
def alerts(
    db: DbOption = None,
    ack: Annotated[
        list[int] | None, typer.Option("--ack", help="Acknowledge this alert (repeatable).")
    ] = None,
    suite: Annotated[str | None, typer.Option(help="Only this suite's alerts.")] = None,
    show_all: Annotated[bool, typer.Option("--all", help="Acknowledged alerts too.")] = False,
) -> None:
    """List the nightly alerts not yet acknowledged, or acknowledge some."""
    from harness.store.nightly import acknowledge, stored_alerts

    engine = open_db(db)
    for alert_id in ack or []:
        if not acknowledge(engine, alert_id):
            raise fail(f"no alert #{alert_id}: `layerbench alerts --all` lists them")
        console.print(f"alert #{alert_id} acknowledged")
    if ack:
        return
    rows = stored_alerts(engine, suite, include_acknowledged=show_all)
    if not rows:
        console.print("no alerts" if show_all else "no alerts to acknowledge")
    for a in rows:
        change = "" if a.delta is None else f" {a.old_mean:.4g} -> {a.new_mean:.4g}"
        z = a.detail.get("z", "n/a") if a.z is None else f"{a.z:.3g}"  # +-inf: no spread
        extra = "" if a.p_value is None else f" p={a.p_value:.3g} z={z}"
        line = (
            f"#{a.id:<4} run #{a.suite_run_id:<4} {a.kind:<11} {a.direction:<6} {a.suite}/"
            f"{a.method}/{a.model}/{a.task} {a.metric}{change}{extra}"
            f"{' (acknowledged)' if a.acknowledged else ''}"
        )
        console.print(line, markup=False, highlight=False)
