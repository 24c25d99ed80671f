"""Quiet terminal (issue 26): a `layerbench` command prints LayerBench's own lines only; the
libraries' warnings and INFO logs go to a log file beside the database, whose path is printed
once, and `--verbose` shows them."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness import logs
from tests.factories import ROOT

SUITE = """\
suite: quiet
seeds: [0]
defaults:
  time_limit_s: 300
  train: {steps: 2, batch_size: 4, warmup_steps: 1, eval_every: 2, eval_batches: 1}
models:
  gpt-2l: {type: gpt, n_layers: 2, d_model: 32, n_heads: 2, max_seq_len: 64}
tasks:
  bytes: {type: lm, corpus: shakespeare, tokenizer: byte, seq_len: 32}
methods:
  pre-ln: {}
  int8: {quantize: {scheme: torchao_int8}}
baseline: pre-ln
"""
THIRD_PARTY = ("torch", "transformers", "mlflow", "alembic", "warning", "info", "_pytree")


def layerbench(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAYERBENCH_", "MLFLOW_"))}
    env |= {"PYTHONPATH": str(ROOT), "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    env["LAYERBENCH_CACHE"] = str(tmp_path / "cache")  # MLflow migrates its empty store there
    command = [sys.executable, "-m", "harness", *args]
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)


@pytest.mark.slow
def test_run_prints_no_third_party_line_and_says_where_they_went(tmp_path: Path) -> None:
    """The int8 trial imports torchao (its "Failed to load ..." and torch's `_pytree` lines) and
    the run has MLflow migrate an empty store ("Creating initial MLflow database tables": the
    template of new stores, `harness.tracking.empty_store`, in a cache of its own)."""
    (tmp_path / "suite.yaml").write_text(SUITE)
    database = tmp_path / "results.db"
    done = layerbench(
        tmp_path, "run", "suite.yaml", "--workers", "2", "--db", f"sqlite:///{database}"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    log = tmp_path / "results.log"
    terminal = (done.stdout + done.stderr).lower().splitlines()
    leaked = [line for line in terminal if any(word in line for word in THIRD_PARTY)]
    assert leaked == [], leaked
    assert done.stderr.strip() == f"third-party messages: {log} (--verbose shows them)"
    written = log.read_text()
    assert "Creating initial MLflow database tables" in written
    assert "torchao" in written


def test_own_loggers_stay_on_the_terminal_and_libraries_go_to_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], restored_logging: None
) -> None:
    path = tmp_path / "x.log"
    library = logging.getLogger("somelibrary.module")
    library.addHandler(logging.StreamHandler(sys.stderr))
    library.propagate = False
    logs.route_logs(path)
    library.warning("library chatter")
    logging.getLogger("layerbench").warning("database busy")
    assert "database busy" in capsys.readouterr().err
    assert "library chatter" in path.read_text() and "database busy" not in path.read_text()
    assert logs.written() == path


def test_the_log_file_lies_beside_a_sqlite_database(tmp_path: Path) -> None:
    assert logs.log_file_beside(f"sqlite:///{tmp_path / 'a.db'}") == tmp_path / "a.log"
    assert logs.log_file_beside("postgresql://h/db") == Path("layerbench.log").resolve()
