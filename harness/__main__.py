"""`python -m harness` is the `layerbench` command."""

from harness.cli import app

app(prog_name="layerbench")
