"""The `layerbench` command (SPEC section 10). Exit codes: 0 ok, 1 trials failed, 2 bad input,
3 nightly regression.

Thin subcommand modules that parse, call the library and render: `run` (through
`harness.service.run_suite`), `rank` (plan, rank, report, status), `nightly` (nightly,
schedule, alerts), `info` (validate, methods, leaderboard, db, data install, cache), `data` (data
prepare, list, verify) and `schema` (the JSON Schema of a suite, for editors); `common` holds the
Typer apps, the shared options and the error exits.
"""

import atexit

from harness.cli import data, info, nightly, rank, run, schema
from harness.cli.common import app
from harness.cli.rank import build_ranking
from harness.utils import begin_startup, exit_now

__all__ = ["app", "build_ranking", "data", "info", "main", "nightly", "rank", "run", "schema"]


def main() -> None:
    """`layerbench`: the app, then an exit that does not free the interpreter's objects.

    Tearing down the modules a command imported (MLflow, SQLAlchemy, SciPy, pandas) took 0.4-0.9
    s after its last line (docs/performance.md): `exit_now`, registered before the command
    imports them, runs after every exit handler they register (they run last-in, first-out),
    so those still close their databases, stop their workers and flush their logs. The cyclic
    garbage collector is paused for the command's imports (`harness.utils.begin_startup`)."""
    status = 1  # an uncaught exception: Python prints its traceback, then runs the handlers
    atexit.register(lambda: exit_now(status))
    begin_startup()  # the collector resumes when the trials start (RichProgress) or never
    try:
        app(prog_name="layerbench")
        status = 0
    except SystemExit as done:
        status = exit_status(done.code)
        raise


def exit_status(code: object) -> int:
    """The status Python gives `sys.exit(code)`: None is 0, a number itself, a message 1."""
    if code is None:
        return 0
    return code if isinstance(code, int) else 1
