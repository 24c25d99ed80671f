"""The `layerbench` command (SPEC section 10). Exit codes: 0 ok, 1 trials failed, 2 bad input,
3 nightly regression.

Thin subcommand modules that parse, call the library and render: `run` (through
`harness.service.run_suite`), `rank` (plan, rank, report, status), `nightly` (nightly,
schedule, alerts) and `info` (validate, methods, leaderboard, db, data, cache); `common` holds
the Typer apps, the shared options and the error exits.
"""

from harness.cli import info, nightly, rank, run
from harness.cli.common import app
from harness.cli.rank import build_ranking

__all__ = ["app", "build_ranking", "info", "nightly", "rank", "run"]
