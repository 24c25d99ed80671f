"""CLI start-up (issue 14): validating, planning, status, ranking and the leaderboard's data layer
import neither torch nor transformers nor mlflow; registries list names and schemas lazily."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.factories import ROOT, run_process, write_suite

HEAVY = ("torch", "transformers", "mlflow")

PROBE = """
import json, sys
from typer.testing import CliRunner
from harness.cli import app
runner = CliRunner()
codes = {}
for name, args in json.loads(sys.argv[1]).items():
    codes[name] = runner.invoke(app, args).exit_code
import leaderboard.data, leaderboard.tables, leaderboard.filters  # the app's data layer
heavy = [m for m in json.loads(sys.argv[2]) if m in sys.modules]
print(json.dumps({"codes": codes, "heavy": heavy}))
"""


@pytest.mark.slow
def test_light_commands_import_no_torch_transformers_or_mlflow(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'light.db'}"
    suite = str(ROOT / "suites" / "quickstart.yaml")
    commands = {
        "validate": ["validate", *map(str, sorted((ROOT / "suites").glob("*.yaml")))],
        "plan": ["plan", suite, "--db", db],
        "status": ["status", "--db", db],
        "rank": ["rank", suite, "--db", db],  # no results yet: a clear error, exit 2
    }
    report = probe(tmp_path, PROBE, json.dumps(commands), json.dumps(HEAVY))
    assert report["codes"] == {"validate": 0, "plan": 0, "status": 0, "rank": 2}
    assert report["heavy"] == []


def probe(tmp_path: Path, script: str, *args: str) -> dict[str, Any]:
    """Run `script` in a fresh interpreter (the repository on its path) and read the JSON report
    it prints last."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


HELP_PROBE = """
import json, sys
import typer.main
from typer.testing import CliRunner
from harness.cli import app
def paths(command, path):
    yield path
    for name, sub in getattr(command, "commands", {}).items():
        yield from paths(sub, [*path, name])
runner = CliRunner()
codes = {" ".join(p): runner.invoke(app, [*p, "--help"]).exit_code
         for p in paths(typer.main.get_command(app), [])}
heavy = [m for m in json.loads(sys.argv[1]) if m in sys.modules]
print(json.dumps({"codes": codes, "heavy": heavy}))
"""


def test_help_of_every_command_imports_no_database_or_validation_library(tmp_path: Path) -> None:
    """`layerbench --help` and `layerbench SUBCOMMAND --help` (issue 23: < 0.3 s) load Typer and
    Rich only: not SQLAlchemy or Alembic (the group callback's database URL comes from
    `harness.store.url`), not Pydantic (Typer's adapter for the group's unset `--help` flag;
    `harness.cli.common.Group`), not numpy."""
    heavy = ("sqlalchemy", "alembic", "pydantic", "numpy", *HEAVY)
    report = probe(tmp_path, HELP_PROBE, json.dumps(heavy))
    assert {"", "run", "rank", "db upgrade", "data install"} <= set(report["codes"])
    assert set(report["codes"].values()) == {0}
    assert report["heavy"] == []


TRIAL_PROBE = """
import json, sys
from harness.runner.trial import run_trial
from harness.spec import load_suite
from harness.spec.plan import plan_suite
result = run_trial(plan_suite(load_suite(sys.argv[1]))[0].config)
stack = [m for m in ("transformers", "hqq", "torchao", "lm_eval")
         if m in sys.modules]
print(json.dumps({"status": str(result.status), "stack": stack}))
"""


@pytest.mark.slow
def test_a_trial_of_the_built_in_gpt_imports_no_transformers(tmp_path: Path) -> None:
    """The built-in gpt is plain PyTorch (issue 23): training and evaluating it in a fresh
    process imports neither transformers (half a second) nor the quantization libraries and
    lm-eval that its model stack pulls in (seconds in every fork server, Ray worker and Slurm
    job)."""
    suite = write_suite(tmp_path, "pre-ln: {}", steps=2, eval_every=1)
    report = probe(tmp_path, TRIAL_PROBE, str(suite))
    assert report == {"status": "done", "stack": []}


def test_the_command_ends_with_its_status_its_whole_output_and_its_database_closed(
    tmp_path: Path,
) -> None:
    """`layerbench` ends without freeing its objects (`harness.cli.main`): the exit status is
    the command's, everything it printed arrives, and SQLite's write-ahead log is checkpointed
    and removed, as at a normal exit."""
    db = f"sqlite:///{tmp_path / 'exit.db'}"
    planned = run_process("plan", str(ROOT / "suites" / "quickstart.yaml"), "--db", db)
    assert planned.returncode == 0, planned.stderr
    assert planned.stdout.count("pending") == 7 and planned.stdout.endswith("6 trials: 6 pending\n")
    assert not list(tmp_path.glob("exit.db-*"))  # no -wal or -shm left beside it
    missing = run_process("run", str(tmp_path / "missing.yaml"), "--db", db)
    assert missing.returncode == 2
    assert "cannot read the suite" in missing.stderr


STARTUP_PROBE = """
import gc, json
from harness.utils import startup
with startup():
    paused = not gc.isenabled()
    import sqlalchemy
print(json.dumps({"paused": paused, "after": gc.isenabled(), "frozen": gc.get_freeze_count()}))
"""


def test_a_start_up_imports_without_the_collector_then_freezes_what_it_imported(
    tmp_path: Path,
) -> None:
    """A cold process (the fork server, a Slurm job, the CLI) imports with the cyclic
    collector paused; at the end of its start-up the survivors are frozen (never scanned
    again) and the collector runs again for the work that follows."""
    report = probe(tmp_path, STARTUP_PROBE)
    assert report["paused"] and report["after"]
    assert report["frozen"] > 10_000  # SQLAlchemy's classes, functions and tables


def test_a_library_that_takes_sigterm_leaves_the_process_its_own_handler() -> None:
    """Ray's driver installs a SIGTERM handler and keeps it after `ray.shutdown`: a pool forked
    later inherits it and its workers ignore `terminate()` (a test hung on it). The Ray backend
    and the tests' Ray run inside `kept_signal_handlers`."""
    import signal

    from harness.utils import kept_signal_handlers

    before = signal.getsignal(signal.SIGTERM)
    with kept_signal_handlers(signal.SIGTERM):
        signal.signal(signal.SIGTERM, lambda *_: None)  # what Ray's driver does
    assert signal.getsignal(signal.SIGTERM) is before
