"""The backend options of the commands that run trials (`run`, `nightly`, `schedule`): declared
once here and added to each command by `with_backend_options`, which hands the command the chosen
backend (`harness.registry.BACKENDS`) and its options as one `BackendChoice`."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from harness.cli.common import fail

if TYPE_CHECKING:
    from harness.registry import BackendFactory
    from harness.runner.backend import BackendOptions, Executor
    from harness.spec import Suite

BACKEND_PANEL = "Backend (`layerbench methods` lists them)"
BackendOption = Annotated[
    str,
    typer.Option(
        rich_help_panel=BACKEND_PANEL,
        help="Where trials run: local (--workers processes here), ray or slurm.",
    ),
]
RayAddressOption = Annotated[
    str | None,
    typer.Option(
        rich_help_panel=BACKEND_PANEL,
        help="Ray cluster to join (default: $RAY_ADDRESS or a local Ray).",
    ),
]
RayRetriesOption = Annotated[
    int,
    typer.Option(
        "--ray-max-retries",
        min=0,
        rich_help_panel=BACKEND_PANEL,
        help="Ray retries of a dead worker.",
    ),
]
SlurmPartitionOption = Annotated[
    str | None, typer.Option(rich_help_panel=BACKEND_PANEL, help="Slurm partition.")
]
SlurmAccountOption = Annotated[
    str | None, typer.Option(rich_help_panel=BACKEND_PANEL, help="Slurm account.")
]
SlurmQosOption = Annotated[
    str | None, typer.Option(rich_help_panel=BACKEND_PANEL, help="Slurm quality of service.")
]
SlurmArrayOption = Annotated[
    int | None,
    typer.Option(
        min=1, rich_help_panel=BACKEND_PANEL, help="Trials queued or running on Slurm at once."
    ),
]
SlurmFolderOption = Annotated[
    str | None,
    typer.Option(
        rich_help_panel=BACKEND_PANEL,
        help="Slurm jobs' folder, shared with the nodes (suite: slurm.folder).",
    ),
]
SlurmJobTimeOption = Annotated[
    float | None,
    typer.Option(
        min=120,
        rich_help_panel=BACKEND_PANEL,
        help="Seconds per Slurm job when the partition's limit is shorter than a trial: it is "
        "requeued from its checkpoints (suite: slurm.job_time_s).",
    ),
]
SbatchOption = Annotated[
    list[str] | None,
    typer.Option(
        rich_help_panel=BACKEND_PANEL, help="Another sbatch flag as KEY=VALUE (repeatable)."
    ),
]

BACKEND_OPTIONS: tuple[tuple[str, Any, Any], ...] = (
    ("backend", BackendOption, "local"),
    ("ray_address", RayAddressOption, None),
    ("retries", RayRetriesOption, 1),
    ("slurm_partition", SlurmPartitionOption, None),
    ("slurm_account", SlurmAccountOption, None),
    ("slurm_qos", SlurmQosOption, None),
    ("slurm_array_parallelism", SlurmArrayOption, None),
    ("slurm_folder", SlurmFolderOption, None),
    ("slurm_job_time_s", SlurmJobTimeOption, None),
    ("sbatch", SbatchOption, None),
)
"""Each backend option: its parameter name, its Typer annotation and its default."""
SLURM_FLAGS = ("partition", "account", "qos", "array_parallelism", "folder", "job_time_s")
"""The `slurm:` suite fields that a `--slurm-*` flag overrides."""


@dataclass(frozen=True)
class BackendChoice:
    """The backend a command's trials run on and the command line's options for it."""

    name: str
    factory: BackendFactory
    options: BackendOptions

    def gpus_here(self) -> int | None:
        """The GPUs of this machine when the trials run here (the local backend), else None:
        a cluster's workers check their own devices."""
        if self.name != "local":
            return None
        from harness.runner.placement import visible_gpus

        return len(visible_gpus())

    def executor(self, suite: Suite) -> Executor:
        """The backend's executor for `suite`; a malformed backend option exits 2."""
        from harness.runner.backend import BackendOptionError

        try:
            return self.factory(suite, self.options)
        except BackendOptionError as error:
            raise fail(str(error)) from None


def backend_choice(workers: int, chosen: dict[str, Any]) -> BackendChoice:
    """The backend named by `--backend` with its options (`chosen`: by parameter name, as in
    `BACKEND_OPTIONS`); an unknown name exits 2 with the closest known one."""
    from harness.lazy_registry import UnknownNameError
    from harness.registry import BACKENDS
    from harness.runner.backend import BackendOptions

    try:
        factory = BACKENDS.entry(chosen["backend"]).obj
    except UnknownNameError as error:
        raise fail(f"--backend: {error}") from None
    options = BackendOptions(
        workers=workers,
        ray_address=chosen["ray_address"],
        ray_retries=chosen["retries"],
        slurm={flag: chosen[f"slurm_{flag}"] for flag in SLURM_FLAGS},
        sbatch=tuple(chosen["sbatch"] or ()),
    )
    return BackendChoice(chosen["backend"], factory, options)


def with_backend_options(command: Callable[..., None]) -> Callable[..., None]:
    """A Typer command that takes `workers` and a keyword-only `backend: BackendChoice` gets
    the options of `BACKEND_OPTIONS` on its command line in place of `backend`; the backend is
    chosen (or the command exits 2) before the command runs."""
    signature = inspect.signature(command, eval_str=True)
    kept = [p for p in signature.parameters.values() if p.name != "backend"]
    added = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=kind)
        for name, kind, default in BACKEND_OPTIONS
    ]

    @functools.wraps(command)
    def with_backend(**arguments: Any) -> None:
        chosen = {name: arguments.pop(name) for name, _, _ in BACKEND_OPTIONS}
        command(**arguments, backend=backend_choice(arguments["workers"], chosen))

    parameters = [*kept, *added]
    with_backend.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    with_backend.__annotations__ = {p.name: p.annotation for p in parameters}
    return with_backend
