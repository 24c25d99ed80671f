"""What every subcommand shares: the Typer apps, the common options, and turning user errors
into one red line and exit code 2 (SPEC section 10).

The command modules import their libraries (SQLAlchemy and Alembic, Pydantic, numpy) inside
the functions that use them, so `layerbench --help` loads none of them, nor does a
subcommand's `--help` (the group callback reads the database URL from `harness.store.url`;
`Group`) (issue 23)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from typer.core import TyperGroup, TyperOption

from harness.console import errors
from harness.logs import VERBOSE_ENV, log_file_beside, route_logs, written

if TYPE_CHECKING:
    from sqlalchemy import Engine
    from typer._click.core import Context

    from harness.spec import Suite


class Group(TyperGroup):
    """A command group whose `--help` flag defaults to False (Typer leaves it None): Typer
    passes a non-bool value through a Pydantic adapter, built on first use, so `layerbench
    SUBCOMMAND --help`, which leaves the group's flag unset, imported Pydantic for it."""

    def get_help_option(self, ctx: Context) -> TyperOption | None:
        option = super().get_help_option(ctx)
        if option is not None:
            option.default = False
        return option


app = typer.Typer(
    help="LayerBench: benchmark layerwise deep-learning methods.",
    cls=Group,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
db_app = typer.Typer(help="Database maintenance.", cls=Group, no_args_is_help=True)
app.add_typer(db_app, name="db")
data_app = typer.Typer(help="Offline data sets.", cls=Group, no_args_is_help=True)
app.add_typer(data_app, name="data")

SuiteArg = Annotated[Path, typer.Argument(help="A suite YAML file.")]
DbOption = Annotated[
    str | None, typer.Option("--db", help="SQLAlchemy URL (default: $LAYERBENCH_DB or sqlite)")
]
NoMlflowOption = Annotated[bool, typer.Option("--no-mlflow", help="Do not log to MLflow.")]
WorkersOption = Annotated[int, typer.Option(min=1, help="Trials run at once.")]


@app.callback()
def main(
    ctx: typer.Context,
    verbose: Annotated[
        bool, typer.Option("--verbose", help="Show third-party libraries' warnings and logs.")
    ] = False,
) -> None:
    """LayerBench: benchmark layerwise deep-learning methods."""
    if verbose:
        os.environ[VERBOSE_ENV] = "1"
    logs_beside(None)

    def say_where() -> None:
        if path := written():
            note = f"third-party messages: {path} (--verbose shows them)"
            errors.print(note, markup=False, highlight=False, soft_wrap=True)

    ctx.call_on_close(say_where)


def fail(message: str, code: int = 2) -> typer.Exit:
    errors.print(f"[red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def load(path: Path, gpus: int | None = None) -> Suite:
    """The suite at `path`, or its problems printed and exit 2; with `gpus`, the GPUs of this
    machine where its trials will run here, the devices they ask for are checked."""
    from harness.spec import SuiteError, load_suite

    def announce(plugins: list[str]) -> None:
        errors.print(
            f"[yellow]note:[/] {path} lists plugins; importing them runs their code: "
            + ", ".join(plugins),
            highlight=False,
            soft_wrap=True,
        )

    try:
        return load_suite(path, before_plugins=announce, gpus=gpus)
    except SuiteError as error:
        for problem in error.problems:
            errors.print(f"[red]error:[/] {problem}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None


def logs_beside(url: str | None) -> None:
    """Third-party messages go to a file beside the database `url` (in the cache folder where
    that cannot be written), in this process and in the processes it starts from now on."""
    from harness.cache import cache_dir
    from harness.store.url import database_url

    route_logs(log_file_beside(database_url(url)), fallback=cache_dir() / "layerbench.log")


def open_db(url: str | None) -> Engine:
    from harness.store.db import DatabaseError, open_database

    logs_beside(url)
    try:
        return open_database(url)
    except DatabaseError as error:
        raise fail(f"{error}; check --db or $LAYERBENCH_DB") from None
