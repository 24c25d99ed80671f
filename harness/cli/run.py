"""`layerbench run`: parse, run the suite through `harness.service.run_suite`, print the
ranking; exit 1 when a trial has no valid result."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Annotated

import typer
from sqlalchemy import Engine

from harness.cli.common import (
    DbOption,
    NoMlflowOption,
    SuiteArg,
    WorkersOption,
    app,
    fail,
    load,
    open_db,
)
from harness.cli.rank import build_ranking, print_ranking
from harness.console import RichProgress, console
from harness.runner.backend import Executor
from harness.runner.plan import SelectionError
from harness.service import RunOptions, RunPlan, SuiteRunResult, Tracker, run_suite
from harness.service.run import Display
from harness.spec import Suite

BACKENDS = ("local", "ray")


@app.command()
def run(
    suite_path: SuiteArg,
    db: DbOption = None,
    workers: WorkersOption = 1,
    only: Annotated[
        str | None, typer.Option(help="method=NAME,... (or model=, task=, seed=)")
    ] = None,
    force: Annotated[bool, typer.Option(help="Rerun trials that already have a result.")] = False,
    retry_failed: Annotated[bool, typer.Option(help="Rerun failed and timed-out trials.")] = False,
    no_mlflow: NoMlflowOption = False,
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
    if backend not in BACKENDS:
        raise fail(f"--backend must be local or ray (got '{backend}')")
    suite = load(suite_path)
    engine = open_db(db)
    if backend == "ray":
        executor = ray_executor(suite, ray_address, retries)
    else:
        from harness.runner.local import local_executor

        executor = local_executor(workers)
    options = RunOptions(only=only, force=force, retry_failed=retry_failed)
    tracker = None if no_mlflow else mlflow_tracker(engine)
    outcome = execute(suite, executor, engine, tracker, options)
    print_ranking(build_ranking(suite, engine))
    if outcome.failed:
        raise typer.Exit(1)


def execute(
    suite: Suite,
    executor: Executor,
    engine: Engine,
    tracker: Callable[[], Tracker] | None,
    options: RunOptions,
) -> SuiteRunResult:
    """`run_suite` with the console's display; a bad `--only` or no Ray exits 2."""
    from harness.runner.ray_backend import RayUnavailableError

    display = Display(announce=announce, progress=RichProgress)
    try:
        return run_suite(
            suite,
            executor=executor,
            store=engine,
            tracker=tracker,
            options=options,
            display=display,
        )
    except (SelectionError, RayUnavailableError) as error:
        raise fail(str(error)) from None


def announce(plan: RunPlan) -> None:
    console.print(
        f"{plan.suite}: {plan.n_trials} trials, {plan.n_stored} stored, {plan.n_todo} to run"
    )


def mlflow_tracker(engine: Engine) -> Callable[[], Tracker]:
    """A factory of the MLflow tracker (imports MLflow only when a run needs it)."""

    @cache
    def make() -> Tracker:
        from harness.tracking import MLflowTracker

        return MLflowTracker(engine)

    return make


def ray_executor(suite: Suite, address: str | None, retries: int) -> Executor:
    from harness.runner.ray_backend import ray_executor as on_ray

    return on_ray(address, suite.resources, retries)
