"""`layerbench run/rank`: a diverging method loses (real tiny trials), a subset without the
baseline ranks, tables are never cut off a terminal, superseded trials leave the ranking, and the
leaderboard shows what the CLI shows."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import Engine
from streamlit.testing.v1 import AppTest

from harness.ranking.suite import rank_suite
from harness.spec import load_suite
from harness.spec.plan import PlannedTrial, plan_suite
from harness.store.db import make_engine, suite_run, upgrade
from tests.factories import ROOT, fake_result, invoke, store, write_suite

SANE_ABSURD = """
sane: {optimizer: {name: sgd, lr: 0.01}}
absurd: {optimizer: {name: sgd, lr: 1.0e+6}, train: {grad_clip: null}}
"""


def ranked(suite: Path) -> dict[str, Any]:
    done = invoke("rank", str(suite), "--format", "json")
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


def keys(ranking: dict[str, Any], method: str) -> set[str]:
    return {t["key"] for row in ranking["rows"] if row["method"] == method for t in row["trials"]}


@pytest.mark.slow
def test_sane_beats_absurd_and_a_run_without_the_baseline_ranks(tmp_path: Path) -> None:
    suite = write_suite(tmp_path, SANE_ABSURD, steps=10, eval_every=5)
    suite.write_text(suite.read_text().replace("baseline: pre-ln", "baseline: sane"))

    # a subset without the baseline: ranked, the absence said, no traceback
    subset = invoke("run", str(suite), "--no-mlflow", "--only", "method=absurd")
    assert subset.exit_code == 0 and "Traceback" not in subset.output, subset.output
    assert "baseline 'sane' has no results" in subset.output

    full = invoke("run", str(suite), "--no-mlflow", "--workers", "2")
    assert full.exit_code == 0, full.output
    ranking = ranked(suite)
    rows = {row["method"]: row for row in ranking["rows"]}
    assert rows["sane"]["win_rate"] > rows["absurd"]["win_rate"]
    assert (rows["absurd"]["verdict"], rows["absurd"]["mean"]) == ("worse", None)
    assert rows["absurd"]["failure"] == "diverged"

    # not a terminal: the full width, nothing cut; --width folds instead of cutting
    table = invoke("rank", str(suite)).stdout
    assert "…" not in table and max(map(len, table.splitlines())) > 80
    assert "seeds needed" in table and "95% CI: t-interval" in table
    narrow = invoke("rank", str(suite), "--width", "70").stdout
    assert max(map(len, narrow.splitlines())) <= 70 and "…" not in narrow
    markdown = invoke("rank", str(suite), "--format", "md").stdout
    assert "| absurd |" in markdown and "| diverged |" in markdown and "None" not in markdown


def two_configs(directory: Path) -> tuple[Engine, Path, list[PlannedTrial], list[PlannedTrial]]:
    """The tiny suite stored with post-ln as `post`, then with post-ln changed to `peri` (fake
    results); returns the database, the suite file (now `peri`) and both plans."""
    database = make_engine(os.environ["LAYERBENCH_DB"])
    upgrade(database)
    rng = np.random.default_rng(0)
    suite = write_suite(directory, "pre-ln: {}\npost-ln: {norm: {placement: post}}")
    first = plan_suite(load_suite(suite))
    store(database, [(t, fake_result("done", 1.5 + t.seed / 10, rng)) for t in first])
    suite.write_text(suite.read_text().replace("placement: post", "placement: peri"))
    second = plan_suite(load_suite(suite))
    new = [t for t in second if t not in first]
    store(database, [(t, fake_result("done", 1.4 + t.seed / 10, rng)) for t in new])
    with suite_run(database, "tiny", "manual", len(second), None, [t.key for t in second]):
        pass  # as `run` records its whole plan
    return database, suite, first, second


def ranked_keys(database: Engine) -> set[str]:
    """The trials the suite's recorded plan ranks (the leaderboard's ranking)."""
    ranking = rank_suite(database, "tiny")
    assert ranking is not None
    return {trial["key"] for row in ranking.rows for trial in row.trials}


def test_a_changed_method_supersedes_its_trials_in_the_cli_and_the_leaderboard(
    tmp_path: Path,
) -> None:
    database, suite, first, second = two_configs(tmp_path)
    new = [t for t in second if t not in first]
    superseded = {t.key for t in first if t not in second}

    current = ranked(suite)
    assert keys(current, "post-ln") == {t.key for t in new}
    at = AppTest.from_file(str(ROOT / "leaderboard" / "app.py"), default_timeout=60)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    shown = at.dataframe[1].value
    groups = current["tables"][0]
    cells = [
        [cell["value"] for cell in row] for section in groups["sections"] for row in section["rows"]
    ]
    for column in ("rank", "method", "mean", "win rate", "seeds failed"):
        expected = [row[groups["header"].index(column)] for row in cells]
        assert list(shown[column]) == pytest.approx(expected), column
    assert list(shown["n"]) == [row["n"] for row in current["rows"]] == [2, 2]
    assert not (keys(current, "post-ln") | ranked_keys(database)) & superseded


def test_a_reverted_config_is_the_current_plan_again_without_rerunning(tmp_path: Path) -> None:
    """`run` of the first config again runs nothing and records its plan, so the suite's
    recorded ranking (the leaderboard's) ranks the first config's trials again."""
    database, suite, first, second = two_configs(tmp_path)
    assert ranked_keys(database) == {t.key for t in second}
    suite.write_text(suite.read_text().replace("placement: peri", "placement: post"))
    result = invoke("run", str(suite), "--no-mlflow")
    assert result.exit_code == 0 and "0 to run" in result.output, result.output
    assert ranked_keys(database) == {t.key for t in first}
