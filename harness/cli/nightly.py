"""`layerbench nightly`, `schedule` and `alerts`: re-running the suites of a cadence through
`harness.service.run_suite` and reporting changes (exit 3)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from harness.cli.backends import BackendChoice, with_backend_options
from harness.cli.common import DbOption, NoMlflowOption, WorkersOption, app, fail, load, open_db
from harness.cli.run import mlflow_tracker
from harness.console import RichProgress, console, errors

if TYPE_CHECKING:
    from harness.spec import Suite
    from harness.store.models import Alert

SuitesDir = Annotated[Path, typer.Argument(help="A folder of suite files.")]
CadenceOption = Annotated[
    str, typer.Option(help="Run the suites of this cadence (commit|nightly|weekly|manual).")
]
HostClassOption = Annotated[
    str | None,
    typer.Option(help="Compare with runs of this host class (default: the GPUs, else the CPU)."),
]
ReportsOption = Annotated[Path, typer.Option(help="Where the nightly reports are written.")]
NotifyOption = Annotated[str | None, typer.Option(help="POST the JSON report to this URL.")]


@dataclass(frozen=True)
class NightlyArgs:
    suites_dir: Path
    cadence: str
    db: str | None
    backend: BackendChoice
    host_class: str | None
    reports: Path
    notify: str | None
    skip_existing: bool
    mlflow: bool


def nightly_suites(
    directory: Path, cadence: str, gpus: int | None = None
) -> list[tuple[Path, Suite]]:
    """The suites of `directory` (its *.yaml files) whose cadence is `cadence`; with `gpus`,
    the GPUs of this machine where their trials run here, their devices are checked."""
    if not directory.is_dir():
        raise fail(f"{directory}: no such folder of suite files")
    loaded = [(path, load(path)) for path in sorted(directory.glob("*.yaml"))]
    chosen = [(path, suite) for path, suite in loaded if suite.cadence == cadence]
    if gpus is not None:  # only the suites of this cadence run here
        chosen = [(path, load(path, gpus)) for path, _ in chosen]
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
        machine,
        run_nightly_suite,
        today,
    )
    from harness.runner.backend import BackendUnavailableError

    suites = nightly_suites(args.suites_dir, args.cadence, args.backend.gpus_here())
    engine = open_db(args.db)
    host = args.host_class or host_class(machine())
    tracker = mlflow_tracker(engine) if args.mlflow else None
    outcomes = []
    for path, suite in suites:
        if stop.is_set():
            break
        console.print(f"{suite.suite}: nightly run on {host} ({args.backend.name} backend)")
        executor = args.backend.executor(suite)
        outcome = SuiteOutcome(path, suite)
        try:
            outcomes.append(
                run_nightly_suite(
                    engine, outcome, executor, stop, host, args.skip_existing, tracker, RichProgress
                )
            )
        except BackendUnavailableError as error:
            raise fail(str(error)) from None
    if stop.is_set():
        errors.print("stopped: the running trials were killed and their claims released")
        return 1
    code = exit_code(outcomes)
    publish(reports.build_report(outcomes, today(), code), args)
    return code


def publish(report: dict[str, Any], args: NightlyArgs) -> None:
    """Write the report's files, print it, and POST it to `--notify` (a warning if that fails)."""
    from harness.nightly import report as reports

    for path in reports.write_report(report, args.reports):
        console.print(f"report: {path}")
    console.print(reports.markdown(report), markup=False, highlight=False)
    if args.notify:
        try:
            reports.notify(args.notify, report)
        except reports.NotifyError as error:
            errors.print(f"[yellow]warning:[/] {error}", highlight=False, soft_wrap=True)


@app.command()
@with_backend_options
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
    *,
    backend: BackendChoice,
) -> None:
    """Re-run every trial of the suites of a cadence and report regressions (exit 3)."""
    from harness.nightly.schedule import stop_on_signals

    args = NightlyArgs(
        suites_dir, cadence, db, backend, host_class, reports, notify, skip_existing, not no_mlflow
    )
    with stop_on_signals() as stop:
        code = run_nightly(args, stop)
    raise typer.Exit(code)


@app.command()
@with_backend_options
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
    *,
    backend: BackendChoice,
) -> None:
    """Run `layerbench nightly` at the times of a cron expression until SIGTERM; a suite already
    run that day at the same commit is skipped."""
    from harness.nightly.schedule import CronError, check_cron, run_schedule, stop_on_signals

    try:
        check_cron(cron)
    except CronError as error:
        raise fail(str(error)) from None
    nightly_suites(suites_dir, cadence, backend.gpus_here())  # fail now, not at 2 am
    args = NightlyArgs(
        suites_dir, cadence, db, backend, host_class, reports, notify, True, not no_mlflow
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
        console.print(alert_line(a), markup=False, highlight=False)


def alert_line(a: Alert) -> str:
    from harness.ranking.table import EMPTY

    change = "" if a.delta is None else f" {a.old_mean:.4g} -> {a.new_mean:.4g}"
    z = a.detail.get("z", EMPTY) if a.z is None else f"{a.z:.3g}"  # +-inf: no spread
    extra = "" if a.p_value is None else f" p={a.p_value:.3g} z={z}"
    return (
        f"#{a.id:<4} run #{a.suite_run_id:<4} {a.kind:<11} {a.direction:<6} {a.suite}/"
        f"{a.method}/{a.model}/{a.task} {a.metric}{change}{extra}"
        f"{' (acknowledged)' if a.acknowledged else ''}"
    )
