"""`layerbench run/rank` end to end on real tiny trials: a diverging method loses, a subset
without the baseline ranks, piped tables are never cut, superseded trials leave the ranking and
the leaderboard shows what the CLI shows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest
from typer.testing import CliRunner

from benchmarks.fake_results import fake_result, store
from harness.cli import app
from harness.ranking.suite import rank_suite
from harness.runner.plan import plan_suite
from harness.spec import load_suite
from harness.store.db import make_engine, suite_run, upgrade
from tests.conftest import ROOT, write_suite

SANE_ABSURD = """
sane: {optimizer: {name: sgd, lr: 0.01}}
absurd: {optimizer: {name: sgd, lr: 1.0e+6}, train: {grad_clip: null}}
"""


def layerbench(*args: str) -> subprocess.CompletedProcess[str]:
    """`layerbench ARGS` in a subprocess, its stdout a pipe (not a terminal)."""
    command = [sys.executable, "-m", "harness", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)


def ranked(suite: Path) -> dict[str, Any]:
    done = layerbench("rank", str(suite), "--format", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def keys(ranking: dict[str, Any], method: str) -> set[str]:
    return {t["key"] for row in ranking["rows"] if row["method"] == method for t in row["trials"]}


@pytest.mark.slow
def test_sane_beats_absurd_and_only_current_trials_are_ranked_everywhere(tmp_path: Path) -> None:
    suite = write_suite(tmp_path, SANE_ABSURD)
    suite.write_text(suite.read_text().replace("baseline: pre-ln", "baseline: sane"))

    # a subset without the baseline: ranked, the absence said, no traceback
    subset = layerbench("run", str(suite), "--no-mlflow", "--only", "method=absurd")
    assert "Traceback" not in subset.stderr + subset.stdout, subset.stderr
    assert subset.returncode == 0, subset.stderr
    assert "baseline 'sane' has no results" in subset.stdout

    full = layerbench("run", str(suite), "--no-mlflow", "--workers", "2")
    assert full.returncode == 0, full.stderr
    ranking = ranked(suite)
    rows = {row["method"]: row for row in ranking["rows"]}
    assert rows["sane"]["win_rate"] > rows["absurd"]["win_rate"]
    assert (rows["absurd"]["verdict"], rows["absurd"]["mean"]) == ("worse", None)
    assert rows["absurd"]["failure"] == "diverged"

    # piped: the full width, nothing cut; --width wraps (folds) instead of cutting
    table = layerbench("rank", str(suite))
    assert table.returncode == 0 and "…" not in table.stdout
    assert max(map(len, table.stdout.splitlines())) > 80
    assert "seeds needed" in table.stdout and "95% CI: t-interval" in table.stdout
    narrow = layerbench("rank", str(suite), "--width", "70")
    assert max(map(len, narrow.stdout.splitlines())) <= 70 and "…" not in narrow.stdout
    markdown = layerbench("rank", str(suite), "--format", "md").stdout
    assert "| absurd |" in markdown and "| diverged |" in markdown and "None" not in markdown

    # change one method's config and rerun: its old trials are superseded everywhere
    old = keys(ranking, "absurd")
    suite.write_text(suite.read_text().replace("lr: 1.0e+6", "lr: 1.0e+5"))
    again = layerbench("run", str(suite), "--no-mlflow", "--workers", "2")
    assert again.returncode == 0, again.stderr
    current = ranked(suite)
    assert keys(current, "absurd") and not keys(current, "absurd") & old
    assert keys(current, "sane") == keys(ranking, "sane")

    at = AppTest.from_file(str(ROOT / "leaderboard" / "app.py"), default_timeout=60)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    shown = at.dataframe[1].value
    groups = current["tables"][0]
    cells = [
        [cell["value"] for cell in row] for section in groups["sections"] for row in section["rows"]
    ]
    assert list(shown["method"]) == [row[groups["header"].index("method")] for row in cells]
    for column in ("rank", "win rate", "seeds failed", "n"):
        if column in groups["header"]:
            expected = [row[groups["header"].index(column)] for row in cells]
            assert list(shown[column]) == expected, column
    assert list(shown["n"]) == [row["n"] for row in current["rows"]]


def test_a_reverted_config_is_the_current_plan_again_without_rerunning(tmp_path: Path) -> None:
    """Config A stored, then config B stored; `run` of A again runs nothing and records A's plan,
    so the suite's recorded ranking (the leaderboard's) ranks A's trials, not B's."""
    database = make_engine(os.environ["LAYERBENCH_DB"])
    upgrade(database)
    rng = np.random.default_rng(0)
    suite = write_suite(tmp_path, "pre-ln: {}\npost-ln: {norm: {placement: post}}")
    first = plan_suite(load_suite(suite))
    store(database, [(t, fake_result("done", 1.5 + t.seed / 10, rng)) for t in first])
    suite.write_text(suite.read_text().replace("placement: post", "placement: peri"))
    second = plan_suite(load_suite(suite))
    new = [t for t in second if t not in first]
    store(database, [(t, fake_result("done", 1.4 + t.seed / 10, rng)) for t in new])
    with suite_run(database, "tiny", "manual", len(second), None, [t.key for t in second]):
        pass  # as `run` records its whole plan
    assert {t.key for t in first} != {t.key for t in second}
    by_name = rank_suite(database, "tiny")
    assert by_name is not None
    ranked = {t["key"] for row in by_name.rows for t in row.trials}
    assert ranked == {t.key for t in second}

    suite.write_text(suite.read_text().replace("placement: peri", "placement: post"))
    result = CliRunner().invoke(app, ["run", str(suite), "--no-mlflow"])
    assert result.exit_code == 0, result.output
    assert "0 to run" in result.output
    again = rank_suite(database, "tiny")
    assert again is not None
    assert {t["key"] for row in again.rows for t in row.trials} == {t.key for t in first}
