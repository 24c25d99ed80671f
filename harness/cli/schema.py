"""`layerbench schema`: the JSON Schema of a suite file, for editors."""

from __future__ import annotations

import json

import typer

from harness.cli.common import app


@app.command()
def schema() -> None:
    """Print the JSON Schema of a suite file, for editors.

    `layerbench schema > suite.schema.json`, then point the editor's YAML language server at
    it (README: "Editing a suite")."""
    from harness.spec.json_schema import suite_json_schema

    typer.echo(json.dumps(suite_json_schema(), indent=2))
