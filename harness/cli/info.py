"""`layerbench validate`, `methods`, `versions`, `leaderboard`, `db upgrade`, `data install`
and `cache`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from harness.cli.common import DbOption, app, data_app, db_app, fail, load, open_db
from harness.console import console, errors

if TYPE_CHECKING:
    from harness.registry import Metric


@app.command()
def validate(suites: Annotated[list[Path], typer.Argument(help="Suite files.")]) -> None:
    """Check suites without running anything."""
    from harness.spec.plan import plan_suite

    for path in suites:
        suite = load(path)
        console.print(f"[green]ok[/] {path}: {len(plan_suite(suite))} trials")


@app.command()
def methods(
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable.")] = False,
) -> None:
    """List every registered method, model, task, metric (with its unit) and backend, and where
    each comes from (built-in, a plugin module, an installed plugin package and its version)."""
    from harness.registry import BACKENDS, FAMILIES
    from harness.spec.plugins import PluginImportError, installed_plugins, origin

    try:
        installed_plugins()
    except PluginImportError as error:
        raise fail(str(error)) from None
    listing = {
        family: [
            {
                "name": e.name,
                "doc": e.doc,
                "origin": origin(e),
                **metric_fields(e.obj if family == "metric" else None),
            }
            for e in registry.entries()
        ]
        for family, registry in {**FAMILIES, "backend": BACKENDS}.items()
    }
    if as_json:
        typer.echo(json.dumps(listing, indent=2))
        return
    for family, entries in listing.items():
        console.print(f"[bold]{family}[/]")
        for entry in entries:
            unit = f" [{entry['unit']}]" if entry.get("unit") else ""
            shown = "" if entry["origin"] == "built-in" else f" ({entry['origin']})"
            console.print(
                f"  {entry['name']:<20} {entry['doc']}{unit}{shown}", highlight=False, markup=False
            )


def plugin_sources() -> list[str]:
    """One line per plugin entry: its origin and source digest, which the keys of its trials
    carry (an edit to it reruns them; `layerbench status` names it among the changes)."""
    from harness.spec.plugins import installed_plugins, origin, plugin_digest, plugin_entries

    installed_plugins()
    return [
        f"plugin entry {key}:{e.name} from {origin(e)}: source {plugin_digest(e)[:12]}"
        for key, e in plugin_entries()
    ]


def metric_fields(metric: Metric | None) -> dict[str, str]:
    """What a metric's listing adds to its name and description: its direction and unit."""
    return {} if metric is None else {"direction": metric.direction, "unit": metric.unit}


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

    from harness.store.url import database_url

    root = str(Path(__file__).resolve().parents[1])  # where the leaderboard package lies
    env = {
        **os.environ,
        "LAYERBENCH_DB": database_url(db),
        "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
    }
    command = [sys.executable, "-m", "leaderboard.serve", "--port", str(port), "--address", host]
    os.execve(sys.executable, command, env)  # the server replaces this process (and its signals)


@app.command()
def versions(
    update: Annotated[
        bool, typer.Option("--update", help="Record the entries' current sources and versions.")
    ] = False,
    same_results: Annotated[
        list[str] | None,
        typer.Option(help="FAMILY:NAME whose code changed but whose results cannot (repeatable)."),
    ] = None,
) -> None:
    """Check (or record) that no built-in method's code changed without a version bump."""
    from harness.runner import sources

    if not update:
        found = sources.check()
        for problem in found:
            errors.print(f"[red]error:[/] {problem}", highlight=False, soft_wrap=True)
        if found:
            raise typer.Exit(2)
        console.print(f"ok: every built-in entry matches {sources.LOCK.name}")
        for line in plugin_sources():
            console.print(line, highlight=False, markup=False)
        return
    try:
        changed = sources.update(same_results or ())
    except sources.UnversionedChangeError as error:
        raise fail(str(error)) from None
    console.print(f"recorded {len(changed)} changed entries: {', '.join(changed) or 'none'}")


@db_app.command("upgrade")
def db_upgrade(db: DbOption = None) -> None:
    """Create or migrate the results database to the latest schema."""
    from harness.store.db import redact
    from harness.store.url import database_url

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
