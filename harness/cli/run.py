"""`layerbench run`: parse, run the suite through `harness.service.run_suite`, print the
ranking; exit 1 when a trial has no valid result."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Annotated

import typer

from harness.cli.backends import BackendChoice, with_backend_options
from harness.cli.common import (
    DbOption,
    NoMlflowOption,
    SuiteArg,
    WorkersOption,
    app,
    fail,
    load,
    logs_beside,
    open_db,
)
from harness.cli.rank import build_ranking, print_ranking
from harness.console import RichProgress, console

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from harness.runner.backend import Executor
    from harness.service import RunOptions, RunPlan, SuiteRunResult, Tracker
    from harness.spec import Suite

OnlyOption = Annotated[str | None, typer.Option(help="method=NAME,... (or model=, task=, seed=)")]


@app.command()
@with_backend_options
def run(
    suite_path: SuiteArg,
    db: DbOption = None,
    workers: WorkersOption = 1,
    only: OnlyOption = None,
    force: Annotated[bool, typer.Option(help="Rerun trials that already have a result.")] = False,
    retry_failed: Annotated[bool, typer.Option(help="Rerun failed and timed-out trials.")] = False,
    no_mlflow: NoMlflowOption = False,
    *,
    backend: BackendChoice,
) -> None:
    """Run every trial of a suite that has no stored result, then print the ranking."""
    suite = load(suite_path, backend.gpus_here())
    executor = backend.executor(suite)
    logs_beside(db)  # before the fork server starts: its trials inherit the file
    prepare_early(suite, executor)
    from harness.service import RunOptions

    engine = open_db(db)
    options = RunOptions(only=only, force=force, retry_failed=retry_failed)
    tracker = None if no_mlflow else mlflow_tracker(engine)
    outcome = execute(suite, executor, engine, tracker, options)
    print_ranking(build_ranking(suite, engine, path=suite_path))
    if outcome.failed:
        raise typer.Exit(1)


def prepare_early(suite: Suite, executor: Executor) -> None:
    """Start what the backend prepares (the local runner's warm fork server: seconds of imports)
    for every trial of the suite now, before the run's store, bookkeeping and tracking are even
    imported, and import the final ranking's statistics while it warms up. `run_suite` prepares
    again for the trials it runs, which keeps a server that suits them. A suite with nothing
    left to run started a server for nothing, in the background."""
    import importlib

    from harness.runner.backend import Prepares
    from harness.spec.plan import plan_suite

    if isinstance(executor, Prepares):
        executor.prepare(plan_suite(suite))
        importlib.import_module("scipy.stats")


def execute(
    suite: Suite,
    executor: Executor,
    engine: Engine,
    tracker: Callable[[], Tracker] | None,
    options: RunOptions,
) -> SuiteRunResult:
    """`run_suite` with the console's display; a bad `--only`, no Ray or no Slurm exits 2."""
    from harness.runner.backend import BackendUnavailableError
    from harness.service import run_suite
    from harness.service.run import Display
    from harness.spec.plan import SelectionError

    display = Display(announce=announce, progress=RichProgress, look=show_look)
    try:
        return run_suite(
            suite,
            executor=executor,
            store=engine,
            tracker=tracker,
            options=options,
            display=display,
        )
    except (SelectionError, BackendUnavailableError) as error:
        raise fail(str(error)) from None


def announce(plan: RunPlan) -> None:
    most = f" (sequential seeds: at most {plan.n_most} trials)" if plan.n_most else ""
    console.print(
        f"{plan.suite}: {plan.n_trials} trials, {plan.n_stored} stored, {plan.n_todo} to run" + most
    )
    if plan.other_cpus:
        from harness.service.run import mixed_cpus_note

        note = f"[yellow]warning:[/] {mixed_cpus_note(plan.other_cpus)}"
        console.print(note, highlight=False, soft_wrap=True)


def show_look(text: str) -> None:
    console.print(text, markup=False, highlight=False, soft_wrap=True)


def mlflow_tracker(engine: Engine) -> Callable[[], Tracker]:
    """A factory of the MLflow tracker (imports MLflow only when a run needs it)."""

    @cache
    def make() -> Tracker:
        from harness.tracking import MLflowTracker

        return MLflowTracker(engine)

    return make
