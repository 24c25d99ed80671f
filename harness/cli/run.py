"""`layerbench run`: parse, run the suite through `harness.service.run_suite`, print the
ranking; exit 1 when a trial has no valid result."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache, partial
from typing import TYPE_CHECKING, Annotated, Any

import typer

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
    from harness.spec.schema import SlurmSpec

BACKENDS = ("local", "ray", "slurm")


OnlyOption = Annotated[str | None, typer.Option(help="method=NAME,... (or model=, task=, seed=)")]
BackendOption = Annotated[
    str,
    typer.Option(help="local (--workers processes here), ray or slurm (as the cluster allows)."),
]
RayAddressOption = Annotated[
    str | None, typer.Option(help="Ray cluster to join (default: $RAY_ADDRESS or a local Ray).")
]
RayRetriesOption = Annotated[
    int, typer.Option("--ray-max-retries", min=0, help="Ray retries of a dead worker.")
]
SlurmArrayOption = Annotated[
    int | None, typer.Option(min=1, help="Trials queued or running on Slurm at once.")
]
SbatchOption = Annotated[
    list[str] | None, typer.Option(help="Another sbatch flag as KEY=VALUE (repeatable).")
]


@app.command()
def run(
    suite_path: SuiteArg,
    db: DbOption = None,
    workers: WorkersOption = 1,
    only: OnlyOption = None,
    force: Annotated[bool, typer.Option(help="Rerun trials that already have a result.")] = False,
    retry_failed: Annotated[bool, typer.Option(help="Rerun failed and timed-out trials.")] = False,
    no_mlflow: NoMlflowOption = False,
    backend: BackendOption = "local",
    ray_address: RayAddressOption = None,
    retries: RayRetriesOption = 1,
    slurm_partition: Annotated[str | None, typer.Option(help="Slurm partition.")] = None,
    slurm_account: Annotated[str | None, typer.Option(help="Slurm account.")] = None,
    slurm_qos: Annotated[str | None, typer.Option(help="Slurm quality of service.")] = None,
    slurm_array_parallelism: SlurmArrayOption = None,
    sbatch: SbatchOption = None,
) -> None:
    """Run every trial of a suite that has no stored result, then print the ranking."""
    if backend not in BACKENDS:
        raise fail(f"--backend must be local, ray or slurm (got '{backend}')")
    suite = load(suite_path)
    flags = {
        "partition": slurm_partition,
        "account": slurm_account,
        "qos": slurm_qos,
        "array_parallelism": slurm_array_parallelism,
    }
    slurm = partial(slurm_settings, suite.slurm, flags, sbatch or [])
    executor = executor_for(suite, backend, workers, (ray_address, retries), slurm)
    logs_beside(db)  # before the fork server starts: its trials inherit the file
    prepare_early(suite, executor)
    from harness.service import RunOptions

    engine = open_db(db)
    options = RunOptions(only=only, force=force, retry_failed=retry_failed)
    tracker = None if no_mlflow else mlflow_tracker(engine)
    outcome = execute(suite, executor, engine, tracker, options)
    print_ranking(build_ranking(suite, engine))
    if outcome.failed:
        raise typer.Exit(1)


def executor_for(
    suite: Suite,
    backend: str,
    workers: int,
    ray: tuple[str | None, int],
    slurm: Callable[[], SlurmSpec],
) -> Executor:
    """The backend's executor: `ray` is (address, retries), `slurm` gives the Slurm settings."""
    if backend == "ray":
        return ray_executor(suite, *ray)
    if backend == "slurm":
        return slurm_executor(suite, slurm())
    from harness.runner.local import local_executor

    return local_executor(workers)


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
    from harness.runner.ray_backend import RayUnavailableError
    from harness.runner.slurm_backend import SlurmUnavailableError
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
    except (SelectionError, RayUnavailableError, SlurmUnavailableError) as error:
        raise fail(str(error)) from None


def announce(plan: RunPlan) -> None:
    most = f" (sequential seeds: at most {plan.n_most} trials)" if plan.n_most else ""
    console.print(
        f"{plan.suite}: {plan.n_trials} trials, {plan.n_stored} stored, {plan.n_todo} to run" + most
    )


def show_look(text: str) -> None:
    console.print(text, markup=False, highlight=False, soft_wrap=True)


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


def slurm_settings(spec: SlurmSpec, flags: dict[str, Any], sbatch: list[str]) -> SlurmSpec:
    """The suite's `slurm:` section with the command line's `--slurm-*` and `--sbatch` over it;
    a `--sbatch` without `=` exits 2."""
    extra = dict(spec.sbatch)
    for flag in sbatch:
        key, equals, value = flag.partition("=")
        if not equals or not key:
            raise fail(f"--sbatch takes KEY=VALUE, e.g. --sbatch constraint=a100 (got '{flag}')")
        extra[key.lstrip("-")] = value
    chosen = {name: value for name, value in flags.items() if value is not None}
    return spec.model_copy(update={**chosen, "sbatch": extra})


def slurm_executor(suite: Suite, slurm: SlurmSpec) -> Executor:
    from harness.runner.slurm_backend import slurm_executor as on_slurm

    return on_slurm(suite.resources, slurm)
